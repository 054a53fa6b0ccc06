package bench

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// Names of the replica acknowledgement measurements, by
// IDEMPOTENCY_MIN_REPLICAS.
const (
	runReplicas0 = "replicas/min=0"
	runReplicas1 = "replicas/min=1"
)

// BenchmarkReplicaAck measures what IDEMPOTENCY_MIN_REPLICAS costs: the
// worker with the Redis store (as deployed, on its 200 ms timeout) against
// a primary with one replica on the same machine, with the acknowledgement
// off (0) and on (1), interleaved, and the same two store calls from one
// caller at a time.
func BenchmarkReplicaAck(b *testing.B) {
	needRedis(b)
	const events, keys = 20000, 5000
	br := mustBroker(b, events, keys)
	primary := redistest.MustStart(b)
	redistest.MustStartReplica(b, primary)
	open := func(min int) func(b *testing.B) ports.IdempotencyStore {
		return func(b *testing.B) ports.IdempotencyStore {
			return mustRedisStoreWith(b, primary, func(c *redis.Config) { c.MinReplicas = min })
		}
	}
	through := func(min int) func(b *testing.B) measurement {
		return func(b *testing.B) measurement {
			return run{maxInFlight: 64, store: open(min)(b), want: events, within: time.Minute}.measure(b, br)
		}
	}
	for range b.N {
		bestOf(b, storeRounds, []variant{
			{runReplicas0, through(0)},
			{runReplicas1, through(1)},
		})
		results.put(runReplicas0+serial, serialStoreTimes(b, open(0)(b), 2000))
		results.put(runReplicas1+serial, serialStoreTimes(b, open(1)(b), 2000))
	}
}

func (r *registry) printReplicas(w io.Writer) {
	off, okOff := r.get(runReplicas0)
	on, okOn := r.get(runReplicas1)
	if !okOff && !okOn {
		return
	}
	fmt.Fprintf(w, "\n### Replica acknowledgement (IDEMPOTENCY_MIN_REPLICAS; zero-latency notifier, MaxInFlight 64, %d partitions)\n\n", partitions)
	fmt.Fprintln(w, "The Redis store as deployed (compact keys, reading both formats, 200 ms timeout) against a primary with one replica,")
	fmt.Fprintln(w, "both on this machine: 0 takes the primary's word, 1 waits for the replica (WAIT) after every claim and record, each")
	fmt.Fprintln(w, "on a pooled connection of its own. Store time is Claim and Record together, per record; the last columns time them")
	fmt.Fprintln(w, "from one caller at a time (2000 fresh keys). A replica across a network adds its round trip to every acknowledged call.")
	fmt.Fprintln(w)
	header(w, "IDEMPOTENCY_MIN_REPLICAS", "records", "records/s", "rounds (records/s)", "ratio vs 0", "worker CPU/record", "store time p50", "store time p99", "one caller: p50", "one caller: p99")
	for _, c := range []struct {
		label, name string
		m           measurement
		ok          bool
	}{{"0", runReplicas0, off, okOff}, {"1", runReplicas1, on, okOn}} {
		if !c.ok {
			continue
		}
		s50, s99 := "", ""
		if one, ok := r.get(c.name + serial); ok {
			s50, s99 = ms(one.percentile(50)), ms(one.percentile(99))
		}
		row(w, c.label, fmt.Sprint(c.m.records), rate(c.m), roundRates(c.m), ratio(c.m, off, okOff), us(c.m.cpuPerRecord()), ms(c.m.percentile(50)), ms(c.m.percentile(99)), s50, s99)
	}
}
