package ports_test

import (
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

func TestLeasePassed(t *testing.T) {
	until := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		lease ports.Lease
		now   time.Time
		want  bool
	}{
		{"LiveBeforeUntil", ports.Lease{Until: until}, until.Add(-time.Millisecond), false},
		{"PassedAtUntil", ports.Lease{Until: until}, until, true},
		{"PassedAfterUntil", ports.Lease{Until: until}, until.Add(time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.lease.Passed(tc.now); got != tc.want {
				t.Fatalf("Lease{Until: %v}.Passed(%v) = %v, want %v", tc.lease.Until, tc.now, got, tc.want)
			}
		})
	}
}
