package kafka_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/ports"
)

// TestConsumer_WedgedByAbandonedHandlers: handlers that ignore their
// cancellation keep their handling slots after a revoke gives up on them.
// Once they hold all MaxInFlight slots the consumer can start nothing, though
// it still holds a partition: it must say so (Wedged, not Ready) rather than
// look healthy, and recover both once they return.
func TestConsumer_WedgedByAbandonedHandlers(t *testing.T) {
	t.Parallel()
	const partitions = 2
	topic := uniqueName(t, "wedged")
	brokers := MustStartEmbedded(t, partitions, topic).Brokers()
	cfg, logs := testConfig(brokers, topic)
	cfg.MaxInFlight = 2
	cfg.ShutdownTimeout = 50 * time.Millisecond
	metrics := newFakeMetrics()
	cfg.Metrics = metrics

	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	started := make(chan int32, 16)
	ignoresCancel := ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		started <- rec.Partition
		<-release
		return nil
	})
	MustPublish(t, brokers, topic,
		kafka.Message{Key: []byte(keysOn(t, topic, 0, partitions, 1)[0]), Value: []byte("p0")},
		kafka.Message{Key: []byte(keysOn(t, topic, 1, partitions, 1)[0]), Value: []byte("p1")},
	)

	a := MustRun(t, cfg, ignoresCancel)
	deadline := time.After(20 * time.Second)
	for range partitions {
		select {
		case <-started:
		case <-deadline:
			t.Fatal("the handler was not called for both partitions within 20s")
		}
	}
	if !a.c.Ready() || a.c.Wedged() {
		t.Fatalf("busy consumer: Ready %v, Wedged %v; want true, false", a.c.Ready(), a.c.Wedged())
	}

	// A second member joins: a's partitions are revoked, and both its
	// handlers outlive the shutdown timeout holding both slots.
	MustRun(t, cfg, ports.HandlerFunc(func(context.Context, ports.Record) error { return nil }))
	waitFor(t, 20*time.Second, "a to report itself wedged", a.c.Wedged)
	if a.c.Ready() {
		t.Fatal("a wedged consumer reports Ready")
	}
	if !strings.Contains(logs.String(), `"msg":"handlers_abandoned"`) {
		t.Error("no handlers_abandoned log")
	}
	if n := metrics.abandonedCalls(); n != 2 {
		t.Errorf("HandlersAbandoned adds up to %d while wedged, want 2", n)
	}

	unblock()
	waitFor(t, 20*time.Second, "a to be ready again once the abandoned calls return", func() bool {
		return !a.c.Wedged() && a.c.Ready()
	})
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 1, 1: 1})
	if n := metrics.abandonedCalls(); n != 0 {
		t.Errorf("HandlersAbandoned adds up to %d after the calls returned, want 0", n)
	}
}
