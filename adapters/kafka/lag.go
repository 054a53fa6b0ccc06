package kafka

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// lagReader reads the lag of the partitions this member holds from the
// broker: the partition's high-water mark minus the group's committed
// offset (or, with nothing committed yet, minus the log start: a new group
// starts at the oldest record). It reads on a ticker and when poked after a
// commit, so a partition whose records do not finish (a handler held on
// an unavailable provider) still shows its lag growing as records arrive.
// Its methods are safe for concurrent use.
type lagReader struct {
	topic, group string
	interval     time.Duration
	metrics      Metrics
	client       sarama.Client
	admin        sarama.ClusterAdmin

	poked chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup

	mu   sync.Mutex
	held map[int32]int64 // partition -> last lag reported; guarded by mu
}

// newLagReader connects its own client (the group's connection to the
// coordinator waits behind fetches; lag must not). It reads nothing until
// start.
func newLagReader(cfg Config) (*lagReader, error) {
	client, err := sarama.NewClient(cfg.Brokers, cfg.saramaConfig())
	if err != nil {
		return nil, fmt.Errorf("kafka: lag client: %w", err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka: lag admin: %w", err)
	}
	return &lagReader{
		topic: cfg.Topic, group: cfg.GroupID, interval: cfg.LagInterval, metrics: cfg.Metrics,
		client: client, admin: admin,
		poked: make(chan struct{}, 1), done: make(chan struct{}),
		held: make(map[int32]int64),
	}, nil
}

// start reads on the ticker until close.
func (l *lagReader) start() {
	l.wg.Go(func() {
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-t.C:
			case <-l.poked:
			}
			l.refresh()
		}
	})
}

// close stops the reader and closes its connections; call once. Closing
// the connections first ends a read in progress, so a broker that does
// not answer does not hold up the shutdown.
func (l *lagReader) close() error {
	close(l.done)
	err := l.admin.Close()
	l.wg.Wait()
	return err
}

// poke asks for a read soon (after a commit); it never blocks.
func (l *lagReader) poke() {
	select {
	case l.poked <- struct{}{}:
	default:
	}
}

// hold starts reporting partition's lag.
func (l *lagReader) hold(partition int32) {
	l.mu.Lock()
	l.held[partition] = 0
	l.mu.Unlock()
	l.poke()
}

// release stops reporting partition's lag and reports 0: this member no
// longer consumes it, and a stale value would keep a lag alert firing
// after a rebalance moved a backlog to another member.
func (l *lagReader) release(partition int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, partition)
	l.metrics.ConsumerLag(l.topic, partition, 0)
}

// total returns the sum of the last lag read for the partitions held.
func (l *lagReader) total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, v := range l.held {
		n += v
	}
	return n
}

// refresh reads the lag of every partition held and reports it, unless the
// partition was released meanwhile. A failed read keeps the last value.
func (l *lagReader) refresh() {
	l.mu.Lock()
	partitions := slices.Collect(maps.Keys(l.held))
	l.mu.Unlock()
	if len(partitions) == 0 {
		return
	}
	committed, err := l.admin.ListConsumerGroupOffsets(l.group, map[string][]int32{l.topic: partitions})
	if err != nil {
		return
	}
	lags := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		hwm, err := l.client.GetOffset(l.topic, p, sarama.OffsetNewest)
		if err != nil {
			continue
		}
		from := int64(-1)
		if b := committed.GetBlock(l.topic, p); b != nil && b.Err == sarama.ErrNoError {
			from = b.Offset
		}
		if from < 0 {
			if from, err = l.client.GetOffset(l.topic, p, sarama.OffsetOldest); err != nil {
				continue
			}
		}
		lags[p] = max(hwm-from, 0)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, lag := range lags {
		if _, ok := l.held[p]; ok {
			l.held[p] = lag
			l.metrics.ConsumerLag(l.topic, p, lag)
		}
	}
}
