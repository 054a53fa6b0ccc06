// Package wait is how tests and their support wait for a condition: poll
// it until it holds, and fail the test, with what was awaited and the
// condition's last word, once a deadline has passed. A test waits on what
// it asserts, never for a fixed time.
package wait

import (
	"testing"
	"time"
)

// Cond is a condition For polls. It holds when it returns true, or a nil
// error; otherwise the error, or the string, says how far things got, and
// For's failure quotes the last one.
type Cond interface {
	func() bool | func() error | func() (bool, string)
}

// Every is how often For polls.
const Every = 10 * time.Millisecond

// For polls cond every Every until it holds, and returns when it first
// did. Once within has passed without it, For fails tb with what, within
// and cond's last word (tb.Fatalf: call For from the test's goroutine).
func For[C Cond](tb testing.TB, within time.Duration, what string, cond C) time.Time {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := holds(cond)
		if ok {
			return time.Now()
		}
		if time.Now().After(deadline) {
			if last != "" {
				last = ": " + last
			}
			tb.Fatalf("%s: not within %v%s", what, within, last)
		}
		time.Sleep(Every)
	}
}

// holds calls cond once, and reports whether it held and, if not, its
// last word.
func holds[C Cond](cond C) (bool, string) {
	switch c := any(cond).(type) {
	case func() bool:
		return c(), ""
	case func() error:
		if err := c(); err != nil {
			return false, err.Error()
		}
		return true, ""
	}
	return any(cond).(func() (bool, string))()
}
