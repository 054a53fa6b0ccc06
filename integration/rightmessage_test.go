//go:build integration

package integration_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// TestRightMessageOrNone runs three of the worker's rules on real peers,
// under one worker, in order: a recipient who replied STOP (Twilio 21610)
// is recorded, not dead-lettered, and a replay never reaches Twilio; a
// number that cannot exist is dead-lettered without a provider call; a
// stale event is skipped and acknowledged.
func TestRightMessageOrNone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{})
	w := rig.StartWorker(nil)

	attemptsTo := func(t *testing.T, phone string) int {
		t.Helper()
		attempts, err := rig.Twilio.Attempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range attempts {
			if a.To == phone {
				n++
			}
		}
		return n
	}

	t.Run("OptedOutIsRecordedNotDeadLettered", func(t *testing.T) {
		ev := faultEvent{ID: "evt-stop", Shipment: "SHP-stop", Phone: faultPhone("s", 1), Channels: []string{"sms"}}
		if err := rig.Twilio.Fail(ctx, double.Fault{To: ev.Phone, Status: 400, Code: 21610}); err != nil {
			t.Fatal(err)
		}
		rig.Publish(ctx, ev)
		// Recorded like a send (the compact record keeps no provider id; the
		// log line does).
		rig.WaitSentRecord(ctx, rig.Key("sms", ev.ID), 20*time.Second)
		rig.Publish(ctx, ev) // the replay
		if _, err := w.WaitLog("duplicate_suppressed", 1, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		rig.WaitCommitted(ctx, 20*time.Second)
		if n := attemptsTo(t, ev.Phone); n != 1 {
			t.Fatalf("Twilio was asked %d times for %s, want 1: the replay must not ask again", n, ev.Phone)
		}
		if got := faultEvents(w, "recipient_opted_out", ev.ID); len(got) != 1 || got[0]["provider_id"] != "opted-out:21610" {
			t.Fatalf("recipient_opted_out lines %v, want one naming provider id opted-out:21610", got)
		}
		rig.AssertNoDeadLetters(ctx, 2*time.Second)
	})

	t.Run("ImpossibleNumberIsDeadLetteredUnsent", func(t *testing.T) {
		const phone = "+15551234567" // area code 555 is assigned to no one
		ev := faultEvent{ID: "evt-555", Shipment: "SHP-555", Phone: phone, Channels: []string{"sms"}}
		recs := rig.Publish(ctx, ev)
		dl := faultDeadLetteredOnce(ctx, t, rig, w, recs[0], "permanent")
		reason := faultHeader(dl, "dlq.reason")
		if !strings.Contains(reason, "recipient.phone") || !strings.Contains(reason, "invalid phone number") || strings.Contains(reason, "5551234567") {
			t.Errorf("dlq.reason %q, want an invalid recipient.phone with the number masked", reason)
		}
		if n := attemptsTo(t, phone); n != 0 {
			t.Fatalf("Twilio was asked %d times for an impossible number, want 0", n)
		}
	})

	t.Run("StaleEventSkippedAndAcknowledged", func(t *testing.T) {
		ev := faultEvent{ID: "evt-stale", Shipment: "SHP-stale", Phone: faultPhone("s", 2), Channels: []string{"sms"}}
		var v map[string]any
		if err := json.Unmarshal(ev.JSON(), &v); err != nil {
			t.Fatal(err)
		}
		v["occurred_at"] = time.Now().Add(-72 * time.Hour).UTC().Format(time.RFC3339) // IDEMPOTENCY_TTL is 48h
		value, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		deadLettered := w.Count("event_dead_lettered")
		rig.PublishRecords(ctx, &kgo.Record{Key: []byte(ev.Shipment), Value: value})
		if _, err := w.WaitLog("stale_event_skipped", 1, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		rig.WaitCommitted(ctx, 20*time.Second)
		if n := attemptsTo(t, ev.Phone); n != 0 {
			t.Fatalf("Twilio was asked %d times for a stale event, want 0", n)
		}
		if n := w.Count("event_dead_lettered"); n != deadLettered {
			t.Fatalf("event_dead_lettered %d lines, want still %d: a stale event is not dead-lettered", n, deadLettered)
		}
		if _, ok, _ := rig.Redis.Get(ctx, rig.Key("sms", ev.ID)); ok {
			t.Errorf("the stale event left a key in Redis: it must claim nothing")
		}
	})
}
