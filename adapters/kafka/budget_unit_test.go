package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/wait"
)

// acquiring starts b.Acquire(n) in a goroutine; the returned channel
// yields its result once it returns.
func acquiring(b *kafka.ByteBudget, n int64, done <-chan struct{}) <-chan bool {
	out := make(chan bool, 1)
	go func() { out <- b.Acquire(n, done) }()
	return out
}

// mustAdmit waits for an Acquire started by acquiring to return true.
func mustAdmit(t *testing.T, got <-chan bool, what string) {
	t.Helper()
	select {
	case ok := <-got:
		if !ok {
			t.Fatalf("%s: Acquire reported false", what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not admitted within 5s", what)
	}
}

// mustWait checks that an Acquire started by acquiring has not returned.
// Call it once the call is queued (see queued): from then on only a
// Release or its done channel can let it return, so the check is exact.
func mustWait(t *testing.T, got <-chan bool, what string) {
	t.Helper()
	select {
	case ok := <-got:
		t.Fatalf("%s: Acquire returned %v, want it waiting", what, ok)
	default:
	}
}

// queued waits until n Acquire calls wait in b.
func queued(t *testing.T, b *kafka.ByteBudget, n int) {
	t.Helper()
	wait.For(t, 5*time.Second, fmt.Sprintf("%d Acquire calls queued", n), func() bool { return b.Waiting() == n })
}

func TestByteBudget(t *testing.T) {
	t.Run("LargerThanLimitAdmittedAlone", func(t *testing.T) {
		b := kafka.NewByteBudget(100)
		mustAdmit(t, acquiring(b, 10, nil), "small")
		large := acquiring(b, 250, nil)
		queued(t, b, 1)
		mustWait(t, large, "large while 10 bytes are held")
		b.Release(10)
		mustAdmit(t, large, "large once nothing is held")
		if got := b.Held(); got != 250 {
			t.Errorf("Held = %d, want 250", got)
		}
	})

	t.Run("FirstComeFirstServed", func(t *testing.T) {
		// A small record that would fit must not overtake a large one
		// waiting ahead of it, or a stream of small records could keep
		// the large one out for ever.
		b := kafka.NewByteBudget(100)
		mustAdmit(t, acquiring(b, 60, nil), "first")
		large := acquiring(b, 80, nil)
		queued(t, b, 1)
		small := acquiring(b, 30, nil)
		queued(t, b, 2)
		mustWait(t, large, "large beside 60 held bytes")
		mustWait(t, small, "small behind the large one")
		b.Release(60)
		mustAdmit(t, large, "large once the first is released")
		mustWait(t, small, "small beside the large one (80+30 > 100)")
		b.Release(80)
		mustAdmit(t, small, "small once the large one is released")
	})

	t.Run("GivingUpLetsTheNextIn", func(t *testing.T) {
		b := kafka.NewByteBudget(100)
		mustAdmit(t, acquiring(b, 60, nil), "first")
		cancel := make(chan struct{})
		large := acquiring(b, 80, cancel)
		queued(t, b, 1)
		small := acquiring(b, 30, nil)
		queued(t, b, 2)
		mustWait(t, small, "small behind the large one")
		close(cancel) // the large one's partition was revoked
		select {
		case ok := <-large:
			if ok {
				t.Fatal("a cancelled Acquire reported true")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a cancelled Acquire did not return")
		}
		mustAdmit(t, small, "small once the large one gave up")
		if got := b.Held(); got != 90 {
			t.Errorf("Held = %d, want 90 (nothing of the cancelled record)", got)
		}
	})
}
