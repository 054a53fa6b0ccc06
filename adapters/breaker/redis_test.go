package breaker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// TestWithRedis runs the breaker around the real Redis store while a real
// redis-server goes down and comes back.
func TestWithRedis(t *testing.T) {
	const storeTimeout = 200 * time.Millisecond

	outages := map[string]struct {
		down func(t *testing.T, srv *redistest.Server)
		up   func(t *testing.T, srv *redistest.Server)
	}{
		"Killed": {
			down: func(t *testing.T, srv *redistest.Server) { srv.Kill(t) },
			up:   func(t *testing.T, srv *redistest.Server) { srv.Restart(t) },
		},
		"Unresponsive": {
			down: func(t *testing.T, srv *redistest.Server) {
				srv.Pause(t)
				t.Cleanup(func() { srv.Resume(t) })
			},
			up: func(t *testing.T, srv *redistest.Server) { srv.Resume(t) },
		},
	}
	for name, outage := range outages {
		for _, probeName := range []string{"PingProbe", "DefaultProbe"} {
			t.Run(name+"/"+probeName, func(t *testing.T) {
				srv := redistest.MustStart(t)
				raw := srv.MustClient(t, 0)
				rcfg := redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "e2e:", Timeout: storeTimeout}
				store, err := redis.New(rcfg)
				if err != nil {
					t.Fatalf("redis.New: %v", err)
				}
				t.Cleanup(store.Close)
				cfg := breaker.Config{Failures: 3, Cooldown: 50 * time.Millisecond}
				if probeName == "PingProbe" {
					cfg.Probe = store.Ping
				}
				b := MustBreaker(t, store, cfg)
				ctx := context.Background()
				if _, err := b.Claim(ctx, "before", "tok", "", "", time.Minute); err != nil {
					t.Fatalf("Claim before the outage: %v", err)
				}

				outage.down(t, srv)
				for i := range 3 {
					_, err := b.Claim(ctx, "during", "tok", "", "", time.Minute)
					if err == nil || errors.Is(err, breaker.ErrOpen) {
						t.Fatalf("Claim %d during the outage: err %v, want the store's error", i, err)
					}
				}
				if got := b.State(); got != breaker.StateOpen {
					t.Fatalf("state %q after 3 failed claims, want open", got)
				}
				// Open: an answer at once, not after the store's timeout.
				start := time.Now()
				err = b.Record(ctx, "during", ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
				// Half the store timeout: far above scheduling noise on a busy
				// machine, far below what asking the dead store would cost.
				if took := time.Since(start); took > storeTimeout/2 {
					t.Fatalf("Record while open took %v, want well under the store timeout %v", took, storeTimeout)
				}
				if !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("Record while open: err %v, want ErrOpen", err)
				}

				outage.up(t, srv)
				waitState(t, b, breaker.StateClosed, 5*time.Second)
				got, err := b.Claim(ctx, "after", "tok-after", "", "", time.Minute)
				if err != nil || got.State != ports.Claimed {
					t.Fatalf("Claim after recovery: %+v, %v; want claimed", got, err)
				}
				if v, _ := MustGet(t, raw, "e2e:after"); !strings.HasPrefix(v, "pending:tok-after.") {
					t.Fatalf("e2e:after holds %q, want tok-after's claim", v)
				}
				// The probes wrote nothing: the only keys are the test's own
				// and the store's marker keys. ("before" and the markers
				// survive a pause, not a kill; "during" appears after a
				// pause, because the claims that timed out were still
				// delivered and run when the server woke up.)
				keys, err := raw.Do(ctx, raw.B().Keys().Pattern("*").Build()).AsStrSlice()
				if err != nil {
					t.Fatalf("KEYS: %v", err)
				}
				for _, k := range keys {
					if k != "e2e:after" && k != "e2e:before" && k != "e2e:during" && !slices.Contains(rcfg.MarkerKeys(), k) {
						t.Fatalf("unexpected key %q in Redis (keys %q)", k, keys)
					}
				}
			})
		}
	}
}

// MustGet reads a raw key; "" with ok false when it is absent.
func MustGet(tb testing.TB, c rueidis.Client, key string) (string, bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	if err != nil {
		tb.Fatalf("GET %s: %v", key, err)
	}
	return v, true
}
