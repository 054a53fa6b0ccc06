package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// The jam tests meet an unresponsive server with a busy worker rather than
// one caller, through the Redis store and the breaker as the worker wires
// them (ForCallers). rueidis keeps every command it has written in a ring
// until the server answers it, even after the caller has given up, and a
// new command waits for a free slot without looking at its context
// (redis/rueidis#858). With a ring of rueidis' default 1024 slots and
// nothing to stop the callers, the ring filled after 1024 timeouts, and
// from then on every call hung until rueidis gave up on the connection,
// about 11 s later, whatever the store timeout said. Now the breaker bounds
// what the callers leave unanswered, and the ring holds that bound.
//
// jamMargin is what a call may take beyond its timeout: scheduling, the
// race detector and other packages' tests on the same two cores. A call
// stuck behind a full ring takes seconds.
const (
	jamTimeout = 50 * time.Millisecond
	jamMargin  = 500 * time.Millisecond
	jamCallers = 64
)

// clusterMargin is jamMargin for the cluster outage, whose callers call
// without pausing: on two loaded cores under the race detector they wait
// seconds for a CPU, and a call can take 3 s without the store being at
// fault. A call stuck behind the full ring the test guards against waits
// until rueidis drops the silent connection, about 11 s with this URL, so
// 4 s still tells the two apart.
const clusterMargin = 4 * time.Second

// jammed is the Redis store behind a breaker, wired as the worker wires
// them for jamCallers callers.
type jammed struct {
	*breaker.Breaker
	store         *redis.Store
	maxUnanswered int
}

// mustJammed builds the pair on url, closed when tb ends.
func mustJammed(tb testing.TB, url string) jammed {
	tb.Helper()
	// As the worker runs it: compact keys, reading both formats (two
	// commands a Claim).
	rcfg := redis.Config{URL: url, CompactPrefix: "jam:", KeyPrefix: "jam-r:", ReadBoth: true, Timeout: jamTimeout}
	within, err := rcfg.UnansweredFor()
	if err != nil {
		tb.Fatal(err)
	}
	bcfg, maxUnanswered := breaker.ForCallers(breaker.Config{Failures: 5, Cooldown: 200 * time.Millisecond}, jamCallers, within)
	rcfg.MaxUnanswered = maxUnanswered
	s, err := redis.New(rcfg)
	if err != nil {
		tb.Fatalf("redis.New: %v", err)
	}
	tb.Cleanup(s.Close)
	bcfg.Probe = s.Ping
	return jammed{Breaker: MustBreaker(tb, s, bcfg), store: s, maxUnanswered: maxUnanswered}
}

// jam is what hammer saw.
type jam struct {
	calls, succeeded, refused int
	slowest                   time.Duration
	peakGoroutines            int
}

var jamSeq atomic.Int64

// hammer makes up to perCaller claims of fresh keys from each of jamCallers
// goroutines, pausing between two calls of a caller, for at most within.
func hammer(s ports.IdempotencyStore, perCaller int, pause, within time.Duration) jam {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		got jam
	)
	stop := time.Now().Add(within)
	run := jamSeq.Add(1)
	for c := range jamCallers {
		wg.Go(func() {
			for i := 0; i < perCaller && time.Now().Before(stop); i++ {
				start := time.Now()
				_, err := s.Claim(context.Background(), fmt.Sprintf("k%d-%d-%d", run, c, i), "tok", "", "", time.Minute)
				took := time.Since(start)
				mu.Lock()
				got.calls++
				got.slowest = max(got.slowest, took)
				got.peakGoroutines = max(got.peakGoroutines, runtime.NumGoroutine())
				if err == nil {
					got.succeeded++
				}
				if errors.Is(err, breaker.ErrOpen) {
					got.refused++
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
func mustAnswerAgain(t *testing.T, s ports.IdempotencyStore, goroutinesBefore int) {
	t.Helper()
	k := fmt.Sprintf("after-%d", jamSeq.Add(1))
	wait.For(t, 20*time.Second, "store answers after the server resumes", func() error {
		_, err := s.Claim(context.Background(), k, "tok-after", "", "", time.Minute)
		return err
	})
	wait.For(t, 15*time.Second, "calls left behind during the outage finish", func() error {
		if n := runtime.NumGoroutine(); n > goroutinesBefore+16 {
			return fmt.Errorf("%d goroutines, %d before the outage", n, goroutinesBefore)
		}
		return nil
	})
}

// mustClaim claims a fresh key through s, before an outage, trying again
// until the store answers within its timeout or 10 s have passed. The
// store's 50 ms timeout is short for the first calls on a loaded machine
// (new connections, the cluster's slot map): a warm-up call that fails is
// not what the jam tests are about.
func mustClaim(t *testing.T, s ports.IdempotencyStore) {
	t.Helper()
	wait.For(t, 10*time.Second, "warm-up claim", func() error {
		_, err := s.Claim(context.Background(), fmt.Sprintf("warm-%d", jamSeq.Add(1)), "tok", "", "", time.Minute)
		return err
	})
}

// TestOutage_UnresponsiveUnderLoad: 64 callers, each pausing 20 ms between
// calls, keep calling a paused server with a 50 ms timeout for 4 s, past
// the 1024 calls that filled rueidis' default ring. Every call must return
// within the timeout plus the margin, the breaker must refuse most of them,
// no goroutine may be left behind per call, and the store must answer
// again once the server does.
func TestOutage_UnresponsiveUnderLoad(t *testing.T) {
	srv := redistest.MustStart(t)
	s := mustJammed(t, srv.URL())
	mustClaim(t, s)
	base := runtime.NumGoroutine()

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	got := hammer(s, 200, 20*time.Millisecond, 4*time.Second)
	if got.succeeded != 0 {
		t.Fatalf("%d claims succeeded against a paused server", got.succeeded)
	}
	if got.slowest > jamTimeout+jamMargin {
		t.Fatalf("slowest of %d calls took %v with a %v timeout; want at most %v", got.calls, got.slowest, jamTimeout, jamTimeout+jamMargin)
	}
	if got.calls-got.refused > s.maxUnanswered {
		t.Fatalf("%d of %d calls reached the paused server, more than the %d the ring is sized for", got.calls-got.refused, got.calls, s.maxUnanswered)
	}
	// rueidis leaves a goroutine per abandoned command in the ring, at most
	// the ring's bound. Unbounded, every call would leave one more behind.
	if limit := base + jamCallers + s.maxUnanswered + 64; got.peakGoroutines > limit {
		t.Fatalf("%d goroutines during the outage (%d before it); want at most %d", got.peakGoroutines, base, limit)
	}

	srv.Resume(t)
	mustAnswerAgain(t, s, base)
}

// TestOutage_ClusterNodeUnresponsive: one node of three stops answering
// while the other two answer at once, so failures never run five in a row.
// The breaker must still open before the silent node's ring is full (the
// Unanswered bound), and close only once every node answers: every call
// returns within the timeout plus the margin.
func TestOutage_ClusterNodeUnresponsive(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	s := mustJammed(t, c.URL())
	for range 16 {
		mustClaim(t, s)
	}
	base := runtime.NumGoroutine()

	c.Nodes[2].Pause(t)
	t.Cleanup(func() { c.Nodes[2].Resume(t) })
	// A third of the keys are the paused node's: rueidis' default ring
	// was full after about 3000 calls, and calls to it then hung for 11 s.
	got := hammer(s, 100, 0, 4*time.Second)
	if got.slowest > jamTimeout+clusterMargin {
		t.Fatalf("slowest of %d calls took %v with a %v timeout; want at most %v", got.calls, got.slowest, jamTimeout, jamTimeout+clusterMargin)
	}
	if got.refused == 0 {
		t.Fatalf("none of %d calls refused with a node silent: the breaker never opened", got.calls)
	}
	if st := s.State(); st != breaker.StateOpen {
		t.Fatalf("state %q with a node still silent, want open", st)
	}

	c.Nodes[2].Resume(t)
	mustAnswerAgain(t, s, base)
}

// TestOutage_UnresponsiveIdleThenBurst: the calls of a busy worker time out
// against a paused server, then nothing calls for a while, then a burst
// comes: once before rueidis drops the silent connection, once after (the
// URL's write_timeout shortens the drop so the test can idle past it). A
// state that lapsed while the ring still held the timed-out commands let
// the burst into a full ring, where it hung (9.8 s, found in review): every
// call of each burst must return within the timeout plus the margin.
func TestOutage_UnresponsiveIdleThenBurst(t *testing.T) {
	srv := redistest.MustStart(t)
	s := mustJammed(t, srv.URL()+"?write_timeout=1s")
	mustClaim(t, s)
	base := runtime.NumGoroutine()

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	fill := hammer(s, 15, 0, 10*time.Second)
	// Each idle spell is the scenario, not a wait for a condition: one
	// past a few probes (200 ms cooldown), one past rueidis' drop of the
	// connection (write_timeout 1s + 3 keep-alive intervals).
	for _, idle := range []time.Duration{1500 * time.Millisecond, 5 * time.Second} {
		time.Sleep(idle)
		got := hammer(s, 2, 0, 10*time.Second)
		if got.slowest > jamTimeout+jamMargin {
			t.Fatalf("after %v idle (%d calls first): slowest of %d calls took %v with a %v timeout; want at most %v",
				idle, fill.calls, got.calls, got.slowest, jamTimeout, jamTimeout+jamMargin)
		}
	}

	srv.Resume(t)
	mustAnswerAgain(t, s, base)
}
