// Package devbroker is an in-process Kafka broker that speaks the real
// protocol (franz-go's kfake), its group coordinator made to keep waiting
// members as Apache Kafka does. The development run links it (`make run`,
// a binary built with -tags devbroker), and so do the tests and the
// integration suite's kfake; the production binary does not.
package devbroker

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is a one-broker kfake cluster listening on 127.0.0.1 only. It
// keeps everything in memory unless kfake.DataDir says otherwise.
type Broker struct {
	cluster *kfake.Cluster
	keeper  *waitKeeper
}

// Start starts a broker on a random port with topics created with the
// given number of partitions. Topics it does not know (a dead letter
// topic, say) are created on first use with the same partition count.
// Groups accept session timeouts down to 100ms, so tests can rebalance
// quickly, and a member waiting in JoinGroup or SyncGroup stays in its
// group as on Apache Kafka (keepWaitingMembers). opts are applied after
// these (kfake.Ports, kfake.DataDir, kfake.EnableSASL). It fails for
// fewer than 1 partition.
func Start(partitions int32, topics []string, opts ...kfake.Opt) (*Broker, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("devbroker: needs at least 1 partition, got %d", partitions)
	}
	defaults := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(partitions)),
	}
	if len(topics) > 0 {
		defaults = append(defaults, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(append(defaults, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("devbroker: start: %w", err)
	}
	k, err := keepWaitingMembers(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("devbroker: start: %w", err)
	}
	return &Broker{cluster: c, keeper: k}, nil
}

// Brokers returns the broker's addresses, for a client's seed brokers.
func (b *Broker) Brokers() []string { return b.cluster.ListenAddrs() }

// Cluster returns the kfake cluster, for tests that observe or answer its
// requests (ControlKey).
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// TraceGroups calls trace with a line for each JoinGroup, SyncGroup,
// Heartbeat and LeaveGroup the broker receives from now on, as it arrives
// (kfake logs nothing of its classic groups): what a test reports when a
// group stalls. trace must be safe for concurrent use.
func (b *Broker) TraceGroups(trace func(line string)) { b.keeper.trace.Store(&trace) }

// Close stops the broker; what it held in memory is gone.
func (b *Broker) Close() {
	b.keeper.close()
	b.cluster.Close()
}

// Starter returns Start for partitions, in plain types: it returns the
// addresses of the broker it started and what closes it. A binary that
// may be built without this package holds it in a variable of that type,
// nil without it.
func Starter(partitions int32) func(topics ...string) (brokers []string, stop func(), err error) {
	return func(topics ...string) ([]string, func(), error) {
		b, err := Start(partitions, topics)
		if err != nil {
			return nil, nil, err
		}
		return b.Brokers(), b.Close, nil
	}
}
