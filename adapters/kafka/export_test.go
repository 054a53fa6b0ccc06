package kafka

import (
	"time"

	"github.com/IBM/sarama"
)

// OffsetTracker exposes the offset tracker to the property test in
// kafka_test, which checks it from the outside like any caller.
type OffsetTracker = offsetTracker

// NewOffsetTracker returns an empty tracker.
func NewOffsetTracker() *OffsetTracker { return newOffsetTracker() }

// Add records that off is in hand.
func (t *offsetTracker) Add(off int64) { t.add(off) }

// Complete records that off finished; see complete.
func (t *offsetTracker) Complete(off int64) (int64, bool) { return t.complete(off) }

// CommitOffset returns the offset safe to commit (-1: none yet).
func (t *offsetTracker) CommitOffset() int64 { return t.commitOffset() }

// SetDeadLetterUnreadyAfter shortens how long a failing dead letter write
// takes to make c not Ready, so a test need not wait DeadLetterUnreadyAfter.
// Call it before Run.
func SetDeadLetterUnreadyAfter(c *Consumer, d time.Duration) {
	c.dlqHealth = newDeadLetterHealth(d)
}

// Span returns how many offsets the tracker holds entries for; see span.
func (t *offsetTracker) Span() int64 { return t.span() }

// SpanPerInFlight exposes the dispatch limit's factor, so a test can check
// the bound the consumer promises.
const SpanPerInFlight = spanPerInFlight

// ByteBudget exposes the byte budget to its tests in kafka_test.
type ByteBudget = byteBudget

// NewByteBudget returns a budget of limit bytes.
func NewByteBudget(limit int64) *ByteBudget { return newByteBudget(limit) }

// Acquire waits until n bytes are admitted (true) or done closes (false).
func (b *byteBudget) Acquire(n int64, done <-chan struct{}) bool { return b.acquire(n, done) }

// Release gives back n admitted bytes.
func (b *byteBudget) Release(n int64) { b.release(n) }

// Held returns the bytes admitted and not released.
func (b *byteBudget) Held() int64 { return b.held() }

// Waiting returns how many Acquire calls are queued.
func (b *byteBudget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// RetriesSpanning exposes how many retries the dead letter producer gets
// for a span; see retriesSpanning.
func RetriesSpanning(span, initial, maxBackoff time.Duration) int {
	return retriesSpanning(span, initial, maxBackoff)
}

// ConsumerSaramaConfig returns the Sarama configuration the consumer group
// runs with for cfg (defaults applied).
func ConsumerSaramaConfig(cfg Config) *sarama.Config { return cfg.withDefaults().groupConfig() }

// CheckJoinReadTimeout exposes the rule validate applies to it.
func CheckJoinReadTimeout(sc *sarama.Config) error { return checkJoinReadTimeout(sc) }

// JoinReadMargin is how much the read timeout must exceed the rebalance
// timeout by.
const JoinReadMargin = joinReadMargin

// Workers exposes the partition's goroutines to their test in kafka_test.
type Workers = workers

// NewWorkers returns workers with no goroutine yet.
func NewWorkers() *Workers { return newWorkers() }

// Stop ends the goroutines waiting for work; see stop.
func (w *workers) Stop() { w.stop() }
