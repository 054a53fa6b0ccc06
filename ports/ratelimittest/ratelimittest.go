// Package ratelimittest is the contract every ports.RateLimiter must pass:
// the in-process limiter and the Redis one answer the same questions the
// same way. The suite reads no clock of the limiter: it bounds each
// answer by the time the test itself measured around its calls, so it
// holds on a limiter that reads its store's clock, and under any load.
package ratelimittest

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/internal/contract"
	"github.com/harborlight/notification-worker/ports"
)

// Harness builds the limiter under test.
type Harness struct {
	// New returns a limiter. Each call may share a backend with earlier
	// ones; the suite uses a sender no other test uses.
	New func(t *testing.T) ports.RateLimiter
}

// Sender returns a sender no other test in this process uses.
func Sender(t *testing.T) string { return contract.Unique(t, "ratelimittest") }

// Ctx returns a context that ends with the test, within 30 seconds.
func Ctx(t *testing.T) context.Context { return contract.Ctx(t, 30*time.Second) }

// forever is a maxWait no test reaches.
const forever = time.Hour

// slow is a limit whose Interval (10s) dwarfs how long a few calls take,
// even under load: the turns the suite sees are its Intervals, give or
// take the time its calls took.
var slow = ports.Limit{Rate: 0.1, Burst: 3}

// MustTake takes a turn and fails the test on error.
func MustTake(tb testing.TB, l ports.RateLimiter, ctx context.Context, sender string, limit ports.Limit, maxWait time.Duration) ports.Reservation {
	tb.Helper()
	r, err := l.Take(ctx, sender, limit, maxWait)
	if err != nil {
		tb.Fatalf("Take(%q, %v, %v): %v", sender, limit, maxWait, err)
	}
	return r
}

// Within reports whether got is want less at most slack (and not more
// than want): a wait told after slack of the test's time had passed since
// the turns were counted from.
func Within(got, want, slack time.Duration) bool {
	return got <= want && got >= want-slack
}

// Run runs the contract suite: one subtest per rule, named for it.
func Run(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"BurstThenOneTurnPerInterval", burstThenOneTurnPerInterval},
		{"MaxWaitReservesNothing", maxWaitReservesNothing},
		{"SendersAreIndependent", sendersAreIndependent},
		{"PauseHoldsEveryTurnThenPaces", pauseHoldsEveryTurnThenPaces},
		{"PauseNeverShortens", pauseNeverShortens},
		{"PauseAfterTakesDoesNotShortenThem", pauseAfterTakesDoesNotShortenThem},
		{"RateOverAWindow", rateOverAWindow},
		{"ErrInvalidLimit", errInvalidLimit},
		{"ErrContextDone", errContextDone},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

func burstThenOneTurnPerInterval(t *testing.T, h Harness) {
	l, ctx, s := h.New(t), Ctx(t), Sender(t)
	start := time.Now()
	var got []ports.Reservation
	for range slow.Burst + 3 {
		got = append(got, MustTake(t, l, ctx, s, slow, forever))
	}
	slack := time.Since(start)
	for i, r := range got {
		want := time.Duration(max(i-slow.Burst+1, 0)) * slow.Interval()
		if !r.OK || !Within(r.Wait, want, slack) {
			t.Errorf("take %d = %+v, want OK with a wait of %v (less at most %v)", i, r, want, slack)
		}
	}
}

func maxWaitReservesNothing(t *testing.T, h Harness) {
	l, ctx, s := h.New(t), Ctx(t), Sender(t)
	one := ports.Limit{Rate: slow.Rate, Burst: 1}
	start := time.Now()
	if r := MustTake(t, l, ctx, s, one, 0); !r.OK || r.Wait != 0 {
		t.Fatalf("first take = %+v, want OK now", r)
	}
	refused := MustTake(t, l, ctx, s, one, 4*time.Second)
	again := MustTake(t, l, ctx, s, one, 4*time.Second)
	taken := MustTake(t, l, ctx, s, one, forever)
	slack := time.Since(start)
	for _, r := range []ports.Reservation{refused, again} {
		if r.OK || !Within(r.Wait, one.Interval()-4*time.Second, slack) {
			t.Errorf("take beyond maxWait = %+v, want not OK, and a retry in %v (less at most %v)", r, one.Interval()-4*time.Second, slack)
		}
	}
	// The refused takes left the pace alone: the next turn is still
	// one Interval after the first.
	if !taken.OK || !Within(taken.Wait, one.Interval(), slack) {
		t.Errorf("take after refusals = %+v, want OK in %v (less at most %v)", taken, one.Interval(), slack)
	}
}

func sendersAreIndependent(t *testing.T, h Harness) {
	l, ctx := h.New(t), Ctx(t)
	a, b := Sender(t), Sender(t)
	for range slow.Burst + 1 {
		MustTake(t, l, ctx, a, slow, forever)
	}
	for i := range slow.Burst {
		if r := MustTake(t, l, ctx, b, slow, 0); !r.OK || r.Wait != 0 {
			t.Errorf("take %d of another sender = %+v, want OK now", i, r)
		}
	}
}

func pauseHoldsEveryTurnThenPaces(t *testing.T, h Harness) {
	l, ctx, s := h.New(t), Ctx(t), Sender(t)
	const pause = 30 * time.Second
	start := time.Now()
	if err := l.Pause(ctx, s, slow, pause); err != nil {
		t.Fatal(err)
	}
	first := MustTake(t, l, ctx, s, slow, forever)
	second := MustTake(t, l, ctx, s, slow, forever)
	short := MustTake(t, l, ctx, s, slow, time.Second)
	slack := time.Since(start)
	if !first.OK || !Within(first.Wait, pause, slack) {
		t.Errorf("first take after the pause = %+v, want OK at its end, %v (less at most %v)", first, pause, slack)
	}
	// Paced, not a burst, after the pause.
	if want := pause + slow.Interval(); !second.OK || !Within(second.Wait, want, slack) {
		t.Errorf("second take = %+v, want OK in %v (less at most %v)", second, want, slack)
	}
	if short.OK {
		t.Errorf("take with a maxWait inside the pause = %+v, want nothing reserved", short)
	}
}

func pauseNeverShortens(t *testing.T, h Harness) {
	l, ctx, s := h.New(t), Ctx(t), Sender(t)
	start := time.Now()
	if err := l.Pause(ctx, s, slow, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Pause(ctx, s, slow, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Pause(ctx, s, slow, 0); err != nil {
		t.Fatal(err)
	}
	r := MustTake(t, l, ctx, s, slow, forever)
	if slack := time.Since(start); !r.OK || !Within(r.Wait, 40*time.Second, slack) {
		t.Errorf("take = %+v, want OK at the end of the longer pause, 40s (less at most %v)", r, slack)
	}
}

func pauseAfterTakesDoesNotShortenThem(t *testing.T, h Harness) {
	l, ctx, s := h.New(t), Ctx(t), Sender(t)
	start := time.Now()
	for range slow.Burst + 2 { // turns reserved to two Intervals ahead
		MustTake(t, l, ctx, s, slow, forever)
	}
	if err := l.Pause(ctx, s, slow, time.Second); err != nil {
		t.Fatal(err)
	}
	r := MustTake(t, l, ctx, s, slow, forever)
	if want, slack := 3*slow.Interval(), time.Since(start); !r.OK || !Within(r.Wait, want, slack) {
		t.Errorf("take = %+v, want OK after the turns already reserved, %v (less at most %v)", r, want, slack)
	}
}

func rateOverAWindow(t *testing.T, h Harness) {
	RateOverAWindow(t, []ports.RateLimiter{h.New(t)})
}

func errInvalidLimit(t *testing.T, h Harness) {
	l, ctx, s := h.New(t), Ctx(t), Sender(t)
	for _, bad := range []ports.Limit{{Rate: 0, Burst: 1}, {Rate: 1, Burst: 0}} {
		if _, err := l.Take(ctx, s, bad, forever); err == nil {
			t.Errorf("Take with %v = nil error", bad)
		}
		if err := l.Pause(ctx, s, bad, time.Second); err == nil {
			t.Errorf("Pause with %v = nil error", bad)
		}
	}
}

func errContextDone(t *testing.T, h Harness) {
	l, s := h.New(t), Sender(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Take(ctx, s, slow, forever); err == nil {
		t.Error("Take with a done ctx = nil error")
	}
	if err := l.Pause(ctx, s, slow, time.Second); err == nil {
		t.Error("Pause with a done ctx = nil error")
	}
}

// RateOverAWindow takes 120 turns of one sender, from 4 goroutines spread
// over limiters (which must share their store), at 20 per second with a
// burst of 5, and checks the turns they were told: every one reserved,
// no window of a second holding more than the burst and a second's rate
// (give or take the time the calls took), and the last turn where the
// rate puts it. It counts turns, it does not wait for them.
func RateOverAWindow(t *testing.T, limiters []ports.RateLimiter) {
	t.Helper()
	ctx, s := Ctx(t), Sender(t)
	limit := ports.Limit{Rate: 20, Burst: 5}
	const n, workers = 120, 4
	var (
		mu    sync.Mutex
		turns []time.Duration // since start, at the earliest
		wg    sync.WaitGroup
	)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiters[w%len(limiters)]
			for range n / workers {
				before := time.Since(start)
				r, err := l.Take(ctx, s, limit, forever)
				if err != nil || !r.OK {
					t.Errorf("Take = %+v, %v, want a turn", r, err)
					return
				}
				mu.Lock()
				turns = append(turns, before+r.Wait)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slack := time.Since(start)
	if len(turns) != n {
		t.Fatalf("%d turns reserved, want %d", len(turns), n)
	}
	sort.Slice(turns, func(i, j int) bool { return turns[i] < turns[j] })
	// Each turn is known to within slack: it lies in [turn, turn+slack].
	// GCRA puts at most Burst + W/Interval turns in a window of W; a window
	// of the estimates may gather the turns of a window slack wider.
	const window = time.Second
	most := limit.Burst + int((window+slack)/limit.Interval())
	for i := range turns {
		j := sort.Search(len(turns), func(j int) bool { return turns[j] > turns[i]+window })
		if got := j - i; got > most {
			t.Fatalf("%d turns in the second from %v, want at most %d (burst %d, rate %v, calls took %v)", got, turns[i], most, limit.Burst, limit.Rate, slack)
		}
	}
	// The last turn: (n - Burst) Intervals after the first, give or take
	// the calls' time.
	want := time.Duration(n-limit.Burst) * limit.Interval()
	if last := turns[n-1]; last < want-slack || last > want+slack {
		t.Errorf("last turn at %v, want %v (give or take %v): the rate is not %v", last, want, slack, limit.Rate)
	}
}
