package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/devbroker"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

var nameSeq atomic.Int64

// uniqueName returns a topic or group name no other test uses.
func uniqueName(tb testing.TB, prefix string) string {
	tb.Helper()
	n := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(tb.Name())
	return fmt.Sprintf("%s-%s-%d", prefix, n, nameSeq.Add(1))
}

// MustStartEmbedded starts an embedded broker, closed when the test ends.
func MustStartEmbedded(tb testing.TB, partitions int32, topics ...string) *devbroker.Broker {
	tb.Helper()
	b, err := devbroker.Start(partitions, topics)
	if err != nil {
		tb.Fatalf("devbroker.Start: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}

// commitObserver sees every OffsetCommit request the broker receives, so a
// test can assert that no commit ever passed an offset, not only that the
// last one did not.
type commitObserver struct {
	mu      sync.Mutex
	commits int
	max     map[int32]int64 // highest offset ever committed, per partition
	last    map[int32]int64
}

func (o *commitObserver) observe(req kmsg.Request) (kmsg.Response, error, bool) {
	r := req.(*kmsg.OffsetCommitRequest)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.commits++
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if cur, ok := o.max[p.Partition]; !ok || p.Offset > cur {
				o.max[p.Partition] = p.Offset
			}
			o.last[p.Partition] = p.Offset
		}
	}
	return nil, nil, false // observe only: the broker handles it as usual
}

// snapshot returns the commit count, the highest and the last offset
// committed for partition (-1 when none).
func (o *commitObserver) snapshot(partition int32) (commits int, maxOff, last int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	maxOff, last = -1, -1
	if v, ok := o.max[partition]; ok {
		maxOff = v
	}
	if v, ok := o.last[partition]; ok {
		last = v
	}
	return o.commits, maxOff, last
}

// MustStartCluster starts an embedded broker with extra kfake options
// (SASL, say) and returns its cluster, for tests that reach into the
// broker (ControlKey). It is closed when tb ends.
func MustStartCluster(tb testing.TB, partitions int32, topics []string, extra ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	b, err := devbroker.Start(partitions, topics, extra...)
	if err != nil {
		tb.Fatalf("devbroker.Start: %v", err)
	}
	tb.Cleanup(b.Close)
	return b.Cluster()
}

// MustStartObservedBroker starts a cluster with a commitObserver on it.
func MustStartObservedBroker(tb testing.TB, partitions int32, topics ...string) ([]string, *commitObserver) {
	tb.Helper()
	c := MustStartCluster(tb, partitions, topics)
	obs := &commitObserver{max: map[int32]int64{}, last: map[int32]int64{}}
	c.ControlKey(int16(kmsg.OffsetCommit), obs.observe)
	return c.ListenAddrs(), obs
}

// fakeMetrics counts what the consumer reports.
type fakeMetrics struct {
	mu           sync.Mutex
	deadLettered map[ports.Kind]int
	panics       int
	lag          map[int32]int64
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{deadLettered: map[ports.Kind]int{}, lag: map[int32]int64{}}
}

func (m *fakeMetrics) RecordDeadLettered(_ string, kind ports.Kind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deadLettered[kind]++
}

func (m *fakeMetrics) HandlerPanicked(string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.panics++
}

func (m *fakeMetrics) ConsumerLag(_ string, partition int32, lag int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lag[partition] = lag
}

func (m *fakeMetrics) HandlersAbandoned(int) {}

func (m *fakeMetrics) RecordRetried(string, ports.Kind) {}

// counts returns the dead letters and panics reported so far.
func (m *fakeMetrics) counts() (deadLettered, panics int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.deadLettered {
		deadLettered += n
	}
	return deadLettered, m.panics
}

// lagOf returns the last lag reported for partition, and whether any was.
func (m *fakeMetrics) lagOf(partition int32) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.lag[partition]
	return l, ok
}

// testConfig is a consumer config, and the record policy around the
// handler, with timings small enough for tests.
type testSetup struct {
	kafka.Config
	// RetryMaxAttempts and MaxRecordBytes are the policy's; its backoff is
	// the consumer's RetryInitialBackoff and RetryMaxBackoff.
	RetryMaxAttempts int
	MaxRecordBytes   int
	// First, when set, goes before the worker's policy, where the worker
	// puts what reads a record's context (its tracing).
	First ports.Middleware
}

func testConfig(brokers []string, topic string) (testSetup, *logtest.Buffer) {
	logs := &logtest.Buffer{}
	return testSetup{Config: kafka.Config{
		Brokers:             brokers,
		Topic:               topic,
		GroupID:             topic + "-group",
		DLQTopic:            topic + ".dlq",
		MaxInFlight:         8,
		RetryInitialBackoff: 5 * time.Millisecond,
		RetryMaxBackoff:     20 * time.Millisecond,
		CommitInterval:      50 * time.Millisecond,
		ShutdownTimeout:     2 * time.Second,
		SessionTimeout:      2 * time.Second,
		HeartbeatInterval:   100 * time.Millisecond,
		Logger:              slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, RetryMaxAttempts: 3}, logs
}

// workerPolicy returns the record policy the worker runs, in the worker's
// order, dead-lettering through c.
func workerPolicy(cfg testSetup, c *kafka.Consumer) []ports.Middleware {
	pcfg := policy.Config{
		MaxRecordBytes:      cfg.MaxRecordBytes,
		RetryMaxAttempts:    cfg.RetryMaxAttempts,
		RetryInitialBackoff: cfg.RetryInitialBackoff,
		RetryMaxBackoff:     cfg.RetryMaxBackoff,
		Logger:              cfg.Logger,
	}
	if m, ok := cfg.Metrics.(policy.Metrics); ok {
		pcfg.Metrics = m
	}
	mws := []ports.Middleware{
		policy.DeadLetter(c.DeadLetterSink(), pcfg),
		policy.MaxBytes(pcfg),
		policy.Recover(pcfg),
		policy.Retry(pcfg),
	}
	if cfg.First != nil {
		mws = append([]ports.Middleware{cfg.First}, mws...)
	}
	return mws
}

func MustPublish(tb testing.TB, brokers []string, topic string, msgs ...kafka.Message) {
	tb.Helper()
	p, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
	if err != nil {
		tb.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, topic, msgs...); err != nil {
		tb.Fatalf("Publish: %v", err)
	}
}

// keysOn returns n distinct keys that the Publisher's partitioner sends to
// partition p of a topic with the given partition count.
func keysOn(tb testing.TB, topic string, p, partitions int32, n int) []string {
	tb.Helper()
	partitioner := sarama.NewHashPartitioner(topic)
	var keys []string
	for i := 0; len(keys) < n && i < 100*n; i++ {
		k := fmt.Sprintf("SHP-%d", i)
		got, err := partitioner.Partition(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k)}, partitions)
		if err != nil {
			tb.Fatalf("Partition: %v", err)
		}
		if got == p {
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		tb.Fatalf("found only %d keys for partition %d", len(keys), p)
	}
	return keys
}

// numbered returns n messages with values "<prefix>-<i>" and keys from key(i).
func numbered(n int, prefix string, key func(i int) string) []kafka.Message {
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(key(i)), Value: []byte(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return msgs
}

// runningConsumer is a Consumer.Run in the background.
type runningConsumer struct {
	c      *kafka.Consumer
	cancel context.CancelFunc
	done   chan error
}

// MustRun starts c.RunPolicy(h) behind the worker's policy and stops it
// when the test ends.
func MustRun(tb testing.TB, cfg testSetup, h ports.Handler) *runningConsumer {
	tb.Helper()
	c, err := kafka.NewConsumer(cfg.Config)
	if err != nil {
		tb.Fatalf("NewConsumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.RunPolicy(ctx, h, workerPolicy(cfg, c)...) }()
	tb.Cleanup(func() { _ = rc.stop(30 * time.Second) })
	return rc
}

// stop cancels Run and waits for it to return, at most timeout.
func (rc *runningConsumer) stop(timeout time.Duration) error {
	rc.cancel()
	select {
	case err := <-rc.done:
		rc.done <- err // later calls see the same result
		return err
	case <-time.After(timeout):
		return errors.New("Run did not return in time")
	}
}

// MustStop stops the consumer and fails unless Run returned nil.
func (rc *runningConsumer) MustStop(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	if err := rc.stop(timeout); err != nil {
		tb.Fatalf("Run: %v", err)
	}
}

// committedOffsets reads the group's committed offsets back from the broker
// (-1: none committed).
func committedOffsets(tb testing.TB, brokers []string, group, topic string, partitions int32) map[int32]int64 {
	tb.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, sarama.NewConfig())
	if err != nil {
		tb.Fatalf("NewClusterAdmin: %v", err)
	}
	defer admin.Close()
	ps := make([]int32, partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: ps})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		resp, err = &sarama.OffsetFetchResponse{}, nil // nothing committed yet
	}
	if err != nil {
		tb.Fatalf("ListConsumerGroupOffsets: %v", err)
	}
	out := make(map[int32]int64, partitions)
	for _, p := range ps {
		out[p] = -1
		if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
			out[p] = b.Offset
		}
	}
	return out
}

// waitCommitted waits until every partition's committed offset equals want.
func waitCommitted(tb testing.TB, brokers []string, group, topic string, want map[int32]int64) {
	tb.Helper()
	var got map[int32]int64
	wait.For(tb, 10*time.Second, fmt.Sprintf("committed offsets %v", want), func() bool {
		got = committedOffsets(tb, brokers, group, topic, int32(len(want)))
		for p, w := range want {
			if got[p] != w {
				return false
			}
		}
		return true
	})
}

// readTopic reads every record of topic's partitions up to their current
// end (empty if the topic does not exist).
func readTopic(tb testing.TB, brokers []string, topic string) []*sarama.ConsumerMessage {
	tb.Helper()
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		tb.Fatalf("NewClient: %v", err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil
	}
	if err != nil {
		tb.Fatalf("Partitions(%s): %v", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		tb.Fatalf("NewConsumer: %v", err)
	}
	defer consumer.Close()
	var out []*sarama.ConsumerMessage
	for _, p := range partitions {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			tb.Fatalf("GetOffset: %v", err)
		}
		if end == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			tb.Fatalf("ConsumePartition: %v", err)
		}
		timeout := time.After(10 * time.Second)
	read:
		for {
			select {
			case m := <-pc.Messages():
				out = append(out, m)
				if m.Offset+1 >= end {
					break read
				}
			case <-timeout:
				tb.Fatalf("reading %s/%d: timed out", topic, p)
			}
		}
		_ = pc.Close()
	}
	return out
}

// header returns the value of the header named key, or "" and false.
func header(m *sarama.ConsumerMessage, key string) (string, bool) {
	for _, h := range m.Headers {
		if string(h.Key) == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// handledLog collects what a test handler saw.
type handledLog struct {
	mu      sync.Mutex
	records []ports.Record
	calls   map[int64]int // handler calls per offset
}

func newHandledLog() *handledLog { return &handledLog{calls: map[int64]int{}} }

func (l *handledLog) call(rec ports.Record) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[rec.Offset]++
	return l.calls[rec.Offset]
}

func (l *handledLog) handled(rec ports.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, rec)
}

func (l *handledLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.records)
}

func (l *handledLog) offsets() map[int64]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]bool, len(l.records))
	for _, r := range l.records {
		out[r.Offset] = true
	}
	return out
}

func (l *handledLog) callsFor(off int64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[off]
}

// holdFirst is a handler that keeps offset 0 until release is closed (or
// its context ends) and logs every record it finishes: the lowest record
// stuck while the rest of the partition goes through.
func holdFirst(release <-chan struct{}, log *handledLog) ports.Handler {
	return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 0 {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		log.handled(rec)
		return nil
	})
}
