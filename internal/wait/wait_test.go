package wait_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/internal/wait"
)

// recorder is a testing.TB that keeps what For's failure says; its Fatalf
// stops For with a panic that run recovers.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(r)
}

// run calls For on r and returns its failure message, "" when it returned.
func run[C wait.Cond](within time.Duration, cond C) string {
	r := &recorder{}
	func() {
		defer func() {
			if v := recover(); v != nil && v != r {
				panic(v)
			}
		}()
		wait.For(r, within, "the thing", cond)
	}()
	return r.failed
}

func TestFor(t *testing.T) {
	t.Run("ReturnsOnceItHolds", func(t *testing.T) {
		n := 0
		if msg := run(10*time.Second, func() bool { n++; return n == 3 }); msg != "" || n != 3 {
			t.Fatalf("failed %q after %d polls, want success on the third", msg, n)
		}
	})
	t.Run("ReturnsWhenItFirstHeld", func(t *testing.T) {
		start := time.Now()
		at := wait.For(t, time.Second, "at once", func() error { return nil })
		if end := time.Now(); at.Before(start) || at.After(end) {
			t.Fatalf("returned %v, want a time within the call (%v to %v)", at, start, end)
		}
	})
	for name, tc := range map[string]struct {
		fail func() string
		want string
	}{
		"Bool":   {func() string { return run(30*time.Millisecond, func() bool { return false }) }, "the thing: not within 30ms"},
		"Error":  {func() string { return run(30*time.Millisecond, func() error { return errors.New("2 of 3") }) }, "the thing: not within 30ms: 2 of 3"},
		"Reason": {func() string { return run(30*time.Millisecond, func() (bool, string) { return false, "2 of 3" }) }, "the thing: not within 30ms: 2 of 3"},
	} {
		t.Run("FailsWithTheLastWord"+name, func(t *testing.T) {
			if got := tc.fail(); got != tc.want {
				t.Fatalf("failure %q, want %q", got, tc.want)
			}
		})
	}
}
