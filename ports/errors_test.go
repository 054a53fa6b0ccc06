package ports_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

func TestPacedFor(t *testing.T) {
	waiting := func(d time.Duration) error { return ports.MarkPacedFor(errors.New("asked next later"), d) }
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
	}{
		{"Carried", waiting(time.Minute), time.Minute},
		{"Wrapped", fmt.Errorf("sms: %w", waiting(time.Minute)), time.Minute},
		{"MarkedAgain", ports.MarkPaced(fmt.Errorf("event e1: %w", waiting(time.Minute))), time.Minute},
		{"JoinedTheLeast", errors.Join(waiting(time.Minute), fmt.Errorf("email: %w", waiting(time.Second))), time.Second},
		{"JoinedWithOneDueNow", errors.Join(waiting(time.Minute), ports.MarkPaced(errors.New("no turn of the sender"))), 0},
		{"JoinedWithAFailure", errors.Join(waiting(time.Minute), errors.New("smtp: 451")), 0},
		{"PacedWithoutWait", ports.MarkPaced(errors.New("no turn of the sender")), 0},
		{"NegativeIsNow", waiting(-time.Second), 0},
		{"None", errors.New("smtp: 451"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ports.PacedFor(tc.err); got != tc.want {
				t.Fatalf("PacedFor(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if tc.want > 0 && ports.KindOf(tc.err) != ports.Paced {
				t.Fatalf("KindOf(%v) = %v, want paced", tc.err, ports.KindOf(tc.err))
			}
		})
	}
	if ports.MarkPacedFor(nil, time.Second) != nil {
		t.Fatal("MarkPacedFor(nil) is not nil")
	}
}
