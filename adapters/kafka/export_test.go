package kafka

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
