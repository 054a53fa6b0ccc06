package bench

import (
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// The breaker as the worker wires it with IDEMPOTENCY_BREAKER_FAILURES=5
// and IDEMPOTENCY_BREAKER_COOLDOWN=1s.
const (
	outageBreakerFailures = 5
	outageBreakerCooldown = time.Second
)

// outageRounds: two interleaved rounds, best kept; a round without the
// breaker during an outage takes its full 8 s bound.
const outageRounds = 2

// BenchmarkRedisOutage measures throughput, failing open, while Redis is
// down from before the first record: killed (connections refused at once)
// and unresponsive (SIGSTOP: every call waits out IDEMPOTENCY_TIMEOUT),
// each with the breaker around the Redis store and without it. Each is
// compared with Redis up under the same wiring. A run stops after every
// record or 8 s from its first record, whichever comes first.
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
		for _, withBreaker := range []bool{true, false} {
			variants = append(variants, variant{outageRun(o.name, withBreaker), func(b *testing.B) measurement {
				// A server of its own: the outage ends with the run.
				srv := mustRedis(b)
				rs := mustRedisStore(b, srv)
				var store ports.IdempotencyStore = rs
				if withBreaker {
					bk := breaker.New(rs, breaker.Config{Failures: outageBreakerFailures, Cooldown: outageBreakerCooldown, Probe: rs.Ping})
					defer bk.Close()
					store = bk
				}
				o.down(b, srv)
				return run{maxInFlight: 64, store: store, want: events, within: 8 * time.Second}.measure(b, br)
			}})
		}
	}
	for range b.N {
		bestOf(b, outageRounds, variants)
	}
}
