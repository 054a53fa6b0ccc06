package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// The breaker as the worker wires it with IDEMPOTENCY_BREAKER_FAILURES=5,
// IDEMPOTENCY_BREAKER_COOLDOWN=1s and MAX_IN_FLIGHT=64.
const (
	outageBreakerFailures = 5
	outageBreakerCooldown = time.Second
	outageMaxInFlight     = 64
)

// outageRounds: two interleaved rounds, best kept.
const outageRounds = 2

// BenchmarkRedisOutage measures throughput, failing open, while Redis is
// down from before the first record: killed (connections refused at once)
// and unresponsive (SIGSTOP: calls wait out IDEMPOTENCY_TIMEOUT until the
// breaker opens), with the breaker around the Redis store as the worker
// wires them (the breaker is not optional). Each is compared with Redis up
// under the same wiring. A run stops after every record or 8 s from its
// first record, whichever comes first.
func BenchmarkRedisOutage(b *testing.B) {
	needRedis(b)
	const events, keys = 20000, 5000
	br := mustBroker(b, events, keys)
	outages := []struct {
		name string
		down func(b *testing.B, srv *redistest.Server)
	}{
		{"up", func(*testing.B, *redistest.Server) {}},
		{"killed", func(b *testing.B, srv *redistest.Server) { srv.Kill(b) }},
		{"unresponsive", func(b *testing.B, srv *redistest.Server) {
			srv.Pause(b)
			b.Cleanup(func() { srv.Resume(b) })
		}},
	}
	var variants []variant
	for _, o := range outages {
		variants = append(variants, variant{outageRun(o.name), func(b *testing.B) measurement {
			// A server of its own: the outage ends with the run.
			srv := mustRedis(b)
			store := mustGuardedRedisStore(b, srv.URL())
			o.down(b, srv)
			return run{maxInFlight: outageMaxInFlight, store: store, want: events, within: 8 * time.Second}.measure(b, br)
		}})
	}
	for range b.N {
		bestOf(b, outageRounds, variants)
	}
}

// mustGuardedRedisStore is the Redis store behind the breaker, sized and
// wired as the worker's openStore does it.
func mustGuardedRedisStore(b *testing.B, url string) *breaker.Breaker {
	b.Helper()
	rcfg := redis.Config{
		URL:       url,
		KeyPrefix: fmt.Sprintf("%sbench%d:", redis.DefaultKeyPrefix, prefixSeq.Add(1)),
		Timeout:   redis.DefaultTimeout,
	}
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		b.Fatal(err)
	}
	bcfg, maxUnanswered := breaker.ForCallers(breaker.Config{Failures: outageBreakerFailures, Cooldown: outageBreakerCooldown}, outageMaxInFlight, unansweredFor)
	rcfg.MaxUnanswered = maxUnanswered
	rs, err := redis.New(rcfg)
	if err != nil {
		b.Fatalf("redis.New: %v", err)
	}
	b.Cleanup(rs.Close)
	bcfg.Probe = rs.Ping
	bk := breaker.New(rs, bcfg)
	b.Cleanup(bk.Close)
	return bk
}
