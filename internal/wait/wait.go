// Package wait is how tests and their support wait for a condition: poll
// it until it holds, and fail the test, with what was awaited and the
// condition's last word, once a deadline has passed. A test waits on what
// it asserts, never for a fixed time.
package wait

import (
	"fmt"
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
	check := judge(cond)
	deadline := time.Now().Add(within)
	for {
		ok, last := check()
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

// judge turns any Cond into one that reports whether it holds and, when
// not, its last word.
func judge[C Cond](cond C) func() (bool, string) {
	switch c := any(cond).(type) {
	case func() bool:
		return func() (bool, string) { return c(), "" }
	case func() error:
		return func() (bool, string) {
			if err := c(); err != nil {
				return false, err.Error()
			}
			return true, ""
		}
	case func() (bool, string):
		return c
	}
	panic(fmt.Sprintf("wait: condition of type %T", cond))
}
