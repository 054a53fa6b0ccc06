package domain_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/ports"
)

// TestService_LogLineFieldOrder holds the lines about a record to their
// fields, in the order an operator's log queries and the runbook see them:
// the record's (topic, partition, offset, event_id, shipment_id), the
// notification's channel, then the line's own.
func TestService_LogLineFieldOrder(t *testing.T) {
	t.Run("NotificationSent", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		if err := w.handle(t, event("evt-order", "sms", "email")); err != nil {
			t.Fatal(err)
		}
		want := []string{"time", "level", "msg", "topic", "partition", "offset", "event_id", "shipment_id", "channel", "to", "provider_id", "idempotency_checked"}
		lines := keysOf(t, w.logs.Bytes(), "notification_sent")
		if len(lines) != 2 {
			t.Fatalf("%d notification_sent lines, want 2:\n%s", len(lines), w.logs.String())
		}
		for _, keys := range lines {
			if !slices.Equal(keys, want) {
				t.Errorf("notification_sent fields\n got %v\nwant %v", keys, want)
			}
		}
	})
	t.Run("StaleEventSkipped", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) { c.MaxEventAge = time.Minute })
		old := strings.Replace(event("evt-stale", "sms"), `"type"`, `"occurred_at":"2020-01-01T00:00:00Z","type"`, 1)
		if err := w.handle(t, old); err != nil {
			t.Fatal(err)
		}
		want := []string{"time", "level", "msg", "topic", "partition", "offset", "event_id", "shipment_id", "type", "age", "max_age", "age_from"}
		lines := keysOf(t, w.logs.Bytes(), "stale_event_skipped")
		if len(lines) != 1 || !slices.Equal(lines[0], want) {
			t.Errorf("stale_event_skipped fields\n got %v\nwant [%v]\n%s", lines, want, w.logs.String())
		}
	})
}

// keysOf returns the keys, in the order written, of each JSON log line in
// logs whose msg is msg.
func keysOf(t *testing.T, logs []byte, msg string) [][]string {
	t.Helper()
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		if _, err := d.Token(); err != nil { // '{'
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		var keys []string
		isMsg := false
		for d.More() {
			k, err := d.Token()
			if err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			var v any
			if err := d.Decode(&v); err != nil {
				t.Fatalf("log line %q: %v", sc.Text(), err)
			}
			keys = append(keys, k.(string))
			isMsg = isMsg || (k == "msg" && v == msg)
		}
		if isMsg {
			out = append(out, keys)
		}
	}
	return out
}

// TestService_LogLinesCarryTheRecordsContext holds every line about a
// record to being written with the context the record was handled with,
// whichever line and level: a handler reads there what it adds to the
// record's lines (its trace and span, with tracing on).
func TestService_LogLinesCarryTheRecordsContext(t *testing.T) {
	w := newWorld(t, domain.FailOpen, func(c *domain.Config) {
		c.MaxEventAge = time.Minute
		c.Logger = slog.New(logtest.MarkHandler(c.Logger.Handler()))
	})
	w.sms.FailFunc = func(m ports.Message) error {
		if strings.HasPrefix(m.EventID, "evt-refused") {
			return ports.MarkPermanent(errors.New("status 400: code 21211"))
		}
		return nil
	}
	stale := strings.Replace(event("evt-old", "sms"), `"type"`, `"occurred_at":"2020-01-01T00:00:00Z","type"`, 1)
	for i, value := range []string{
		event("evt-sent", "sms", "email"),
		event("evt-sent", "sms", "email"), // a replay: duplicate_suppressed
		event("evt-refused", "sms"),
		stale,
	} {
		ctx := logtest.WithMark(context.Background(), fmt.Sprint("record-", i))
		rec := ports.Record{Topic: "shipment-events", Partition: 1, Offset: int64(i), Value: []byte(value), DeliveryID: ports.NewDeliveryID()}
		_ = w.svc.Handle(ctx, rec)
	}
	lines := w.logs.Events(t, "")
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l["msg"].(string)] = true
		if want := fmt.Sprint("record-", l["offset"]); l["mark"] != want {
			t.Errorf("%s of offset %v written with the context of %v, want %s", l["msg"], l["offset"], l["mark"], want)
		}
	}
	for _, msg := range []string{"notification_sent", "duplicate_suppressed", "notification_failed", "stale_event_skipped"} {
		if !seen[msg] {
			t.Errorf("no %s line; lines:\n%s", msg, w.logs.String())
		}
	}
}
