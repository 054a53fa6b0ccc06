package kafka_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/prometheus/promtest"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// hangingHandler returns a handler whose every call blocks, ignoring its
// context, until unblock is called (at the latest when the test ends),
// except for records valued "first", which return at once; waitCalls waits
// until it has been called n more times.
func hangingHandler(t *testing.T) (h ports.Handler, waitCalls func(n int), unblock func()) {
	t.Helper()
	release := make(chan struct{})
	var once sync.Once
	unblock = func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	started := make(chan struct{}, 64)
	h = ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		started <- struct{}{}
		if string(rec.Value) != "first" {
			<-release
		}
		return nil
	})
	waitCalls = func(n int) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for range n {
			select {
			case <-started:
			case <-deadline:
				t.Fatalf("the handler was not called %d times within 20s", n)
			}
		}
	}
	return h, waitCalls, unblock
}

// onePerPartition returns one record for each partition of topic.
func onePerPartition(t *testing.T, topic string, partitions int32) []kafka.Message {
	t.Helper()
	msgs := make([]kafka.Message, partitions)
	for p := range partitions {
		msgs[p] = kafka.Message{Key: []byte(keysOn(t, topic, p, partitions, 1)[0]), Value: []byte(fmt.Sprintf("p%d", p))}
	}
	return msgs
}

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
	// Eager: the second member's join revokes both partitions, so both
	// calls are abandoned (cooperative-sticky would move only one).
	cfg.RebalanceStrategy = kafka.StrategyRange
	// The real metrics adapter, scraped as Prometheus would: the gauge an
	// operator alerts on is what must count the abandoned calls.
	metrics := prometheus.New()
	cfg.Metrics = metrics
	srv := httptest.NewServer(metrics.Handler())
	t.Cleanup(srv.Close)
	abandonedGauge := func() float64 {
		v, _ := promtest.MustScrape(t, srv.URL).Get("notification_worker_handlers_abandoned")
		return v
	}

	ignoresCancel, waitCalls, unblock := hangingHandler(t)
	MustPublish(t, brokers, topic, onePerPartition(t, topic, partitions)...)
	a := MustRun(t, cfg, ignoresCancel)
	waitCalls(partitions)
	if !a.c.Ready() || a.c.Wedged() {
		t.Fatalf("busy consumer: Ready %v, Wedged %v; want true, false", a.c.Ready(), a.c.Wedged())
	}

	// A second member joins: a's partitions are revoked, and both its
	// handlers outlive the shutdown timeout holding both slots.
	MustRun(t, cfg, ports.HandlerFunc(func(context.Context, ports.Record) error { return nil }))
	wait.For(t, 20*time.Second, "a to report itself wedged", a.c.Wedged)
	if a.c.Ready() {
		t.Fatal("a wedged consumer reports Ready")
	}
	if !strings.Contains(logs.String(), `"msg":"handlers_abandoned"`) {
		t.Error("no handlers_abandoned log")
	}
	// Wedged turns true as the count is added; the metric follows a moment
	// later, outside that step.
	wait.For(t, 5*time.Second, "the abandoned-handlers gauge to read 2 while wedged", func() bool {
		return abandonedGauge() == 2
	})

	unblock()
	wait.For(t, 20*time.Second, "a to be ready again once the abandoned calls return", func() bool {
		return !a.c.Wedged() && a.c.Ready()
	})
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 1, 1: 1})
	if n := abandonedGauge(); n != 0 {
		t.Errorf("notification_worker_handlers_abandoned is %v after the calls returned, want 0", n)
	}
}

// TestConsumer_WedgedByStalledHandlers: handlers hang with no rebalance or
// shutdown to give up on them. Once they have run for StallAfter, the
// consumer is Wedged; each call's clock starts when it does, so a worker
// idle for longer than StallAfter is not wedged the moment a burst takes
// every slot (an earlier rule, timing from the last return, was).
func TestConsumer_WedgedByStalledHandlers(t *testing.T) {
	t.Parallel()
	const partitions = 2
	topic := uniqueName(t, "stalled")
	brokers := MustStartEmbedded(t, partitions, topic).Brokers()
	cfg, logs := testConfig(brokers, topic)
	cfg.MaxInFlight = 2
	cfg.StallAfter = 2 * time.Second

	// One call returns, then the worker idles for longer than StallAfter
	// before the burst that takes every slot.
	h, waitCalls, unblock := hangingHandler(t)
	MustPublish(t, brokers, topic, kafka.Message{Key: []byte(keysOn(t, topic, 0, partitions, 1)[0]), Value: []byte("first")})
	rc := MustRun(t, cfg, h)
	waitCalls(1)
	time.Sleep(cfg.StallAfter + 500*time.Millisecond) // idle on purpose: the scenario, not a wait for a condition
	MustPublish(t, brokers, topic, onePerPartition(t, topic, partitions)...)
	waitCalls(partitions)
	if rc.c.Wedged() {
		t.Fatal("Wedged as soon as the slots were taken after an idle spell; want only after StallAfter")
	}
	mustStallThenRecover(t, rc, logs, unblock)
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 2, 1: 1})
}

// TestConsumer_SlowHandlersAreNotStalled: every slot stays taken by calls
// that each take a while but keep returning; that is progress, not a wedge.
func TestConsumer_SlowHandlersAreNotStalled(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "slow")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 1
	cfg.StallAfter = time.Second
	const records = 40 // 2s of calls, twice StallAfter
	MustPublish(t, brokers, topic, numbered(records, "slow", func(int) string { return "SHP-1" })...)
	done := newHandledLog()
	rc := MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		time.Sleep(50 * time.Millisecond) // a slow provider
		done.handled(rec)
		return nil
	}))
	wait.For(t, 30*time.Second, "every record handled, never wedged", func() bool {
		if rc.c.Wedged() {
			t.Fatal("slow handlers that keep returning made the consumer Wedged")
		}
		return done.count() == records
	})
}

// TestConsumer_WedgedByOneHungCall: one call hangs while the other slots
// stay free and other records flow. It holds its key's later records, its
// partition's commit and, once they fill it, the fetch window, so the
// worker can stall with one slot taken (found in review): a single call
// running past StallAfter makes the consumer Wedged.
func TestConsumer_WedgedByOneHungCall(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "hungcall")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	cfg, logs := testConfig(brokers, topic)
	cfg.MaxInFlight = 4
	cfg.StallAfter = time.Second

	h, waitCalls, unblock := hangingHandler(t)
	msgs := []kafka.Message{{Key: []byte("SHP-hung"), Value: []byte("hangs")}}
	for i := range 6 {
		msgs = append(msgs, kafka.Message{Key: []byte(fmt.Sprintf("SHP-%d", i)), Value: []byte("first")})
	}
	MustPublish(t, brokers, topic, msgs...)
	rc := MustRun(t, cfg, h)
	waitCalls(len(msgs))
	mustStallThenRecover(t, rc, logs, unblock)
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: int64(len(msgs))})
}

// mustStallThenRecover waits for rc to report itself wedged by a stall (not
// Ready, handlers_stalled logged), then unblocks the hung calls and waits
// for it to be ready again.
func mustStallThenRecover(t *testing.T, rc *runningConsumer, logs *logtest.Buffer, unblock func()) {
	t.Helper()
	wait.For(t, 20*time.Second, "the consumer to report itself wedged", rc.c.Wedged)
	if rc.c.Ready() {
		t.Fatal("a wedged consumer reports Ready")
	}
	if !strings.Contains(logs.String(), `"msg":"handlers_stalled"`) {
		t.Error("no handlers_stalled log")
	}
	unblock()
	wait.For(t, 20*time.Second, "the consumer to be ready again once the calls return", func() bool {
		return !rc.c.Wedged() && rc.c.Ready()
	})
}
