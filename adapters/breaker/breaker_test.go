package breaker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

var errDown = errors.New("store down")

// switchable returns a fake whose every method fails with errDown while down
// is set, and blocks (up to 1 s, or until ctx is done) while slow is set.
func switchable(down, slow *atomic.Bool) *storetest.Fake {
	answer := func(ctx context.Context) error {
		if slow.Load() {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if down.Load() {
			return errDown
		}
		return nil
	}
	return &storetest.Fake{
		ClaimFunc: func(ctx context.Context, _, _, _, _ string, _ time.Duration) (ports.Claim, error) {
			if err := answer(ctx); err != nil {
				return ports.Claim{}, err
			}
			return ports.Claim{State: ports.Claimed}, nil
		},
		RecordFunc:  func(ctx context.Context, _ string, _ ports.Receipt, _ time.Duration) error { return answer(ctx) },
		ReleaseFunc: func(ctx context.Context, _, _ string) error { return answer(ctx) },
	}
}

// MustBreaker builds a breaker and closes it when tb ends.
func MustBreaker(tb testing.TB, s ports.IdempotencyStore, cfg breaker.Config) *breaker.Breaker {
	tb.Helper()
	b := breaker.New(s, cfg)
	tb.Cleanup(b.Close)
	return b
}

// never is a probe that never reaches the store, to hold a circuit open.
func never(context.Context) error { return errDown }

// calls are the three port methods, so each test can use all of them.
var calls = map[string]func(ctx context.Context, s ports.IdempotencyStore) error{
	"Claim": func(ctx context.Context, s ports.IdempotencyStore) error {
		_, err := s.Claim(ctx, "k", "tok", "", "", time.Minute)
		return err
	},
	"Record": func(ctx context.Context, s ports.IdempotencyStore) error {
		return s.Record(ctx, "k", ports.Receipt{ProviderID: "SM1"}, time.Hour)
	},
	"Release": func(ctx context.Context, s ports.IdempotencyStore) error { return s.Release(ctx, "k", "tok") },
}

// waitState waits until b reports want, or fails after within.
func waitState(tb testing.TB, b *breaker.Breaker, want string, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for b.State() != want {
		if time.Now().After(deadline) {
			tb.Fatalf("state %q, want %q within %v", b.State(), want, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOpens(t *testing.T) {
	t.Run("AfterConsecutiveFailures", func(t *testing.T) {
		var down, slow atomic.Bool
		down.Store(true)
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 3, Cooldown: time.Hour, Probe: never})
		ctx := context.Background()
		// Failures of any method count together, and are the store's own
		// errors until the circuit opens.
		for i, name := range []string{"Claim", "Record", "Release"} {
			if err := calls[name](ctx, b); !errors.Is(err, errDown) || errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("%s (failure %d): err %v, want the store's error", name, i+1, err)
			}
			want := breaker.StateClosed
			if i == 2 {
				want = breaker.StateOpen
			}
			if got := b.State(); got != want {
				t.Fatalf("after %d failures: state %q, want %q", i+1, got, want)
			}
		}
		for name, call := range calls {
			if err := call(ctx, b); !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("%s while open: err %v, want ErrOpen", name, err)
			}
		}
	})

	t.Run("DefaultIsFive", func(t *testing.T) {
		var down, slow atomic.Bool
		down.Store(true)
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Cooldown: time.Hour, Probe: never})
		for i := range 5 {
			if b.State() != breaker.StateClosed {
				t.Fatalf("open after %d failures, want 5", i)
			}
			_ = calls["Claim"](context.Background(), b)
		}
		if b.State() != breaker.StateOpen {
			t.Fatalf("closed after 5 failures")
		}
	})

	t.Run("SuccessResetsCount", func(t *testing.T) {
		var down, slow atomic.Bool
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 3, Cooldown: time.Hour, Probe: never})
		ctx := context.Background()
		for round := range 3 {
			down.Store(true)
			_ = calls["Claim"](ctx, b)
			_ = calls["Record"](ctx, b)
			down.Store(false)
			if err := calls["Release"](ctx, b); err != nil {
				t.Fatalf("round %d: Release: %v", round, err)
			}
		}
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("state %q after failures broken up by successes, want closed", got)
		}
	})

	t.Run("CallerCancellationIsNotAFailure", func(t *testing.T) {
		var down, slow atomic.Bool
		slow.Store(true)
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 2, Cooldown: time.Hour, Probe: never})
		for i := range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Millisecond, cancel)
			if err := calls["Claim"](ctx, b); !errors.Is(err, context.Canceled) {
				t.Fatalf("call %d: err %v, want context.Canceled", i, err)
			}
		}
		if got := b.State(); got != breaker.StateClosed {
			t.Fatalf("state %q after callers gave up, want closed", got)
		}
	})

	t.Run("CallerDeadlineIsAFailure", func(t *testing.T) {
		// The domain bounds each store call by IDEMPOTENCY_TIMEOUT through
		// the context: a hanging store looks exactly like this.
		var down, slow atomic.Bool
		slow.Store(true)
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 2, Cooldown: time.Hour, Probe: never})
		for i := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			if err := calls["Record"](ctx, b); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: err %v, want context.DeadlineExceeded", i, err)
			}
			cancel()
		}
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q after the store outlived two callers' deadlines, want open", got)
		}
	})

	t.Run("StoreTimeoutIsAFailure", func(t *testing.T) {
		// The store's own deadline expiring (the caller's context still
		// live) is exactly the outage the breaker exists for.
		f := &storetest.Fake{ClaimFunc: func(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
			return ports.Claim{}, context.DeadlineExceeded
		}}
		b := MustBreaker(t, f, breaker.Config{Failures: 2, Cooldown: time.Hour, Probe: never})
		for range 2 {
			_ = calls["Claim"](context.Background(), b)
		}
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q after two store timeouts, want open", got)
		}
	})
}

func TestFailsFastWhileOpen(t *testing.T) {
	var down, slow atomic.Bool
	down.Store(true)
	f := switchable(&down, &slow)
	b := MustBreaker(t, f, breaker.Config{Failures: 2, Cooldown: time.Hour, Probe: never})
	for range 2 {
		_ = calls["Claim"](context.Background(), b)
	}
	waitState(t, b, breaker.StateOpen, time.Second)
	slow.Store(true) // the store would now hold every call for a second
	reached := f.Calls()
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			err := call(context.Background(), b)
			// The store would hold the call for 1s; a quarter of that is far
			// above scheduling noise on a busy machine.
			if took := time.Since(start); took > 250*time.Millisecond {
				t.Fatalf("took %v while open, want an answer without the store", took)
			}
			if !errors.Is(err, breaker.ErrOpen) {
				t.Fatalf("err %v, want ErrOpen", err)
			}
			if !strings.Contains(err.Error(), strings.ToLower(name)+" k:") {
				t.Fatalf("err %q does not say which call on which key", err)
			}
		})
	}
	if n := f.Calls(); n != reached {
		t.Fatalf("store reached %d times while open, want 0", n-reached)
	}
}

func TestCloses(t *testing.T) {
	t.Run("WhenProbeSucceeds", func(t *testing.T) {
		var down, slow atomic.Bool
		down.Store(true)
		var healthy atomic.Bool
		var probes atomic.Int64
		probe := func(ctx context.Context) error {
			probes.Add(1)
			if healthy.Load() {
				return nil
			}
			return errDown
		}
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 1, Cooldown: 10 * time.Millisecond, Probe: probe})
		_ = calls["Claim"](context.Background(), b)
		// Failing probes keep it open.
		deadline := time.Now().Add(2 * time.Second)
		for probes.Load() < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%d probes within 2s at a 10ms cooldown, want 3", probes.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := b.State(); got != breaker.StateOpen {
			t.Fatalf("state %q while probes fail, want open", got)
		}
		down.Store(false)
		healthy.Store(true)
		waitState(t, b, breaker.StateClosed, 2*time.Second)
		for name, call := range calls {
			if err := call(context.Background(), b); err != nil {
				t.Fatalf("%s after closing: %v", name, err)
			}
		}
	})

	t.Run("DefaultProbeReleasesAnAbsentKey", func(t *testing.T) {
		// With no Probe, the prober must not write: only Release may reach
		// the store, on a key nobody else uses.
		var down atomic.Bool
		down.Store(true)
		var mu sync.Mutex
		var probed []string
		f := &storetest.Fake{
			ClaimFunc: func(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
				return ports.Claim{}, errDown
			},
			RecordFunc: func(context.Context, string, ports.Receipt, time.Duration) error {
				t.Errorf("Record reached the store while probing")
				return errDown
			},
			ReleaseFunc: func(_ context.Context, key, _ string) error {
				mu.Lock()
				probed = append(probed, key)
				mu.Unlock()
				if down.Load() {
					return errDown
				}
				return nil
			},
		}
		b := MustBreaker(t, f, breaker.Config{Failures: 1, Cooldown: 10 * time.Millisecond})
		_ = calls["Claim"](context.Background(), b)
		claims := f.Calls()
		down.Store(false)
		waitState(t, b, breaker.StateClosed, 2*time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(probed) == 0 {
			t.Fatalf("closed without a probe")
		}
		if int64(len(probed)) != f.Calls()-claims {
			t.Fatalf("%d calls reached the store while probing, %d of them Releases", f.Calls()-claims, len(probed))
		}
		for _, k := range probed {
			if k == "k" || !strings.HasPrefix(k, "breaker-probe:") {
				t.Fatalf("probe released %q, want a breaker-probe: key", k)
			}
		}
	})

	t.Run("ReopensAfterClosing", func(t *testing.T) {
		var down, slow atomic.Bool
		down.Store(true)
		var healthy atomic.Bool
		probe := func(context.Context) error {
			if healthy.Load() {
				return nil
			}
			return errDown
		}
		b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 2, Cooldown: 10 * time.Millisecond, Probe: probe})
		for cycle := range 3 {
			healthy.Store(false)
			for range 2 {
				_ = calls["Record"](context.Background(), b)
			}
			if got := b.State(); got != breaker.StateOpen {
				t.Fatalf("cycle %d: state %q after 2 failures, want open", cycle, got)
			}
			healthy.Store(true)
			waitState(t, b, breaker.StateClosed, 2*time.Second)
		}
	})
}

func TestClose(t *testing.T) {
	t.Run("CancelsAProbeInProgress", func(t *testing.T) {
		var down, slow atomic.Bool
		down.Store(true)
		started := make(chan struct{})
		var once sync.Once
		probeErr := make(chan error, 1)
		probe := func(ctx context.Context) error {
			once.Do(func() { close(started) })
			<-ctx.Done()
			select {
			case probeErr <- ctx.Err():
			default:
			}
			return ctx.Err()
		}
		// The probe's own deadline is the cooldown (1s after it starts):
		// a Canceled error well before that can only come from Close.
		b := breaker.New(switchable(&down, &slow), breaker.Config{Failures: 1, Cooldown: time.Second, Probe: probe})
		_ = calls["Claim"](context.Background(), b)
		select {
		case <-started:
		case <-time.After(2 * time.Second):
			t.Fatalf("no probe within 2s")
		}
		start := time.Now()
		closed := make(chan struct{})
		go func() { b.Close(); b.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(2 * time.Second):
			t.Fatalf("Close did not return within 2s")
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("Close took %v, want it to cancel the probe at once", took)
		}
		if err := <-probeErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("probe context ended with %v, want context.Canceled", err)
		}
	})

	t.Run("IdleBreaker", func(t *testing.T) {
		b := breaker.New(&storetest.Fake{}, breaker.Config{})
		done := make(chan struct{})
		go func() { b.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("Close of an idle breaker did not return within 2s")
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	// Under -race: calls, state reads and probes from many goroutines while
	// the store flaps.
	var down, slow atomic.Bool
	b := MustBreaker(t, switchable(&down, &slow), breaker.Config{Failures: 3, Cooldown: time.Millisecond, Probe: func(context.Context) error {
		if down.Load() {
			return errDown
		}
		return nil
	}})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				if (g+i)%50 == 0 {
					down.Store(!down.Load())
				}
				_ = calls["Claim"](context.Background(), b)
				_ = b.State()
			}
		}()
	}
	wg.Wait()
	down.Store(false)
	waitState(t, b, breaker.StateClosed, 2*time.Second)
}
