package ratelimit_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/ratelimit"
	"github.com/harborlight/notification-worker/internal/testclock"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/ratelimittest"
)

func TestLocalContract(t *testing.T) {
	ratelimittest.Run(t, ratelimittest.Harness{
		New: func(*testing.T) ports.RateLimiter { return ratelimit.NewLocal(nil) },
	})
}

func newClock() *testclock.Clock { return testclock.New(time.Unix(1775121240, 0)) }

func TestLocal(t *testing.T) {
	ctx := context.Background()
	limit := ports.Limit{Rate: 50, Burst: 2}

	t.Run("ExactTurnsAtOneInstant", func(t *testing.T) {
		c := newClock()
		l := ratelimit.NewLocal(c.Now)
		for i, want := range []time.Duration{0, 0, 20 * time.Millisecond, 40 * time.Millisecond, 60 * time.Millisecond} {
			r, err := l.Take(ctx, "+15550000001", limit, time.Minute)
			if err != nil || !r.OK || r.Wait != want {
				t.Errorf("take %d = %+v, %v, want OK in %v", i, r, err, want)
			}
		}
	})

	t.Run("IdleRefillsTheBurst", func(t *testing.T) {
		c := newClock()
		l := ratelimit.NewLocal(c.Now)
		for range 4 {
			ratelimittest.MustTake(t, l, ctx, "s", limit, time.Minute)
		}
		// Reserved up to 60ms ahead; 60ms + one Interval later the sender
		// has caught up and may burst again.
		c.Add(100 * time.Millisecond)
		for i := range limit.Burst {
			if r := ratelimittest.MustTake(t, l, ctx, "s", limit, 0); !r.OK || r.Wait != 0 {
				t.Errorf("take %d after idle = %+v, want OK now", i, r)
			}
		}
		if r := ratelimittest.MustTake(t, l, ctx, "s", limit, 0); r.OK || r.Wait != 20*time.Millisecond {
			t.Errorf("take past the burst = %+v, want not OK, retry in 20ms", r)
		}
	})

	t.Run("ForgetsIdleSenders", func(t *testing.T) {
		c := newClock()
		l := ratelimit.NewLocal(c.Now)
		for i := range 2000 {
			ratelimittest.MustTake(t, l, ctx, "s"+strconv.Itoa(i), limit, 0)
		}
		c.Add(time.Second) // every one of them has caught up
		for i := range 1100 {
			ratelimittest.MustTake(t, l, ctx, "t"+strconv.Itoa(i), limit, 0)
		}
		if got := l.Senders(); got > 1100 {
			t.Errorf("%d senders remembered, want at most the 1100 active since a second", got)
		}
	})
}

// fleet is a hand-written fleet limiter whose Take and Pause are its
// fields, counting the calls that reached it (its store's requests).
type fleet struct {
	mu    sync.Mutex
	calls int
	take  func() (ports.Reservation, error)
	pause func() error
}

func (f *fleet) Take(context.Context, string, ports.Limit, time.Duration) (ports.Reservation, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.take()
}

func (f *fleet) Pause(context.Context, string, ports.Limit, time.Duration) error {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.pause()
}

func (f *fleet) Calls() int { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

var errDown = errors.New("redis: connection refused")

func TestFallback(t *testing.T) {
	ctx := context.Background()
	limit := ports.Limit{Rate: 30, Burst: 3}

	t.Run("FleetAnswers", func(t *testing.T) {
		f := &fleet{take: func() (ports.Reservation, error) { return ports.Reservation{OK: true, Wait: 7 * time.Millisecond}, nil }}
		fb := mustFallback(t, ratelimit.FallbackConfig{Fleet: f, Replicas: 3})
		if r, err := fb.Take(ctx, "s", limit, time.Second); err != nil || r != (ports.Reservation{OK: true, Wait: 7 * time.Millisecond}) {
			t.Errorf("Take = %+v, %v, want the fleet's answer", r, err)
		}
	})

	t.Run("FleetDownPacesByTheShare", func(t *testing.T) {
		c := newClock()
		f := &fleet{take: func() (ports.Reservation, error) { return ports.Reservation{}, errDown }}
		var told []string
		var mu sync.Mutex
		fb := mustFallback(t, ratelimit.FallbackConfig{Fleet: f, Replicas: 3, Now: c.Now,
			OnFallback: func(op, sender string, err error) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, op+" "+sender+": "+err.Error())
			}})
		// The share of 30/s burst 3 among 3 is 10/s burst 1.
		for i, want := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
			r, err := fb.Take(ctx, "s", limit, time.Second)
			if err != nil || !r.OK || r.Wait != want {
				t.Errorf("take %d = %+v, %v, want OK in %v (the replica's share)", i, r, err, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(told) != 1 || told[0] != "take s: "+errDown.Error() {
			t.Errorf("told %q, want the one failure", told)
		}
	})

	t.Run("CoolOffThenAskAgain", func(t *testing.T) {
		c := newClock()
		down := true
		var mu sync.Mutex
		f := &fleet{take: func() (ports.Reservation, error) {
			mu.Lock()
			defer mu.Unlock()
			if down {
				return ports.Reservation{}, errDown
			}
			return ports.Reservation{OK: true, Wait: time.Millisecond}, nil
		}}
		recovered := 0
		fb := mustFallback(t, ratelimit.FallbackConfig{Fleet: f, Replicas: 3, Now: c.Now, CoolOff: time.Second, OnRecover: func() { recovered++ }})
		for range 5 {
			if _, err := fb.Take(ctx, "s", limit, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		if got := f.Calls(); got != 1 {
			t.Errorf("the fleet was asked %d times within the cool-off, want once", got)
		}
		mu.Lock()
		down = false
		mu.Unlock()
		c.Add(time.Second)
		r, err := fb.Take(ctx, "s", limit, time.Minute)
		if err != nil || r.Wait != time.Millisecond || f.Calls() != 2 || recovered != 1 {
			t.Errorf("after the cool-off: Take = %+v, %v, fleet asked %d times, recovered %d; want the fleet's answer, asked twice, recovered once", r, err, f.Calls(), recovered)
		}
	})

	t.Run("PauseHoldsLocallyWhenTheFleetIsDown", func(t *testing.T) {
		c := newClock()
		f := &fleet{
			take:  func() (ports.Reservation, error) { return ports.Reservation{}, errDown },
			pause: func() error { return errDown },
		}
		fb := mustFallback(t, ratelimit.FallbackConfig{Fleet: f, Replicas: 3, Now: c.Now})
		if err := fb.Pause(ctx, "s", limit, 5*time.Second); err != nil {
			t.Fatalf("Pause = %v, want nil: the pause holds locally", err)
		}
		r, err := fb.Take(ctx, "s", limit, time.Minute)
		if err != nil || !r.OK || r.Wait != 5*time.Second {
			t.Errorf("Take = %+v, %v, want OK at the pause's end, 5s", r, err)
		}
	})

	t.Run("ErrContextDoneIsNotAFallback", func(t *testing.T) {
		f := &fleet{take: func() (ports.Reservation, error) { return ports.Reservation{}, context.Canceled }}
		told := 0
		fb := mustFallback(t, ratelimit.FallbackConfig{Fleet: f, OnFallback: func(string, string, error) { told++ }})
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := fb.Take(cctx, "s", limit, time.Minute); !errors.Is(err, context.Canceled) {
			t.Errorf("Take = %v, want context.Canceled", err)
		}
		if told != 0 {
			t.Errorf("OnFallback told %d times for the caller's own cancellation", told)
		}
	})

	t.Run("ErrNoFleet", func(t *testing.T) {
		if _, err := ratelimit.NewFallback(ratelimit.FallbackConfig{}); err == nil {
			t.Error("NewFallback without a fleet = nil error")
		}
	})
}

func mustFallback(tb testing.TB, cfg ratelimit.FallbackConfig) *ratelimit.Fallback {
	tb.Helper()
	fb, err := ratelimit.NewFallback(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return fb
}
