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

// The jam tests meet an unresponsive server with a busy worker rather than
// one caller. rueidis keeps every command it has written in a ring (1024 per
// connection) until the server answers it, even after the caller has given
// up, and a new command waits for a free slot without looking at its
// context (redis/rueidis#858). Against a paused server the ring fills after
// 1024 timeouts, and from then on every call hung until rueidis gave up on
// the connection, about 11 s later, whatever the store timeout said.
const (
	jamTimeout = 50 * time.Millisecond
	jamCallers = 64
)

// jam is what hammer saw.
type jam struct {
	calls, succeeded int
	slowest          time.Duration
	peakGoroutines   int
}

// hammer makes up to perCaller claims of fresh keys from each of jamCallers
// goroutines, pausing between two calls of a caller, for at most within.
func hammer(s *redis.Store, perCaller int, pause, within time.Duration) jam {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got jam
	)
	stop := time.Now().Add(within)
	for c := range jamCallers {
		wg.Go(func() {
			for i := 0; i < perCaller && time.Now().Before(stop); i++ {
				start := time.Now()
				_, err := s.Claim(context.Background(), fmt.Sprintf("k%d-%d", c, i), "tok", time.Minute)
				took := time.Since(start)
				mu.Lock()
				got.calls++
				got.slowest = max(got.slowest, took)
				got.peakGoroutines = max(got.peakGoroutines, runtime.NumGoroutine())
				if err == nil {
					got.succeeded++
				}
				mu.Unlock()
				time.Sleep(pause) // the load's pace, not a wait for a condition
			}
		})
	}
	wg.Wait()
	return got
}

// mustAnswerAgain waits until s claims a fresh key again, then until the
// goroutines left behind during the outage are gone.
func mustAnswerAgain(t *testing.T, s *redis.Store, goroutinesBefore int) {
	t.Helper()
	k := uniqueKey(t)
	waitFor(t, 20*time.Second, "store answers after the server resumes", func() error {
		_, err := s.Claim(context.Background(), k, "tok-after", time.Minute)
		return err
	})
	waitFor(t, 15*time.Second, "calls left behind during the outage finish", func() error {
		if n := runtime.NumGoroutine(); n > goroutinesBefore+16 {
			return fmt.Errorf("%d goroutines, %d before the outage", n, goroutinesBefore)
		}
		return nil
	})
}

// TestOutage_UnresponsiveUnderLoad: 64 callers, each pausing 20 ms between
// calls, keep calling a paused server with a 50 ms timeout for 4 s: the
// ring fills after about a second, then the store's detached calls reach
// their cap and calls are refused with ErrStalled, and the load goes on
// well past the second after the last timeout (a review found the stalled
// state lapsing there, and calls hanging again). Every call must still
// return within the timeout plus the margin, without a goroutine left behind
// per call, and the store must answer again once the server does.
func TestOutage_UnresponsiveUnderLoad(t *testing.T) {
	srv := redistest.MustStart(t)
	s := MustStore(t, redis.Config{URL: srv.URL(), KeyPrefix: "jam:", Timeout: jamTimeout})
	storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
	base := runtime.NumGoroutine()

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	got := hammer(s, 200, 20*time.Millisecond, 4*time.Second)
	if got.succeeded != 0 {
		t.Fatalf("%d claims succeeded against a paused server", got.succeeded)
	}
	if got.slowest > jamTimeout+margin {
		t.Fatalf("slowest of %d calls took %v with a %v timeout; want at most %v", got.calls, got.slowest, jamTimeout, jamTimeout+margin)
	}
	// rueidis itself leaves a goroutine per abandoned command in the ring,
	// 1024 at most; the store's detached calls come on top, capped at 256.
	// Uncapped, every call made after the ring filled would leave one more
	// behind.
	if limit := base + jamCallers + 1024 + 512; got.peakGoroutines > limit {
		t.Fatalf("%d goroutines during the outage (%d before it); want at most %d", got.peakGoroutines, base, limit)
	}

	srv.Resume(t)
	mustAnswerAgain(t, s, base)
}

// TestOutage_ClusterNodeUnresponsive: one node of three stops answering
// while the other two answer at once. Their answers must not let calls to
// the silent node run undetached into its full ring: every call returns
// within the timeout plus the margin.
func TestOutage_ClusterNodeUnresponsive(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	s := MustStore(t, redis.Config{URL: c.URL(), KeyPrefix: "jam:", Timeout: jamTimeout})
	for range 16 {
		storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
	}
	base := runtime.NumGoroutine()

	c.Nodes[2].Pause(t)
	t.Cleanup(func() { c.Nodes[2].Resume(t) })
	// A third of the keys are the paused node's: its ring is full after
	// about 3000 calls. Before the store kept calls detached while any node
	// was silent, calls to it then hung for 11 s.
	got := hammer(s, 100, 0, 4*time.Second)
	if got.slowest > jamTimeout+margin {
		t.Fatalf("slowest of %d calls took %v with a %v timeout; want at most %v", got.calls, got.slowest, jamTimeout, jamTimeout+margin)
	}

	c.Nodes[2].Resume(t)
	mustAnswerAgain(t, s, base)
}

// TestOutage_UnresponsiveIdleThenBurst: the ring is left nearly full by
// calls that timed out, then nothing calls for a while, then a burst comes.
// The stalled state must outlast the slots those timed-out commands hold,
// which rueidis frees only by dropping the connection: a state that lapsed
// first let the burst into the full ring, where it hung (9.8 s, found in
// review). The URL's write_timeout shortens rueidis' drop so the test can
// also idle past it, and check the burst on the new connection.
func TestOutage_UnresponsiveIdleThenBurst(t *testing.T) {
	srv := redistest.MustStart(t)
	s := MustStore(t, redis.Config{URL: srv.URL() + "?write_timeout=1s", KeyPrefix: "jam:", Timeout: jamTimeout})
	storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
	base := runtime.NumGoroutine()

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	fill := hammer(s, 15, 0, 10*time.Second) // 960 calls: the ring nearly full
	// Each idle spell is the scenario, not a wait for a condition: one
	// past the store's first stalled window (1 s), one past rueidis' drop
	// of the connection and the store's window (write_timeout 1s + 3
	// keep-alive intervals).
	for _, idle := range []time.Duration{1500 * time.Millisecond, 5 * time.Second} {
		time.Sleep(idle)
		got := hammer(s, 2, 0, 10*time.Second)
		if got.slowest > jamTimeout+margin {
			t.Fatalf("after %v idle (%d calls to fill the ring first): slowest of %d calls took %v with a %v timeout; want at most %v",
				idle, fill.calls, got.calls, got.slowest, jamTimeout, jamTimeout+margin)
		}
	}

	srv.Resume(t)
	mustAnswerAgain(t, s, base)
}
