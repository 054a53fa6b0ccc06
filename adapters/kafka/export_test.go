package kafka

import "time"

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
