package ports_test

import (
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

func TestSleep(t *testing.T) {
	t.Run("WaitsTheFullDuration", func(t *testing.T) {
		start := time.Now()
		if !ports.Sleep(make(chan struct{}), 20*time.Millisecond) {
			t.Fatal("Sleep with done open: false, want true")
		}
		if waited := time.Since(start); waited < 20*time.Millisecond {
			t.Fatalf("Sleep returned after %v, want at least 20ms", waited)
		}
	})
	t.Run("NilDoneNeverCloses", func(t *testing.T) {
		if !ports.Sleep(nil, time.Millisecond) {
			t.Fatal("Sleep with a nil done: false, want true")
		}
	})
	t.Run("DoneEndsTheWait", func(t *testing.T) {
		done := make(chan struct{})
		close(done)
		start := time.Now()
		if ports.Sleep(done, time.Hour) {
			t.Fatal("Sleep with done closed: true, want false")
		}
		if waited := time.Since(start); waited > 10*time.Second {
			t.Fatalf("Sleep with done closed took %v", waited)
		}
	})
}

func TestLogLimit(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at       time.Duration // after t0
		ok       bool
		wantHeld int
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"FirstEventPasses", []step{{0, true, 0}}},
		{"HeldWithinEvery", []step{{0, true, 0}, {time.Second, false, 0}, {4 * time.Second, false, 0}}},
		{"NextPassCountsTheHeld", []step{{0, true, 0}, {time.Second, false, 0}, {2 * time.Second, false, 0}, {5 * time.Second, true, 2}, {6 * time.Second, false, 0}, {10 * time.Second, true, 1}}},
		{"QuietPeriodResetsTheCount", []step{{0, true, 0}, {5 * time.Second, true, 0}, {time.Hour, true, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &ports.LogLimit{Every: 5 * time.Second}
			for i, s := range tc.steps {
				held, ok := l.Allow(t0.Add(s.at))
				if ok != s.ok || held != s.wantHeld {
					t.Fatalf("event %d at +%v: Allow = (%d, %v), want (%d, %v)", i, s.at, held, ok, s.wantHeld, s.ok)
				}
			}
		})
	}
}
