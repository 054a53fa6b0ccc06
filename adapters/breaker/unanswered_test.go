package breaker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
)

// TestOpensOnUnanswered covers the second way the circuit opens: too many
// failed calls within UnansweredFor, whatever succeeded in between, which
// is how a store failing only part of its calls (one cluster node) shows.
func TestOpensOnUnanswered(t *testing.T) {
	t.Run("FailuresBrokenUpBySuccesses", func(t *testing.T) {
		var down, slow atomic.Bool
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{
			Failures: 3, Cooldown: time.Hour, Probe: never, Unanswered: 4, UnansweredFor: time.Hour,
		})
		ctx := context.Background()
		for i := range 4 {
			if got := b.State(); got != breaker.StateClosed {
				t.Fatalf("state %q after %d failures each followed by a success, want closed until 4", got, i)
			}
			down.Store(true)
			_ = calls["Claim"](ctx, b)
			down.Store(false)
			if i < 3 {
				if err := calls["Release"](ctx, b); err != nil {
					t.Fatalf("success %d: %v", i, err)
				}
			}
		}
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q after 4 failures within UnansweredFor, want open", got)
		}
	})

	t.Run("OlderFailuresDoNotCount", func(t *testing.T) {
		var down, slow atomic.Bool
		const within = 100 * time.Millisecond
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{
			Failures: 1000, Cooldown: time.Hour, Probe: never, Unanswered: 3, UnansweredFor: within,
		})
		ctx := context.Background()
		down.Store(true)
		_ = calls["Claim"](ctx, b)
		_ = calls["Claim"](ctx, b)
		time.Sleep(within + 20*time.Millisecond) // the scenario: the first two fall out of the window
		_ = calls["Claim"](ctx, b)
		_ = calls["Claim"](ctx, b)
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("state %q with 2 failures within UnansweredFor, want closed", got)
		}
		_ = calls["Claim"](ctx, b)
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q with 3 failures within UnansweredFor, want open", got)
		}
	})

	t.Run("CancelledCallsCount", func(t *testing.T) {
		// A caller that gave up says nothing about the store's health
		// (not a consecutive failure), but the store may still hold its
		// call.
		var down, slow atomic.Bool
		slow.Store(true)
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{
			Failures: 2, Cooldown: time.Hour, Probe: never, Unanswered: 3, UnansweredFor: time.Hour,
		})
		for i := range 3 {
			if got := b.State(); got != breaker.StateClosed {
				t.Fatalf("state %q after %d cancelled calls, want closed until 3", got, i)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Millisecond, cancel)
			_ = calls["Claim"](ctx, b)
		}
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q after 3 cancelled calls within UnansweredFor, want open", got)
		}
	})

	t.Run("ProbeSuccessForgetsFailures", func(t *testing.T) {
		// A probe that came back means the store answered every call made
		// before it: the failures before it no longer count.
		var down, slow atomic.Bool
		var healthy atomic.Bool
		probe := func(context.Context) error {
			if healthy.Load() {
				return nil
			}
			return errDown
		}
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{
			Failures: 1000, Cooldown: 10 * time.Millisecond, Probe: probe, Unanswered: 3, UnansweredFor: time.Hour,
		})
		ctx := context.Background()
		down.Store(true)
		for range 3 {
			_ = calls["Claim"](ctx, b)
		}
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q after 3 failures, want open", got)
		}
		healthy.Store(true)
		waitState(t, b, breaker.StateClosed, 2*time.Second)
		_ = calls["Claim"](ctx, b)
		_ = calls["Claim"](ctx, b)
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("state %q after 2 failures since the probe succeeded, want closed", got)
		}
	})
}

func TestForCallers(t *testing.T) {
	cfg, maxUnanswered := breaker.ForCallers(breaker.Config{Failures: 5, Cooldown: time.Second}, 1024, 13*time.Second)
	if cfg.Unanswered != 1029 || cfg.UnansweredFor != 13*time.Second {
		t.Fatalf("Unanswered %d within %v, want 1029 (callers + Failures) within 13s", cfg.Unanswered, cfg.UnansweredFor)
	}
	// 1024 in flight, 1024 more failing once it opens, two claims each
	// settled while open, 1029 failed before it opened, 14 probes.
	if want := 4*1024 + 1029 + 14; maxUnanswered != want {
		t.Fatalf("MaxUnanswered = %d, want %d", maxUnanswered, want)
	}
	if got := breaker.MaxUnanswered(breaker.Config{}, 64); got != -1 {
		t.Fatalf("MaxUnanswered without an Unanswered bound = %d, want -1 (unbounded)", got)
	}
}
