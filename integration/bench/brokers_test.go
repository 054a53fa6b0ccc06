package bench

import (
	"context"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/integration"
)

// brokerRounds: both consumers are CPU-bound on a shared machine, so the
// fastest of three interleaved rounds is kept.
const brokerRounds = 3

// BenchmarkConsumerBrokers runs the same consumer (MaxInFlight 64, memory
// store, zero-latency notifier: the consumer path itself is the cost) on
// the embedded kfake broker and on Apache Kafka 4.4.0 (one KRaft node in
// the local notification-worker/kafka image), each with the same 4096
// events in 8 partitions. The Apache Kafka rows are left out, with the
// reason, when its image is missing or the harness fell back to kfake.
func BenchmarkConsumerBrokers(b *testing.B) {
	const events, keys = 4096, 512
	kfakeBroker := mustBroker(b, events, keys)
	variants := []variant{{runBrokerKfake, consumerOn(kfakeBroker, events)}}

	if !integration.DockerAvailable() {
		b.Logf("Apache Kafka rows skipped: no Docker engine (run scripts/docker-up.sh)")
	} else if k := integration.StartKafka(b); !k.Apache {
		b.Logf("Apache Kafka rows skipped: the harness ran %s (run scripts/build-images.sh kafka)", k.Impl)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		const topic = "shipment-events"
		if err := k.CreateTopic(ctx, topic, partitions); err != nil {
			b.Fatal(err)
		}
		apacheBroker := mustPublish(b, k.Brokers, topic, events, keys)
		variants = append(variants, variant{runBrokerApache, consumerOn(apacheBroker, events)})
	}
	for range b.N {
		bestOf(b, brokerRounds, variants)
	}
}

func consumerOn(br *broker, want int) func(b *testing.B) measurement {
	return func(b *testing.B) measurement {
		return run{
			maxInFlight: 64,
			store:       memory.New(nil),
			want:        want,
			within:      time.Minute,
		}.measure(b, br)
	}
}
