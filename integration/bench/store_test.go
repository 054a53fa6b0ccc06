package bench

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/ports"
)

// storeRounds: these runs are CPU-bound, so the machine's other work moves
// them most; three interleaved rounds, best kept.
const storeRounds = 3

// BenchmarkStore compares the idempotency stores with a notifier that
// answers at once, so the store's cost is all that differs: no store (the
// floor), the memory store, and the Redis store on a real redis-server, as
// deployed and reading one format only (IDEMPOTENCY_READ_BOTH_FORMATS=false).
// Each store is also timed from one caller at a time, its round trip
// without load.
func BenchmarkStore(b *testing.B) {
	needRedis(b)
	const events, keys = 20000, 5000
	br := mustBroker(b, events, keys)
	srv := mustRedis(b)
	redisCPU := serverCPU(b, srv.MustClient(b, 0))
	through := func(open func(b *testing.B) ports.IdempotencyStore) func(b *testing.B) measurement {
		return func(b *testing.B) measurement {
			// redis-server's CPU is read for every store: for the others it
			// is the idle server's, which shows it costs nothing then.
			return run{maxInFlight: 64, store: open(b), want: events, within: time.Minute, serverCPU: redisCPU}.measure(b, br)
		}
	}
	for range b.N {
		bestOf(b, storeRounds, []variant{
			{runNoStore, through(func(*testing.B) ports.IdempotencyStore { return passThrough{} })},
			{runMemoryStore, through(func(*testing.B) ports.IdempotencyStore { return memory.New(nil) })},
			{runRedisStore, through(func(b *testing.B) ports.IdempotencyStore { return mustRedisStore(b, srv) })},
			{runRedisOneFormat, through(func(b *testing.B) ports.IdempotencyStore { return mustRedisStoreReading(b, srv, false) })},
		})
		results.put(runMemoryStore+serial, serialStoreTimes(b, memory.New(nil), 2000))
		results.put(runRedisStore+serial, serialStoreTimes(b, mustRedisStore(b, srv), 2000))
		results.put(runRedisOneFormat+serial, serialStoreTimes(b, mustRedisStoreReading(b, srv, false), 2000))
	}
}

// serial suffixes the name of a one-caller-at-a-time measurement.
const serial = "/serial"

var prefixSeq atomic.Int64

// mustRedisStore opens the Redis store as the worker does on its defaults
// (compact keys, reading both formats, timeout 200ms), under key prefixes
// of its own so no run finds another's records.
func mustRedisStore(b *testing.B, srv interface{ URL() string }) *redis.Store {
	return mustRedisStoreWith(b, srv, func(*redis.Config) {})
}

// mustRedisStoreReading is mustRedisStore with IDEMPOTENCY_READ_BOTH_FORMATS
// set to readBoth.
func mustRedisStoreReading(b *testing.B, srv interface{ URL() string }, readBoth bool) *redis.Store {
	return mustRedisStoreWith(b, srv, func(c *redis.Config) { c.ReadBoth = readBoth })
}

// mustRedisStoreWith is mustRedisStore with its configuration changed by
// set: keys under a prefix of its own, both formats read, the default
// timeout, then what set changes. The store is closed when b ends.
func mustRedisStoreWith(b *testing.B, srv interface{ URL() string }, set func(*redis.Config)) *redis.Store {
	b.Helper()
	n := prefixSeq.Add(1)
	cfg := redis.Config{
		URL:           srv.URL(),
		CompactPrefix: fmt.Sprintf("b%d", n),
		KeyPrefix:     fmt.Sprintf("%sbench%d:", redis.DefaultKeyPrefix, n),
		ReadBoth:      true,
		Timeout:       redis.DefaultTimeout,
	}
	set(&cfg)
	s, err := redis.New(cfg)
	if err != nil {
		b.Fatalf("redis.New: %v", err)
	}
	b.Cleanup(s.Close)
	return s
}
