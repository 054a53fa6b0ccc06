package kafka_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/prometheus/promtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// A worker that gives a partition up reports no lag for it any more, or a
// backlog that moved to another member would keep a lag alert firing here.
func TestConsumer_LagDropsWhenPartitionReleased(t *testing.T) {
	topic := uniqueName(t, "lag")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	MustPublish(t, brokers, topic, numbered(10, "v", oneKey)...)

	cfg, _ := testConfig(brokers, topic)
	cfg.ShutdownTimeout = 100 * time.Millisecond
	metrics := newFakeMetrics()
	cfg.Metrics = metrics

	// The first record goes through; the rest wait (one key: in order), so
	// the partition has a backlog when it is released.
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 0 {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}))
	wait.For(t, 10*time.Second, "lag reported with a backlog", func() bool {
		l, ok := metrics.lagOf(0)
		return ok && l > 0
	})
	rc.MustStop(t, 10*time.Second)

	if l, ok := metrics.lagOf(0); !ok || l != 0 {
		t.Fatalf("lag after the partition was released = %d (reported %v), want 0", l, ok)
	}
}

// Lag is what a restart would replay: from the commit point (the lowest
// unfinished record), not from whichever record finished last. With record
// 0 stuck and 1..9 finished, all ten are still to be committed.
func TestConsumer_LagFromCommitPoint(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "lagcommit")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	MustPublish(t, brokers, topic, numbered(10, "v", distinctKeys)...)

	cfg, _ := testConfig(brokers, topic)
	metrics := newFakeMetrics()
	cfg.Metrics = metrics
	log := newHandledLog()
	release := make(chan struct{})
	rc := MustRun(t, cfg, holdFirst(release, log))
	wait.For(t, 10*time.Second, "records 1..9 handled", func() bool { return log.count() == 9 })
	if got, _ := metrics.lagOf(0); got != 10 {
		t.Errorf("lag with record 0 unfinished = %d, want 10", got)
	}
	close(release)
	wait.For(t, 10*time.Second, "lag 0 once all are handled", func() bool { l, _ := metrics.lagOf(0); return l == 0 })
	rc.MustStop(t, 10*time.Second)
}

// A handler abandoned at shutdown that finishes after its partition was
// released must not report lag for it: the 0 reported at release stays.
func TestConsumer_NoLagAfterPartitionClosed(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "lagclosed")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	MustPublish(t, brokers, topic, numbered(10, "v", oneKey)...)

	cfg, _ := testConfig(brokers, topic)
	cfg.ShutdownTimeout = 100 * time.Millisecond
	metrics := newFakeMetrics()
	cfg.Metrics = metrics
	started := make(chan struct{})
	release := make(chan struct{})
	returned := make(chan struct{})
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset != 0 {
			return nil
		}
		// Ignores its context: abandoned at shutdown, finishes later.
		close(started)
		defer close(returned)
		<-release
		return nil
	}))
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("record 0 never started")
	}
	rc.MustStop(t, 10*time.Second)
	if l, ok := metrics.lagOf(0); !ok || l != 0 {
		t.Fatalf("lag after release = %d (reported %v), want 0", l, ok)
	}

	close(release)
	<-returned
	// The late result is processed right after the handler returns; give
	// it a bounded moment to (wrongly) report.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if l, _ := metrics.lagOf(0); l != 0 {
			t.Fatalf("lag %d reported after the partition was closed", l)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A partition held on an unavailable dependency finishes no record, yet
// its lag, read from the broker, grows as records keep arriving: the lag
// alert sees a stuck worker.
func TestConsumer_LagGrowsWhileHeldOnUnavailable(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "lagheld")
	brokers := testBrokers(t, 1, topic)
	cfg, _ := testConfig(brokers, topic)
	cfg.LagInterval = 50 * time.Millisecond
	metrics := prometheus.New()
	cfg.Metrics = metrics
	srv := httptest.NewServer(metrics.Handler())
	t.Cleanup(srv.Close)
	gauge := func() float64 {
		v, _ := promtest.MustScrape(t, srv.URL).Get(`notification_worker_consumer_lag{partition="0",topic="` + topic + `"}`)
		return v
	}

	var attempts atomic.Int64
	MustRun(t, cfg, ports.HandlerFunc(func(context.Context, ports.Record) error {
		attempts.Add(1)
		return ports.MarkUnavailable(errors.New("store down, failure mode closed"))
	}))
	MustPublish(t, brokers, topic, numbered(5, "a", oneKey)...)
	wait.For(t, 10*time.Second, "the lag gauge to read 5 with the first record held", func() bool {
		return attempts.Load() > 0 && gauge() == 5
	})
	MustPublish(t, brokers, topic, numbered(20, "b", oneKey)...)
	wait.For(t, 10*time.Second, "the lag gauge to grow to 25 while the record is still held", func() bool {
		return gauge() == 25
	})
	if got := attempts.Load(); got < 2 {
		t.Fatalf("the held record was tried %d times, want it still retrying", got)
	}
}
