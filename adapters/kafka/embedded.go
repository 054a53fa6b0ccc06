package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is an in-process Kafka broker speaking the real protocol
// (franz-go's kfake), for `make run`, a worker started without brokers, and
// tests. It keeps everything in memory and listens on 127.0.0.1 only.
type Embedded struct {
	cluster *kfake.Cluster
}

// StartEmbedded starts a one-broker cluster on a random 127.0.0.1 port with
// topics created with the given number of partitions. Topics it does not
// know (the dead letter topic, say) are created on first use with the same
// partition count. Groups accept session timeouts down to 100ms, so tests
// can rebalance quickly.
func StartEmbedded(partitions int32, topics ...string) (*Embedded, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("kafka: embedded broker needs at least 1 partition, got %d", partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(partitions)),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: start embedded broker: %w", err)
	}
	return &Embedded{cluster: c}, nil
}

// Brokers returns the broker addresses, for Config.Brokers.
func (e *Embedded) Brokers() []string { return e.cluster.ListenAddrs() }

// Close stops the broker; its data is gone.
func (e *Embedded) Close() { e.cluster.Close() }
