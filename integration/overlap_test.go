//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/wait"
)

// TestOverlappingConsumers churns the consumer group while records flow:
// members join and leave one after another, each change a rebalance that
// moves partitions with sends in flight, and then one member drains the
// rest. Every notification must reach its provider exactly once: no
// duplicate from two members handling one record around a rebalance, no
// loss from a record marked but never sent.
//
// Members leave gracefully (SIGTERM). A SIGKILL with sends in flight can
// legitimately duplicate a notification (the provider accepted it, the
// process died before writing the record): that window is ADR-0006's
// accepted residue, bounded by what was in flight, and is proved by the
// crash scenario (crash_test.go), not here, where the claim for zero holds.
func TestOverlappingConsumers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	p := startPeerStack(t, "overlap")
	// Every SMS takes a while at the provider, so a revoke or a SIGTERM
	// always finds sends in hand and the new owner's fetch starts while they
	// run.
	if err := p.Twilio.Fail(ctx, double.Fault{Delay: double.Duration(400 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}

	const (
		batches   = 6  // one per membership change
		perBatch  = 16 // events
		shipments = 6  // shared by all batches: a shipment's events queue up behind each other
	)
	var evs []shipEvent
	batch := func(i int) []shipEvent {
		b := makeEvents(p.RunID, i*perBatch, perBatch, shipments)
		evs = append(evs, b...)
		return b
	}

	workers := map[string]*integration.Worker{}
	var all []*integration.Worker
	join := func(label string) {
		w := p.startWorker(t, integration.StartWorkerProcess, label)
		workers[label] = w
		all = append(all, w)
	}
	leave := func(label string) {
		stopWorker(ctx, t, workers[label], label)
		delete(workers, label)
	}

	join("A")
	// Each step publishes a batch and changes the membership at once, so
	// the rebalance meets the batch being sent. Joins wait until the new
	// member holds partitions (the rebalance finished); leaves wait for a
	// clean exit. Bounded: one step per batch.
	steps := []struct {
		what  string
		apply func()
	}{
		{"B joins", func() { join("B") }},
		{"A leaves", func() { leave("A") }},
		{"C joins", func() { join("C") }},
		{"B leaves", func() { leave("B") }},
		{"D joins", func() { join("D") }},
		{"C leaves", func() { leave("C") }},
	}
	sentSoFar := func() int { return len(logged(all, "notification_sent")) }
	for i, s := range steps[:batches] {
		before := sentSoFar()
		p.publish(ctx, t, batch(i))
		// The batch's first send is out: the others are in hand or queued
		// behind it when the membership changes.
		wait.For(t, 30*time.Second, fmt.Sprintf("a send of batch %d", i), func() bool { return sentSoFar() > before })
		start := time.Now()
		s.apply()
		t.Logf("step %d: batch of %d published, %s (%v)", i, perBatch, s.what, time.Since(start).Round(time.Millisecond))
	}

	// D alone drains whatever is left, and commits it.
	if _, ok := workers["D"]; !ok || len(workers) != 1 {
		t.Fatalf("%d members left, want D alone", len(workers))
	}
	p.waitCommittedToEnd(ctx, t, 60*time.Second)
	p.waitDelivered(ctx, t, evs, 30*time.Second)
	leave("D")

	want := notifications(evs)
	t.Run("EachNotificationOnceAtProviders", func(t *testing.T) {
		p.assertEachDeliveredOnce(ctx, t, evs)
	})
	t.Run("SentLoggedOnceAcrossMembers", func(t *testing.T) {
		assertLoggedOncePer(t, all, "notification_sent", want)
	})
	t.Run("MembershipChurned", func(t *testing.T) {
		// The scenario proves something only if partitions really moved:
		// every member held some at some point, and there were rebalances
		// beyond each member's first assignment.
		total := 0
		for _, w := range all {
			n := w.Count("partitions_assigned")
			if n == 0 {
				t.Errorf("a member (HTTP %s) never held a partition", w.HTTPAddr)
			}
			total += n
		}
		if total <= len(all) {
			t.Errorf("%d assignments across %d members: no rebalance moved partitions", total, len(all))
		}
		t.Logf("%d assignments across %d members; %d sends, %d replays suppressed", total, len(all),
			len(logged(all, "notification_sent")), sumCounts(logged(all, "duplicate_suppressed")))
	})
}

func sumCounts(m map[notif]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}
