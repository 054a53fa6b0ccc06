package kafka

import "sort"

// offsetTracker knows which records of one partition are in hand, so the
// offset marked for commit never passes a record that is not finished: with
// many records in flight they complete out of order, and committing the
// highest finished offset would skip (and, after a crash or a rebalance,
// lose) the slower ones before it.
//
// It is not safe for concurrent use; the partition guards it with its mutex.
type offsetTracker struct {
	// pending holds the offsets added and not yet released from the front,
	// ascending; done[i] says whether pending[i] finished. Entries before
	// head are released and kept only until the slice is compacted.
	pending []int64
	done    []bool
	head    int
	// next is the offset to commit when nothing is pending: one past the
	// last record added. -1 until the first add.
	next int64
}

func newOffsetTracker() *offsetTracker { return &offsetTracker{next: -1} }

// add records that the record at off is in hand. Offsets must be added in
// increasing order, as a partition delivers them; gaps (compacted records,
// transaction markers) are fine.
func (t *offsetTracker) add(off int64) {
	t.pending = append(t.pending, off)
	t.done = append(t.done, false)
	t.next = off + 1
}

// complete records that the record at off is finished and returns the
// offset now safe to commit: the lowest offset still in hand, or one past
// the last record added when none is. advanced is false when that offset
// did not move (a record other than the lowest finished). Completing an
// offset that is not in hand is a no-op.
func (t *offsetTracker) complete(off int64) (commit int64, advanced bool) {
	live := t.pending[t.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i] >= off })
	if i == len(live) || live[i] != off {
		return t.commitOffset(), false
	}
	t.done[t.head+i] = true
	if i != 0 {
		return t.commitOffset(), false
	}
	for t.head < len(t.pending) && t.done[t.head] {
		t.head++
	}
	t.compact()
	return t.commitOffset(), true
}

// commitOffset returns the offset safe to commit, or -1 when nothing was
// added yet.
func (t *offsetTracker) commitOffset() int64 {
	if t.head < len(t.pending) {
		return t.pending[t.head]
	}
	return t.next
}

// span returns how many offsets lie between the lowest unfinished record
// and one past the last record added: what the tracker holds entries for,
// finished or not. 0 when nothing is unfinished.
func (t *offsetTracker) span() int64 {
	if t.head == len(t.pending) {
		return 0
	}
	return t.next - t.pending[t.head]
}

// inHand returns how many records were added and are not finished.
func (t *offsetTracker) inHand() int {
	n := 0
	for _, d := range t.done[t.head:] {
		if !d {
			n++
		}
	}
	return n
}

// compact drops released entries once they are the larger part of the
// slices, so memory follows the records in hand, not the partition's history.
func (t *offsetTracker) compact() {
	if t.head == len(t.pending) {
		t.pending, t.done, t.head = t.pending[:0], t.done[:0], 0
		return
	}
	if t.head < 1024 || t.head < len(t.pending)/2 {
		return
	}
	n := copy(t.pending, t.pending[t.head:])
	copy(t.done, t.done[t.head:])
	t.pending, t.done, t.head = t.pending[:n], t.done[:n], 0
}
