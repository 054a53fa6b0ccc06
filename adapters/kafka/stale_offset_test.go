package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// mustAdmin returns a franz-go admin client on brokers, closed when the test
// ends. Sarama's ClusterAdmin cannot commit offsets for a group, kadm can.
func mustAdmin(tb testing.TB, brokers []string) *kadm.Client {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		tb.Fatalf("kgo.NewClient: %v", err)
	}
	tb.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// mustCommit commits offset for group on topic's partition p, as a group
// with no live member (an operator tool, or a broker that lost data after
// the commit) leaves it.
func mustCommit(tb testing.TB, brokers []string, group, topic string, p int32, offset int64) {
	tb.Helper()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: p, At: offset, LeaderEpoch: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := mustAdmin(tb, brokers).CommitOffsets(ctx, group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		tb.Fatalf("CommitOffsets(%s, %s/%d=%d): %v", group, topic, p, offset, err)
	}
}

// A committed offset past the partition's end (unclean leader election, a
// truncated log: Sarama #2863) makes Sarama fetch from the oldest record.
// Our marks must then bring the commit back down to what was handled: if
// they only moved it forward, the commit would stay at the stale offset, and
// once the log grew past it a restart would resume there and skip every
// record in between.
func TestConsumer_StaleCommittedOffsetIsReset(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "stale")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	MustPublish(t, brokers, topic, numbered(10, "v", distinctKeys)...)
	cfg, _ := testConfig(brokers, topic)
	mustCommit(t, brokers, cfg.GroupID, topic, 0, 50)

	first := newHandledLog()
	rc := MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		first.handled(rec)
		return nil
	}))
	wait.For(t, 10*time.Second, "records 0..9 handled after the reset", func() bool { return first.count() >= 10 })
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 10})
	rc.MustStop(t, 10*time.Second)

	MustPublish(t, brokers, topic, numbered(50, "w", distinctKeys)...)
	second := newHandledLog()
	rc = MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		second.handled(rec)
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 60})
	rc.MustStop(t, 10*time.Second)
	got := second.offsets()
	for off := int64(10); off < 60; off++ {
		if !got[off] {
			t.Errorf("record %d was never handled after the restart", off)
		}
	}
}
