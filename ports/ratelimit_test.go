package ports_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

func TestLimit(t *testing.T) {
	t.Run("Interval", func(t *testing.T) {
		for _, tc := range []struct {
			rate float64
			want time.Duration
		}{
			{1, time.Second},
			{50, 20 * time.Millisecond},
			{3, 333333 * time.Microsecond},
			{0.5, 2 * time.Second},
		} {
			if got := (ports.Limit{Rate: tc.rate, Burst: 1}).Interval(); got != tc.want {
				t.Errorf("Interval at %g/s = %v, want %v", tc.rate, got, tc.want)
			}
		}
	})
	t.Run("Tolerance", func(t *testing.T) {
		if got := (ports.Limit{Rate: 10, Burst: 4}).Tolerance(); got != 300*time.Millisecond {
			t.Errorf("Tolerance = %v, want 3 intervals of 100ms", got)
		}
	})
	t.Run("Valid", func(t *testing.T) {
		for _, l := range []ports.Limit{{Rate: 0, Burst: 1}, {Rate: -1, Burst: 1}, {Rate: 1, Burst: 0}, {Rate: math.Inf(1), Burst: 1}, {Rate: math.NaN(), Burst: 1}, {Rate: 2e6, Burst: 1}, {Rate: 1e-12, Burst: 1}, {Rate: 1, Burst: math.MaxInt}} {
			if l.Valid() {
				t.Errorf("%v is Valid", l)
			}
		}
		for _, l := range []ports.Limit{{Rate: 0.01, Burst: 1}, {Rate: 1e6, Burst: 1000}, {Rate: 1e-6, Burst: 1}} {
			if !l.Valid() {
				t.Errorf("%v is not Valid", l)
			}
		}
	})
	t.Run("Share", func(t *testing.T) {
		l := ports.Limit{Rate: 50, Burst: 10}
		if got, want := l.Share(3), (ports.Limit{Rate: 50.0 / 3, Burst: 3}); got != want {
			t.Errorf("Share(3) = %v, want %v", got, want)
		}
		if got, want := (ports.Limit{Rate: 1, Burst: 1}).Share(4), (ports.Limit{Rate: 0.25, Burst: 1}); got != want {
			t.Errorf("Share(4) = %v, want %v: a burst never drops below 1", got, want)
		}
		if got := l.Share(0); got != l {
			t.Errorf("Share(0) = %v, want the limit itself", got)
		}
	})
}

func TestRateLimited(t *testing.T) {
	t.Run("CarriesRetryAfter", func(t *testing.T) {
		base := errors.New("twilio: status 429")
		err := fmt.Errorf("send k: %w", ports.RateLimited(base, 3*time.Second))
		if !errors.Is(err, ports.ErrRateLimited) || !errors.Is(err, base) {
			t.Errorf("err = %v, want it to match ErrRateLimited and its cause", err)
		}
		if d, ok := ports.RetryAfter(err); !ok || d != 3*time.Second {
			t.Errorf("RetryAfter = %v, %v, want 3s, true", d, ok)
		}
		if ports.KindOf(err) != ports.Retryable {
			t.Errorf("KindOf = %v, want retryable", ports.KindOf(err))
		}
	})
	t.Run("KeepsKind", func(t *testing.T) {
		err := ports.RateLimited(ports.MarkUnavailable(errors.New("x")), time.Second)
		if ports.KindOf(err) != ports.Unavailable {
			t.Errorf("KindOf = %v, want unavailable", ports.KindOf(err))
		}
	})
	t.Run("NotRateLimited", func(t *testing.T) {
		err := errors.New("refused")
		if errors.Is(err, ports.ErrRateLimited) {
			t.Error("a plain error matches ErrRateLimited")
		}
		if _, ok := ports.RetryAfter(err); ok {
			t.Error("RetryAfter found a wait in a plain error")
		}
		if ports.RateLimited(nil, time.Second) != nil {
			t.Error("RateLimited(nil) != nil")
		}
	})
}
