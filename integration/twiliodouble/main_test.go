package main

import (
	"testing"

	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

func TestRateLimitFlags(t *testing.T) {
	for _, tc := range []struct {
		rate, burst string
		want        double.RateLimit
	}{
		{"0", "1", double.RateLimit{PerSecond: 0, Burst: 1}},
		{"50", "5", double.RateLimit{PerSecond: 50, Burst: 5}},
		{"0.5", "1", double.RateLimit{PerSecond: 0.5, Burst: 1}},
	} {
		got, err := rateLimit(tc.rate, tc.burst)
		if err != nil || got != tc.want {
			t.Errorf("rateLimit(%q, %q) = %+v, %v, want %+v", tc.rate, tc.burst, got, err, tc.want)
		}
	}
	for _, bad := range [][2]string{{"-1", "1"}, {"fast", "1"}, {"NaN", "1"}, {"+Inf", "1"}, {"10", "0"}, {"10", "x"}} {
		if _, err := rateLimit(bad[0], bad[1]); err == nil {
			t.Errorf("rateLimit(%q, %q) = nil error", bad[0], bad[1])
		}
	}
}
