package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/internal/wait"
)

// TestRateLimit_PacedBacklogYieldsToARebalanceInKeyOrder runs a backlog
// of shipments, three SMS each, through one worker whose SMS_RATE_LIMIT
// makes every shipment's next record wait for a turn, more shipments than
// the wait allowed has turns, and starts a second worker of the group
// while they wait. Waiting for a turn holds no record longer than that
// wait (the claim TTL sets it to a second here): no wait beyond it is
// counted, and the partitions the newcomer is given reach it long before
// the rebalance timeout (a minute) that a handler sleeping through its
// session's end would cost. Every SMS is sent once, and each shipment's
// SMS reach the customer in the order of its events.
func TestRateLimit_PacedBacklogYieldsToARebalanceInKeyOrder(t *testing.T) {
	const shipments, steps = 16, 3
	// The newcomer holds partitions within this of its start: a join on
	// the embedded broker and the longest a record waits for a turn, with
	// room for a loaded machine; far under the rebalance timeout.
	const joinWithin = 15 * time.Second
	f := startFleet(t, map[string]string{
		"SMS_RATE_LIMIT":          "4",
		"SMS_RATE_BURST":          "1",
		"KAFKA_EXPECTED_REPLICAS": "2",
		"KAFKA_SESSION_TIMEOUT":   "6s",
		"IDEMPOTENCY_TIMEOUT":     "1s",
		"SEND_TIMEOUT":            "2s",
		// The longest wait for a turn is half of what the claim's lease
		// leaves after a send and the store calls: (7.1s - 2s - 2 × 1s -
		// 100ms - 1s) / 2 = 1s.
		"IDEMPOTENCY_CLAIM_TTL": "7100ms",
	})
	first := f.start(t)
	wait.For(t, waitWithin, "the first worker holding partitions", func() (bool, string) {
		return assigned(t, first), "not assigned"
	})

	// Each shipment's events are its key's records, in order; the
	// recipient's name tells the customer's SMS apart.
	ev, _ := sampleEvents(shipments * steps)
	for i := range ev {
		s, step := i%shipments, i/shipments
		ev[i].ShipmentID = fmt.Sprintf("SHP-ORDER-%03d", s)
		ev[i].Type = sampleTypes[step%len(sampleTypes)]
		ev[i].Recipient.Name = sampleNames[step]
		ev[i].Recipient.Phone = fmt.Sprintf("+3120%07d", 2000000+s)
		ev[i].Channels = []string{"sms"}
	}
	MustPublish(t, f.brokers, f.topic, eventMessages(ev)...)
	wait.For(t, waitWithin, "the first SMS paced out", func() (bool, string) {
		n := len(f.twilio.Messages())
		return n >= 3, fmt.Sprintf("%d sent", n)
	})

	joined := time.Now()
	second := f.start(t)
	wait.For(t, waitWithin, "both workers holding partitions", func() (bool, string) {
		a, b := assigned(t, first), assigned(t, second)
		return a && b, fmt.Sprintf("first assigned %v, second %v", a, b)
	})
	took := time.Since(joined)
	if took > joinWithin {
		t.Errorf("the second worker held partitions %v after it started, want within %v: a record waiting for its turn held the rebalance", took, joinWithin)
	}
	wait.For(t, waitWithin, "every SMS sent", func() (bool, string) {
		n := len(f.twilio.Messages())
		return n >= shipments*steps, fmt.Sprintf("%d of %d sent", n, shipments*steps)
	})

	order := map[string][]string{}
	for _, m := range f.twilio.Messages() {
		name, _, _ := strings.Cut(strings.TrimPrefix(m.Body, "Harborlight: Hi "), ",")
		order[m.To] = append(order[m.To], name)
	}
	want := strings.Join(sampleNames[:steps], " ")
	for s := range shipments {
		to := fmt.Sprintf("+3120%07d", 2000000+s)
		if got := strings.Join(order[to], " "); got != want {
			t.Errorf("SMS to %s, by recipient name: %s; want each once, in its events' order: %s", to, got, want)
		}
	}
	sentBySecond := sumOf(scrape(t, second), "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
	if sentBySecond == 0 {
		t.Errorf("the second worker sent nothing: no partition moved while the backlog waited")
	}
	for i, m := range f.workers {
		s := scrape(t, m)
		waits := sumOf(s, "notification_worker_rate_limit_wait_seconds_count{", `channel="sms"`)
		if within := sumOf(s, "notification_worker_rate_limit_wait_seconds_bucket{", `channel="sms"`, `le="1"`); within != waits {
			t.Errorf("worker %d waited for %v turns, %v of them within a second; want none longer: a record waited past the wait allowed", i, waits, within)
		}
		if dl := sumOf(scrape(t, m), "notification_worker_records_dead_lettered_total{"); dl != 0 {
			t.Errorf("worker %d dead-lettered %v records, want 0", i, dl)
		}
	}
	t.Logf("second worker assigned %v after its start; it sent %v of %d", took, sentBySecond, shipments*steps)
}
