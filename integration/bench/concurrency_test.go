package bench

import (
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
)

// concurrencyLatency is the notifier double's latency: a provider call of
// tens of milliseconds is what makes one-at-a-time handling too slow.
const concurrencyLatency = 50 * time.Millisecond

// concurrencyRounds: the baseline is bound by the notifier's latency, not
// by the CPU, so two rounds suffice.
const concurrencyRounds = 2

// BenchmarkKeyOrderedConcurrency compares MaxInFlight 64 with MaxInFlight 1
// on the same topic (the same events, in the same 8 partitions, 512
// distinct shipments). One at a time is measured over its first 60 records
// (about 3 s at 50 ms each); the concurrent consumer over all 2048.
func BenchmarkKeyOrderedConcurrency(b *testing.B) {
	const events, keys = 2048, 512
	br := mustBroker(b, events, keys)
	consumer := func(maxInFlight, want int) func(b *testing.B) measurement {
		return func(b *testing.B) measurement {
			return run{
				maxInFlight: maxInFlight,
				store:       memory.New(nil),
				latency:     concurrencyLatency,
				want:        want,
				within:      time.Minute,
			}.measure(b, br)
		}
	}
	for range b.N {
		bestOf(b, concurrencyRounds, []variant{
			{runSequential, consumer(1, 60)},
			{runConcurrent, consumer(64, events)},
		})
	}
}
