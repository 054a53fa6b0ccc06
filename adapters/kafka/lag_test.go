package kafka_test

import (
	"context"
	"testing"
	"time"

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
	lag := func() (int64, bool) {
		metrics.mu.Lock()
		defer metrics.mu.Unlock()
		l, ok := metrics.lag[0]
		return l, ok
	}

	// The first record goes through; the rest wait (one key: in order), so
	// the partition has a backlog when it is released.
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 0 {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}))
	waitFor(t, 10*time.Second, "lag reported with a backlog", func() bool {
		l, ok := lag()
		return ok && l > 0
	})
	rc.MustStop(t, 10*time.Second)

	if l, ok := lag(); !ok || l != 0 {
		t.Fatalf("lag after the partition was released = %d (reported %v), want 0", l, ok)
	}
}
