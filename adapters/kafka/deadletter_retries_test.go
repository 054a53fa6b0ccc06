package kafka_test

import (
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/policy"
)

// The dead letter producer's retries, waiting policy.Backoff between
// them, add up to at least the span they are counted for, whatever the
// jitter draws: a leader election inside that span is ridden out by
// Sarama's retries, which resend the same sequence numbers.
func TestRetriesSpanning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                      string
		span, initial, maxBackoff time.Duration
		want                      int // 0: not pinned, only the span checked
	}{
		// 100+200+400+800ms+1.6+3.2s, then 5s each: 31.3s at the least.
		{"Defaults", kafka.DeadLetterUnreadyAfter, policy.DefaultRetryInitialBackoff, policy.DefaultRetryMaxBackoff, 11},
		{"IntegrationRig", kafka.DeadLetterUnreadyAfter, 50 * time.Millisecond, 250 * time.Millisecond, 0},
		{"CapBelowInitial", time.Second, time.Second, 100 * time.Millisecond, 20},
		{"NoSpan", 0, 200 * time.Millisecond, 10 * time.Second, 1},
		{"Nanoseconds", time.Millisecond, time.Nanosecond, time.Nanosecond, 1_000_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := kafka.RetriesSpanning(tc.span, tc.initial, tc.maxBackoff)
			if tc.want != 0 && n != tc.want {
				t.Errorf("RetriesSpanning(%s, %s, %s) = %d, want %d", tc.span, tc.initial, tc.maxBackoff, n, tc.want)
			}
			if n > 10_000 {
				return // too many to draw; pinned above
			}
			for range 200 {
				var waited time.Duration
				for retry := 1; retry <= n; retry++ {
					waited += policy.Backoff(retry, tc.initial, tc.maxBackoff)
				}
				if waited < tc.span {
					t.Fatalf("%d retries waited %s, less than the span %s", n, waited, tc.span)
				}
			}
		})
	}
}
