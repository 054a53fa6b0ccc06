//go:build integration

package integration_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPoisonRecords interleaves records that can never be sent with good
// ones, all on one shipment key, so one partition and one order (issue 4,
// scenario 5). Each poison record reaches the dead letter topic once, with
// its reason, its original key, value and headers, and where it came from;
// every good record around it is sent, in order.
func TestPoisonRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{})
	// A small record limit, so an oversized record is cheap to make.
	const maxRecordBytes = 2048
	w := rig.StartWorker(map[string]string{"MAX_RECORD_BYTES": strconv.Itoa(maxRecordBytes)})

	const shipment = "SHP-poison"
	good := func(i int) faultEvent {
		return faultEvent{ID: "evt-poison-good-" + strconv.Itoa(i), Shipment: shipment, Phone: faultPhone("p", i), Channels: []string{"sms"}}
	}
	poisons := []struct {
		name   string
		value  []byte
		reason string // a part of dlq.reason that says what is wrong
	}{
		{"BadJSON", []byte(`{"event_id":"evt-poison-json","type":`), "not a JSON event"},
		{"MissingEventID", faultEvent{Shipment: shipment, Phone: faultPhone("q", 1), Channels: []string{"sms"}}.JSON(), "event_id: required"},
		{"UnknownChannel", faultEvent{ID: "evt-poison-channel", Shipment: shipment, Phone: faultPhone("q", 2), Channels: []string{"fax"}}.JSON(), "unknown channel"},
		{"UnknownType", faultEvent{ID: "evt-poison-type", Type: "shipment.teleported", Shipment: shipment, Phone: faultPhone("q", 3), Channels: []string{"sms"}}.JSON(), `unknown event type "shipment.teleported"`},
		{"InvalidPhone", faultEvent{ID: "evt-poison-phone", Shipment: shipment, Phone: "12345", Channels: []string{"sms"}}.JSON(), "recipient.phone"},
		{"NoAddressForChannel", faultEvent{ID: "evt-poison-noaddr", Shipment: shipment, Phone: faultPhone("q", 5), Channels: []string{"email"}}.JSON(), "no address for this channel"},
		{"TooLarge", []byte(`{"event_id":"evt-poison-large","padding":"` + strings.Repeat("x", 2*maxRecordBytes) + `"}`), "record too large"},
	}

	// good 0, poison 0, good 1, poison 1, ..., good n: every poison record
	// has a good one right before and right after it.
	var recs []*kgo.Record
	var goods []faultEvent
	poisonRecs := map[string]*kgo.Record{}
	for i, p := range poisons {
		g := good(i)
		goods = append(goods, g)
		recs = append(recs, &kgo.Record{Key: []byte(shipment), Value: g.JSON()})
		pr := &kgo.Record{
			Key:   []byte(shipment),
			Value: p.value,
			// A producer's own header, which the dead letter must keep.
			Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("trace-" + p.name)}},
		}
		poisonRecs[p.name] = pr
		recs = append(recs, pr)
	}
	last := good(len(poisons))
	goods = append(goods, last)
	recs = append(recs, &kgo.Record{Key: []byte(shipment), Value: last.JSON()})
	rig.PublishRecords(ctx, recs...)

	var goodPhones []string
	for _, g := range goods {
		goodPhones = append(goodPhones, g.Phone)
	}
	rig.WaitSMS(ctx, goodPhones, 30*time.Second)
	if _, err := w.WaitLog("event_dead_lettered", len(poisons), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	dls := rig.DeadLetters(ctx, w.Count("event_dead_lettered"))

	for _, p := range poisons {
		t.Run(p.name, func(t *testing.T) {
			rec := poisonRecs[p.name]
			var found []*kgo.Record
			for _, dl := range dls {
				if faultHeader(dl, "dlq.original.offset") == strconv.FormatInt(rec.Offset, 10) {
					found = append(found, dl)
				}
			}
			if len(found) != 1 {
				t.Fatalf("dead letters for offset %d: %d, want exactly 1", rec.Offset, len(found))
			}
			dl := found[0]
			reason := faultHeader(dl, "dlq.reason")
			t.Logf("dlq.reason: %q", reason)
			if !strings.Contains(reason, p.reason) {
				t.Errorf("dlq.reason %q does not contain %q", reason, p.reason)
			}
			for h, want := range map[string]string{
				"dlq.kind":               "permanent",
				"dlq.original.topic":     rig.Topic,
				"dlq.original.partition": strconv.Itoa(int(rec.Partition)),
				"dlq.original.timestamp": strconv.FormatInt(rec.Timestamp.UnixMilli(), 10),
				"trace-id":               "trace-" + p.name,
			} {
				if got := faultHeader(dl, h); got != want {
					t.Errorf("header %s = %q, want %q", h, got, want)
				}
			}
			if string(dl.Key) != shipment || string(dl.Value) != string(rec.Value) {
				t.Errorf("dead letter key %q, value of %d bytes; want the original key %q and value (%d bytes)",
					dl.Key, len(dl.Value), shipment, len(rec.Value))
			}
		})
	}

	t.Run("GoodRecordsAroundThemSentOnceInOrder", func(t *testing.T) {
		msgs, err := rig.Twilio.Messages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var order []string
		for _, m := range msgs {
			order = append(order, m.To)
		}
		if !slices.Equal(order, goodPhones) {
			t.Fatalf("SMS recipients in order %v, want %v (one per good record, in record order)", order, goodPhones)
		}
	})

	t.Run("NoOtherDeadLetters", func(t *testing.T) {
		if len(dls) != len(poisons) {
			t.Fatalf("dead letter topic holds %d records, want %d", len(dls), len(poisons))
		}
	})

	t.Run("OffsetsCommittedPastEveryRecord", func(t *testing.T) {
		rig.WaitCommitted(ctx, 15*time.Second)
	})
}
