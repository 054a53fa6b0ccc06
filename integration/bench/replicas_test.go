package bench

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// Names of the replica acknowledgement measurements, by
// IDEMPOTENCY_MIN_REPLICAS.
const (
	runReplicas0     = "replicas/min=0"
	runReplicasUnset = "replicas/min=unset"
)

// replicaWaits counts, over every round of the acknowledged runs, the
// WAITs the primary ran and the writes they acknowledged (a claim and a
// record per event).
var replicaWaits struct {
	sync.Mutex
	waits, writes int64
}

// BenchmarkReplicaAck measures what acknowledging every write costs: the
// worker with the Redis store (as deployed, on its 200 ms timeout) against
// a primary with one replica on the same machine, with
// IDEMPOTENCY_MIN_REPLICAS set to 0 and unset (the default, which beside a
// replica is 1), interleaved, and the same two store calls from one caller
// at a time.
func BenchmarkReplicaAck(b *testing.B) {
	needRedis(b)
	const events, keys = 20000, 5000
	br := mustBroker(b, events, keys)
	primary := redistest.MustStart(b)
	redistest.MustStartReplica(b, primary)
	admin := primary.MustClient(b, 0)
	open := func(min int) func(b *testing.B) ports.IdempotencyStore {
		return func(b *testing.B) ports.IdempotencyStore {
			return mustRedisStoreWith(b, primary, func(c *redis.Config) {
				c.MinReplicas = min
				// 0 beside a replica is warned of at every start.
				c.Health.Logger = slog.New(slog.DiscardHandler)
			})
		}
	}
	through := func(min int) func(b *testing.B) measurement {
		return func(b *testing.B) measurement {
			store := open(min)(b)
			before := redistest.CommandCalls(b, admin, "wait")
			m := run{maxInFlight: 64, store: store, want: events, within: time.Minute}.measure(b, br)
			if min != 0 {
				replicaWaits.Lock()
				replicaWaits.waits += int64(redistest.CommandCalls(b, admin, "wait") - before)
				replicaWaits.writes += 2 * events
				replicaWaits.Unlock()
			}
			return m
		}
	}
	for range b.N {
		bestOf(b, storeRounds, []variant{
			{runReplicas0, through(0)},
			{runReplicasUnset, through(redis.AutoMinReplicas)},
		})
		results.put(runReplicas0+serial, serialStoreTimes(b, open(0)(b), 2000))
		results.put(runReplicasUnset+serial, serialStoreTimes(b, open(redis.AutoMinReplicas)(b), 2000))
	}
}

func (r *registry) printReplicas(w io.Writer) {
	off, okOff := r.get(runReplicas0)
	on, okOn := r.get(runReplicasUnset)
	if !okOff && !okOn {
		return
	}
	fmt.Fprintf(w, "\n### Replica acknowledgement (IDEMPOTENCY_MIN_REPLICAS; zero-latency notifier, MaxInFlight 64, %d partitions; %d interleaved rounds)\n\n", partitions, storeRounds)
	fmt.Fprintln(w, "The Redis store as deployed (compact keys, reading both formats, 200 ms timeout) against a primary with one replica,")
	fmt.Fprintln(w, "both on this machine: 0 takes the primary's word; unset, the default, finds the replica at start and waits for it")
	fmt.Fprintln(w, "after every claim and record. The calls that come while a batch is out go out together in the next one: their")
	fmt.Fprintln(w, "writes, then one WAIT, on one connection. Store time is Claim and Record together, per record; the last columns time")
	fmt.Fprintln(w, "them from one caller at a time (2000 fresh keys). A replica across a network adds its round trip to every batch.")
	fmt.Fprintln(w)
	header(w, "IDEMPOTENCY_MIN_REPLICAS", "records", "records/s", "rounds (records/s)", "ratio vs 0", "worker CPU/record", "store time p50", "store time p99", "p99 vs 0", "writes per WAIT", "one caller: p50", "one caller: p99", "target")
	for _, c := range []struct {
		label, name string
		m           measurement
		ok          bool
	}{{"0", runReplicas0, off, okOff}, {"unset (1: a replica is connected)", runReplicasUnset, on, okOn}} {
		if !c.ok {
			continue
		}
		s50, s99 := "", ""
		if one, ok := r.get(c.name + serial); ok {
			s50, s99 = ms(one.percentile(50)), ms(one.percentile(99))
		}
		p99, perWait, target := "1.00x (baseline)", "", ""
		if c.name == runReplicasUnset {
			p99, target = "n/a (baseline not run)", "n/a"
			if okOff && off.percentile(99) > 0 {
				vs := float64(c.m.percentile(99)) / float64(off.percentile(99))
				p99 = fmt.Sprintf("%.2fx", vs)
				met := "met"
				if c.m.perSecond() < 0.8*off.perSecond() || vs > 2 {
					met = "MISSED"
				}
				target = ">= 0.8x and p99 <= 2x: " + met
			}
			replicaWaits.Lock()
			if replicaWaits.waits > 0 {
				perWait = fmt.Sprintf("%.1f", float64(replicaWaits.writes)/float64(replicaWaits.waits))
			}
			replicaWaits.Unlock()
		}
		row(w, c.label, fmt.Sprint(c.m.records), rate(c.m), roundRates(c.m), ratio(c.m, off, okOff), us(c.m.cpuPerRecord()), ms(c.m.percentile(50)), ms(c.m.percentile(99)), p99, perWait, s50, s99, target)
	}
}
