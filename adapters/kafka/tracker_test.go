package kafka_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/harborlight/notification-worker/adapters/kafka"
)

// Point 8: whatever order records finish in, the offset the tracker offers
// for commit never passes a record that is not finished, and reaches the end
// once all are.
func TestOffsetTracker_NeverPassesUnfinished(t *testing.T) {
	t.Parallel()
	t.Run("Empty", func(t *testing.T) {
		tr := kafka.NewOffsetTracker()
		if got := tr.CommitOffset(); got != -1 {
			t.Fatalf("CommitOffset of an empty tracker = %d, want -1", got)
		}
	})
	t.Run("UnknownOffsetIsNoOp", func(t *testing.T) {
		tr := kafka.NewOffsetTracker()
		tr.Add(10)
		if got, advanced := tr.Complete(11); got != 10 || advanced {
			t.Fatalf("Complete(11) = %d, %v; want 10, false", got, advanced)
		}
	})
	t.Run("RandomCompletionOrder", func(t *testing.T) {
		const rounds = 500
		for seed := uint64(1); seed <= rounds; seed++ {
			checkRandomRun(t, seed)
			if t.Failed() {
				t.Fatalf("failed with seed %d", seed)
			}
		}
	})
}

// checkRandomRun interleaves adds (ascending offsets with random gaps, as
// compaction and transaction markers leave) and completions in random order,
// checking the invariant after every step.
func checkRandomRun(t *testing.T, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	tr := kafka.NewOffsetTracker()
	n := 1 + rng.IntN(3000) // above the tracker's compaction threshold now and then
	next := int64(rng.IntN(1000))
	var unfinished []int64 // ascending
	added, last := 0, int64(-1)
	prev := int64(-1)
	for added < n || len(unfinished) > 0 {
		if added < n && (len(unfinished) == 0 || rng.IntN(3) > 0) {
			tr.Add(next)
			unfinished = append(unfinished, next)
			last = next
			next += 1 + int64(rng.IntN(3))
			added++
			continue
		}
		i := rng.IntN(len(unfinished))
		off := unfinished[i]
		unfinished = slices.Delete(unfinished, i, i+1)
		before := tr.CommitOffset()
		got, advanced := tr.Complete(off)

		want := last + 1
		if len(unfinished) > 0 {
			want = unfinished[0]
		}
		if got != want {
			t.Errorf("seed %d: after completing %d, commit offset %d, want %d (lowest unfinished or end)", seed, off, got, want)
			return
		}
		if got < prev {
			t.Errorf("seed %d: commit offset went back from %d to %d", seed, prev, got)
			return
		}
		if advanced != (got != before) {
			t.Errorf("seed %d: advanced = %v but offset moved %d -> %d", seed, advanced, before, got)
			return
		}
		prev = got
	}
}
