package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/ratelimit"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/ratelimittest"
)

// MustRateLimiter builds a limiter on srv and closes it when tb ends.
func MustRateLimiter(tb testing.TB, cfg redis.RateLimiterConfig) *redis.RateLimiter {
	tb.Helper()
	l, err := redis.NewRateLimiter(cfg)
	if err != nil {
		tb.Fatalf("redis.NewRateLimiter: %v", err)
	}
	tb.Cleanup(l.Close)
	return l
}

func TestRateLimiterContract(t *testing.T) {
	srv := redistest.MustStart(t)
	ratelimittest.Run(t, ratelimittest.Harness{
		New: func(t *testing.T) ports.RateLimiter {
			return MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: srv.URL()}})
		},
	})
}

func TestRateLimiter(t *testing.T) {
	srv := redistest.MustStart(t)
	c := srv.MustClient(t, 0)
	newLimiter := func(t *testing.T) *redis.RateLimiter {
		return MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: srv.URL(), Timeout: 5 * time.Second}})
	}
	slow := ports.Limit{Rate: 0.1, Burst: 3} // 10s apart
	const forever = time.Hour

	t.Run("TwoLimitersShareOnePace", func(t *testing.T) {
		a, b := newLimiter(t), newLimiter(t)
		ctx, s := testCtx(t), ratelimittest.Sender(t)
		start := time.Now()
		var got []ports.Reservation
		for i := range slow.Burst + 3 {
			l := a
			if i%2 == 1 {
				l = b
			}
			got = append(got, ratelimittest.MustTake(t, l, ctx, s, slow, forever))
		}
		slack := time.Since(start)
		for i, r := range got {
			want := time.Duration(max(i-slow.Burst+1, 0)) * slow.Interval()
			if !r.OK || !ratelimittest.Within(r.Wait, want, slack) {
				t.Errorf("take %d, alternating limiters = %+v, want OK in %v (less at most %v): one burst and one pace for both", i, r, want, slack)
			}
		}
	})

	t.Run("TwoLimitersRateOverAWindow", func(t *testing.T) {
		ratelimittest.RateOverAWindow(t, []ports.RateLimiter{newLimiter(t), newLimiter(t)})
	})

	t.Run("PauseHoldsEveryLimiter", func(t *testing.T) {
		a, b := newLimiter(t), newLimiter(t)
		ctx, s := testCtx(t), ratelimittest.Sender(t)
		start := time.Now()
		if err := a.Pause(ctx, s, slow, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		r := ratelimittest.MustTake(t, b, ctx, s, slow, forever)
		if slack := time.Since(start); !r.OK || !ratelimittest.Within(r.Wait, 20*time.Second, slack) {
			t.Errorf("take on the other limiter = %+v, want OK at the pause's end, 20s (less at most %v)", r, slack)
		}
	})

	t.Run("KeyHoldsTheServerClockAndExpiresWhenIdle", func(t *testing.T) {
		l := newLimiter(t)
		ctx, s := testCtx(t), ratelimittest.Sender(t)
		start := time.Now()
		for range slow.Burst {
			ratelimittest.MustTake(t, l, ctx, s, slow, forever)
		}
		// Three turns taken from idle: the pace is three Intervals on.
		want := time.Duration(slow.Burst) * slow.Interval()
		tat, err := c.Do(ctx, c.B().Get().Key(l.Key(s)).Build()).AsInt64()
		if err != nil {
			t.Fatalf("GET %s: %v", l.Key(s), err)
		}
		now, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
		if err != nil {
			t.Fatal(err)
		}
		ttl := MustPTTL(t, c, l.Key(s))
		slack := time.Since(start)
		serverNow := now[0]*1e6 + now[1]
		if ahead := time.Duration(tat-serverNow) * time.Microsecond; !ratelimittest.Within(ahead, want, slack) {
			t.Errorf("the key's pace is %v ahead of the server's TIME, want %v (less at most %v)", ahead, want, slack)
		}
		// It lives until the pace: then the sender is idle and no key
		// means exactly that. PTTL is in whole milliseconds, rounded up.
		if ttl > want+time.Millisecond || ttl < want-slack-time.Millisecond {
			t.Errorf("PTTL = %v, want %v (less at most %v)", ttl, want, slack)
		}
	})

	t.Run("AnIdleSenderLeavesNoKey", func(t *testing.T) {
		l := newLimiter(t)
		ctx, s := testCtx(t), ratelimittest.Sender(t)
		fast := ports.Limit{Rate: 1000, Burst: 1} // one millisecond
		ratelimittest.MustTake(t, l, ctx, s, fast, forever)
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, ok := MustGet(t, c, l.Key(s)); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("key %s still there 10s after its pace passed", l.Key(s))
			}
			time.Sleep(10 * time.Millisecond)
		}
		// And without it the sender has its whole burst.
		if r := ratelimittest.MustTake(t, l, ctx, s, fast, 0); !r.OK || r.Wait != 0 {
			t.Errorf("take after the key expired = %+v, want OK now", r)
		}
	})

	t.Run("KeyPrefix", func(t *testing.T) {
		l := MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: srv.URL()}, KeyPrefix: "tenant-b:rate:"})
		ctx, s := testCtx(t), ratelimittest.Sender(t)
		ratelimittest.MustTake(t, l, ctx, s, slow, forever)
		if _, ok := MustGet(t, c, "tenant-b:rate:"+s); !ok {
			t.Errorf("no key tenant-b:rate:%s", s)
		}
		if _, ok := MustGet(t, c, redis.DefaultRateKeyPrefix+s); ok {
			t.Errorf("key %s written under the default prefix too", redis.DefaultRateKeyPrefix+s)
		}
	})

	t.Run("ErrNewRateLimiter", func(t *testing.T) {
		for name, cfg := range map[string]redis.RateLimiterConfig{
			"EmptyURL":        {},
			"NegativeTimeout": {Conn: redis.Config{URL: srv.URL(), Timeout: -time.Second}},
			"BadURL":          {Conn: redis.Config{URL: "http://user:hunter2@127.0.0.1"}},
		} {
			t.Run(name, func(t *testing.T) {
				l, err := redis.NewRateLimiter(cfg)
				if err == nil {
					l.Close()
					t.Fatal("NewRateLimiter = nil error")
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error %q carries the password", err)
				}
			})
		}
	})
}

// TestRateLimiterOutage takes turns while Redis is down: each call fails
// within the timeout, and a Fallback over the limiter paces by the
// replica's share meanwhile and returns to the fleet's pace when Redis is
// back.
func TestRateLimiterOutage(t *testing.T) {
	srv := redistest.MustStart(t)
	l := MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: srv.URL(), Timeout: timeout}})
	limit := ports.Limit{Rate: 0.3, Burst: 3} // 3.33s apart; a replica's share of 3 is 10s apart, burst 1
	s := ratelimittest.Sender(t)

	var mu sync.Mutex
	var fellBack []string
	recovered := 0
	fb, err := ratelimit.NewFallback(ratelimit.FallbackConfig{
		Fleet: l, Replicas: 3, CoolOff: time.Millisecond,
		OnFallback: func(op, sender string, err error) {
			mu.Lock()
			defer mu.Unlock()
			fellBack = append(fellBack, op+" "+sender)
		},
		OnRecover: func() { mu.Lock(); defer mu.Unlock(); recovered++ },
	})
	if err != nil {
		t.Fatal(err)
	}

	srv.Kill(t)
	start := time.Now()
	if _, err := l.Take(context.Background(), s, limit, time.Hour); err == nil {
		t.Fatal("Take with Redis down = nil error")
	} else if took := time.Since(start); took > timeout+margin {
		t.Errorf("Take with Redis down took %v, want about %v", took, timeout)
	}

	start = time.Now()
	var got []ports.Reservation
	for range 2 {
		r, err := fb.Take(context.Background(), s, limit, time.Hour)
		if err != nil {
			t.Fatalf("Fallback.Take with Redis down = %v, want the local share's answer", err)
		}
		got = append(got, r)
	}
	slack := time.Since(start)
	if !got[0].OK || got[0].Wait != 0 || !got[1].OK || !ratelimittest.Within(got[1].Wait, limit.Share(3).Interval(), slack) {
		t.Errorf("takes with Redis down = %+v, want OK now, then OK in %v (the share's pace, less at most %v)", got, limit.Share(3).Interval(), slack)
	}
	mu.Lock()
	if len(fellBack) == 0 || fellBack[0] != "take "+s {
		t.Errorf("OnFallback told %q, want the failed take", fellBack)
	}
	mu.Unlock()

	srv.Restart(t)
	// Back on the fleet's pace after the cool-off: the take that finds
	// Redis again gets a fresh key's whole burst.
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := fb.Take(context.Background(), s, limit, 0)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		back := recovered
		mu.Unlock()
		if back > 0 {
			if !r.OK || r.Wait != 0 {
				t.Errorf("first take on the fleet again = %+v, want OK now", r)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fallback did not return to Redis within 10s of its restart")
		}
		time.Sleep(2 * time.Millisecond) // past the cool-off
	}
	c := srv.MustClient(t, 0)
	if _, ok := MustGet(t, c, l.Key(s)); !ok {
		t.Errorf("no key %s after the fleet answered again", l.Key(s))
	}
}

// TestRateLimiterPaused takes a turn while Redis takes the connection and
// answers nothing (paused), under a caller's deadline of the store's
// timeout, as the worker asks: the Fallback's answer is the replica's
// share, within that deadline, and the silence is told as a failure of
// the fleet, not taken for the caller's own deadline.
func TestRateLimiterPaused(t *testing.T) {
	srv := redistest.MustStart(t)
	l := MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: srv.URL(), Timeout: timeout}})
	limit := ports.Limit{Rate: 0.3, Burst: 3}
	s := ratelimittest.Sender(t)
	var mu sync.Mutex
	var fellBack []string
	fb, err := ratelimit.NewFallback(ratelimit.FallbackConfig{
		Fleet: l, Replicas: 3,
		OnFallback: func(op, sender string, err error) {
			mu.Lock()
			defer mu.Unlock()
			fellBack = append(fellBack, op+" "+sender)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ratelimittest.MustTake(t, l, context.Background(), s, limit, 0) // connected

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r, err := fb.Take(ctx, s, limit, time.Hour)
	if err != nil || !r.OK {
		t.Fatalf("Fallback.Take with Redis paused = %+v, %v; want the local share's turn within the caller's deadline", r, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(fellBack) != 1 || fellBack[0] != "take "+s {
		t.Errorf("OnFallback told %q, want the silent take", fellBack)
	}
}

// TestRateLimiterCluster: on a 3-node Redis Cluster given one node's URL,
// the limiter passes the contract and its senders' keys land on every
// node: each call goes to the node owning its one key.
func TestRateLimiterCluster(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	newLimiter := func(t *testing.T) ports.RateLimiter {
		return MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: c.URL(), Timeout: 5 * time.Second}})
	}
	t.Run("Contract", func(t *testing.T) {
		ratelimittest.Run(t, ratelimittest.Harness{New: newLimiter})
	})
	t.Run("KeysSpreadOverNodes", func(t *testing.T) {
		l := MustRateLimiter(t, redis.RateLimiterConfig{Conn: redis.Config{URL: c.URL()}, KeyPrefix: "spread:"})
		ctx := testCtx(t)
		for i := range 30 {
			ratelimittest.MustTake(t, l, ctx, fmt.Sprintf("+1555000%04d", i), ports.Limit{Rate: 0.1, Burst: 1}, time.Hour)
		}
		for i, s := range c.Nodes {
			nc := s.MustClient(t, 0)
			keys, err := nc.Do(ctx, nc.B().Keys().Pattern("spread:*").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 0 {
				t.Errorf("node %d holds none of the 30 senders' keys", i)
			}
		}
	})
}
