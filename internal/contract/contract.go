// Package contract holds what the ports' contract suites (ports/storetest,
// ports/ratelimittest) share: names no other test uses, on a backend the
// suites may share with other tests, and a context bounded by the test.
package contract

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

var seq atomic.Int64

// Unique returns a name, starting with prefix and holding t's name, that
// no other call in this process returns, nor a test run before it on the
// same backend (it holds the current time).
func Unique(t testing.TB, prefix string) string {
	return fmt.Sprintf("%s:%s:%d:%d", prefix, t.Name(), time.Now().UnixNano(), seq.Add(1))
}

// Ctx returns a context that ends with the test, or within, whichever
// comes first.
func Ctx(t testing.TB, within time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), within)
	t.Cleanup(cancel)
	return c
}
