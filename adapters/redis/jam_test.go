package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// TestOutage_UnresponsiveUnderLoad is the unresponsive server met by a busy
// worker rather than by one caller. rueidis keeps every command it has
// written in a ring (1024 per connection) until the server answers it, even
// after the caller has given up, and a new command waits for a free slot
// without looking at its context (redis/rueidis#858). Against a paused
// server the ring fills after 1024 timeouts, and from then on every call
// hung until rueidis gave up on the connection, about 11 s later, whatever
// the store timeout said. Here 64 callers make 2048 calls with a 50 ms
// timeout: every call must still return within the timeout plus the margin,
// without a goroutine left behind per call, and the store must answer again
// once the server does.
func TestOutage_UnresponsiveUnderLoad(t *testing.T) {
	const (
		timeout = 50 * time.Millisecond
		callers = 64
		calls   = 32 // per caller: 2048 in all, twice the ring
	)
	srv := redistest.MustStart(t)
	s := MustStore(t, redis.Config{URL: srv.URL(), KeyPrefix: "jam:", Timeout: timeout})
	storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
	base := runtime.NumGoroutine()

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		slowest   time.Duration
		succeeded int
		peak      int
	)
	deadline := time.Now().Add(time.Minute) // a bound on the loop, not a timing assertion
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				if time.Now().After(deadline) {
					return
				}
				start := time.Now()
				_, err := s.Claim(context.Background(), fmt.Sprintf("k%d-%d", c, i), "tok", time.Minute)
				took := time.Since(start)
				mu.Lock()
				slowest = max(slowest, took)
				peak = max(peak, runtime.NumGoroutine())
				if err == nil {
					succeeded++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if succeeded != 0 {
		t.Fatalf("%d claims succeeded against a paused server", succeeded)
	}
	if slowest > timeout+margin {
		t.Fatalf("slowest call took %v with a %v timeout; want at most %v", slowest, timeout, timeout+margin)
	}
	// rueidis itself leaves a goroutine per abandoned command in the ring,
	// 1024 at most; the store's detached calls come on top, capped at 256.
	// Uncapped, the 1024 calls made after the ring filled would each leave
	// one more behind.
	if limit := base + callers + 1024 + 512; peak > limit {
		t.Fatalf("%d goroutines during the outage (%d before it); want at most %d", peak, base, limit)
	}

	srv.Resume(t)
	k := uniqueKey(t)
	waitFor(t, 15*time.Second, "store answers after the server resumes", func() error {
		_, err := s.Claim(context.Background(), k, "tok-after", time.Minute)
		return err
	})
	if v, _ := MustGet(t, srv.MustClient(t, 0), "jam:"+k); v != "pending:tok-after" {
		t.Fatalf("after recovery, key holds %q, want pending:tok-after", v)
	}
	waitFor(t, 15*time.Second, "calls left behind during the outage finish", func() error {
		if n := runtime.NumGoroutine(); n > base+16 {
			return fmt.Errorf("%d goroutines, %d before the outage", n, base)
		}
		return nil
	})
}
