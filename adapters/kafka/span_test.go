package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/wait"
)

// The tracker's span counts every offset from the lowest unfinished record
// to the last one added, finished or not: that is what holds memory.
func TestOffsetTracker_Span(t *testing.T) {
	t.Parallel()
	tr := kafka.NewOffsetTracker()
	if got := tr.Span(); got != 0 {
		t.Fatalf("Span of an empty tracker = %d, want 0", got)
	}
	for off := int64(0); off < 10; off++ {
		tr.Add(off)
	}
	for off := int64(1); off < 10; off++ {
		tr.Complete(off)
	}
	if got := tr.Span(); got != 10 {
		t.Fatalf("Span with 0 stuck and 1..9 finished = %d, want 10", got)
	}
	tr.Complete(0)
	if got := tr.Span(); got != 0 {
		t.Fatalf("Span once all finished = %d, want 0", got)
	}
}

// Behind one stuck record, a partition dispatches at most
// SpanPerInFlight*MaxInFlight offsets past it, however many records wait
// and however fast they finish; once the stuck record finishes, the rest
// follow. Without the limit, every later record would be taken in and its
// tracker entry kept until the stuck one finished: memory without bound.
func TestConsumer_SpanBoundedBehindStuckRecord(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "span")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	cfg, logs := testConfig(brokers, topic)
	cfg.MaxInFlight = 2
	maxSpan := int64(kafka.SpanPerInFlight * cfg.MaxInFlight)
	total := int(3 * maxSpan)
	MustPublish(t, brokers, topic, numbered(total, "v", distinctKeys)...)

	release := make(chan struct{})
	log := newHandledLog()
	rc := MustRun(t, cfg, holdFirst(release, log))

	// Offsets 1..maxSpan-1 finish; nothing past them may start.
	wait.For(t, 10*time.Second, "records behind the stuck one handled", func() bool { return int64(log.count()) >= maxSpan-1 })
	time.Sleep(300 * time.Millisecond) // room to overrun, had dispatch not paused
	for off := range log.offsets() {
		if off >= maxSpan {
			t.Fatalf("record %d handled while record 0 was stuck: span exceeded %d", off, maxSpan)
		}
	}
	if got := strings.Count(logs.String(), `"msg":"partition_dispatch_paused"`); got != 1 {
		t.Errorf("%d partition_dispatch_paused logs, want 1 per stall", got)
	}

	close(release)
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: int64(total)})
	rc.MustStop(t, 10*time.Second)
	if got := len(log.offsets()); got != total {
		t.Errorf("%d records handled, want %d", got, total)
	}
}
