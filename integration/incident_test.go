//go:build integration

package integration_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
)

// incidentHooks let a scenario look at the workers at two points of the
// incident without copying its body: the container scenario checks the
// image and its HTTP endpoints there.
type incidentHooks struct {
	// sent runs once the first worker sent every notification, while it
	// still runs.
	sent func(t *testing.T, w *integration.Worker, evs []shipEvent)
	// replayed runs once the second worker handled the whole replay, while
	// it still runs.
	replayed func(t *testing.T, w *integration.Worker, evs []shipEvent)
}

// TestIncident replays the 2026-04-02 incident on real peers: a worker
// sends a batch of notifications; a new worker in the same group then
// reads every partition again from offset 0, as the rebalance did after
// the deployment restart. Each customer must get each notification once,
// and the replay must say, once per notification, that it suppressed it.
func TestIncident(t *testing.T) {
	t.Parallel()
	runIncident(t, integration.StartWorkerProcess, "incident", incidentHooks{})
}

// runIncident is the incident scenario with the worker started by start
// (a host process or the project's image).
func runIncident(t *testing.T, start workerStarter, name string, hooks incidentHooks) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	p := startPeerStack(t, name)
	// 40 events over 12 shipments: on every partition of the topic, with
	// SMS-only, email-only and fan-out events, 60 notifications in all.
	evs := makeEvents(p.RunID, 0, 40, 12)
	want := notifications(evs)

	first := p.startWorker(t, start, "first")
	p.publish(ctx, t, evs)
	if _, err := first.WaitLog("notification_sent", len(want), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	p.waitDelivered(ctx, t, evs, 30*time.Second)
	if hooks.sent != nil {
		hooks.sent(t, first, evs)
	}
	stopWorker(ctx, t, first, "first")
	// The graceful stop committed everything: what the second worker
	// replays, it replays because of the rewind, as in the incident.
	p.waitCommittedToEnd(ctx, t, 10*time.Second)

	p.rewindGroup(ctx, t)
	second := p.startWorker(t, start, "second (replay from offset 0)")
	// Committed to the end: the replay is over, whatever it did, and
	// nothing of it is still in flight when the providers are read below.
	// (Waiting for the duplicate_suppressed lines instead would make a
	// worker that sends again fail only at the deadline.)
	p.waitCommittedToEnd(ctx, t, 60*time.Second)
	if hooks.replayed != nil {
		hooks.replayed(t, second, evs)
	}
	stopWorker(ctx, t, second, "second")

	t.Run("FirstWorkerSentEachOnce", func(t *testing.T) {
		assertLoggedOncePer(t, []*integration.Worker{first}, "notification_sent", want)
	})
	t.Run("SeveralPartitions", func(t *testing.T) {
		parts := map[float64]bool{}
		for _, ev := range first.Events("notification_sent") {
			if p, ok := ev["partition"].(float64); ok {
				parts[p] = true
			}
		}
		if len(parts) < 2 {
			t.Errorf("sends came from partitions %v; the scenario needs several", parts)
		}
	})
	t.Run("EachNotificationOnceAtProviders", func(t *testing.T) {
		p.assertEachDeliveredOnce(ctx, t, evs)
	})
	t.Run("ReplaySentNothing", func(t *testing.T) {
		if n := second.Count("notification_sent"); n != 0 {
			t.Errorf("the replaying worker logged notification_sent %d times, want 0", n)
		}
	})
	t.Run("DuplicateSuppressedOncePerReplayedNotification", func(t *testing.T) {
		assertLoggedOncePer(t, []*integration.Worker{second}, "duplicate_suppressed", want)
	})
	t.Run("SentRecordsInRedis", func(t *testing.T) {
		keys, err := p.Redis.Keys(ctx, p.KeyPrefix+"*")
		if err != nil {
			t.Fatal(err)
		}
		keys = withoutMarkers(p.KeyPrefix, keys)
		if len(keys) != len(want) {
			sort.Strings(keys)
			t.Errorf("%d keys under %s, want one per notification (%d): %v", len(keys), p.KeyPrefix, len(want), keys)
		}
		for _, n := range want {
			key := storeKey(p.KeyPrefix, n.Channel, n.EventID)
			val, ok, err := p.Redis.Get(ctx, key)
			if err != nil || !ok || !isSentRecord(val) {
				t.Errorf("%s = %q (exists %v, error %v), want a sent record", key, val, ok, err)
			}
		}
	})
}
