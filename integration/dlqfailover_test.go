//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDeadLetterLeaderFailover runs the worker on three Apache Kafka nodes
// and kills, with SIGKILL, the node leading the dead letter topic while
// dead letters it has appended wait for their acknowledgement. The dead
// letter topic has one partition, replicated three ways with
// min.insync.replicas 2, on nodes [leader, coordinator, slow]: the
// coordinator of the worker's group is never stopped, so the group keeps
// its session and no record is handled twice, and a second dead letter for
// a record can only come from a write sent again. Every record is poison
// (dead-lettered at once, no provider call).
//
// The window is made, not waited for: the slow follower is frozen (docker
// pause) until the leader holds appended, unacknowledged dead letters
// (acks=all waits for it), which the coordinator node has replicated; then
// the leader is killed and the slow follower let go. The coordinator node,
// first of the replicas still in sync, takes over with those dead letters
// in its log, and every write in flight is sent again to it.
//
// The dead letter topic must then hold, for every record, exactly one dead
// letter, named by its dlq.original.topic, dlq.original.partition and
// dlq.original.offset headers. See docs/kafka-brokers.md.
func TestDeadLetterLeaderFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{KafkaNodes: 3})
	dlqTopic := rig.Topic + ".dlq"

	cl, err := kgo.NewClient(kgo.SeedBrokers(rig.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)

	// The group's coordinator stays up: a coordinator that dies ends the
	// worker's session, and the records handled but not committed are
	// handled, and dead-lettered, again (docs/kafka-brokers.md), a copy
	// this test is not about. The first FindCoordinator creates the
	// offsets topic; until it has leaders, the answer is
	// COORDINATOR_NOT_AVAILABLE.
	var coordinator int32
	faultWait(t, 60*time.Second, "a coordinator for "+rig.Group, func() (bool, string) {
		coord := adm.FindGroupCoordinators(ctx, rig.Group)
		if err := coord.Error(); err != nil {
			return false, err.Error()
		}
		coordinator = coord[rig.Group].NodeID
		return true, ""
	})
	var others []int32
	for id := int32(1); id <= 3; id++ {
		if id != coordinator {
			others = append(others, id)
		}
	}
	if len(others) != 2 {
		t.Fatalf("coordinator node %d is none of the nodes 1 to 3", coordinator)
	}
	victim, slow := others[0], others[1]
	mustCreateTopicOn(ctx, t, cl, dlqTopic, []int32{victim, coordinator, slow})
	t.Logf("group %s coordinated by node %d; %s/0 on nodes [%d %d %d], led by node %d",
		rig.Group, coordinator, dlqTopic, victim, coordinator, slow, victim)

	// Each record its own shipment, so the worker handles many at once and
	// their dead letters share produce requests; each poison (a phone
	// number that is not E.164), so each is dead-lettered at once. All are
	// published before the worker starts: a produce to the source topic
	// waits for the frozen follower too, and the dead letters must keep
	// flowing while it is frozen, from the worker's backlog.
	const total, batch = 1200, 200
	events, _ := faultSMSEvents("d", total)
	recs := make([]*kgo.Record, total)
	for i, e := range events {
		e.Phone = "12345"
		recs[i] = &kgo.Record{Topic: rig.Topic, Key: []byte(e.Shipment), Value: e.JSON()}
	}
	for from := 0; from < total; from += batch {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := rig.Kafka.PublishRecords(pctx, recs[from:min(from+batch, total)]...)
		cancel()
		if err != nil {
			t.Fatalf("publish records %d..: %v", from, err)
		}
	}
	w := rig.StartWorker(nil)

	faultWait(t, 60*time.Second, "dead letters flowing", func() (bool, string) {
		n := w.Count("event_dead_lettered")
		return n >= total/10, fmt.Sprintf("%d dead letters", n)
	})
	if err := rig.Kafka.PauseNode(ctx, slow); err != nil {
		t.Fatal(err)
	}
	paused := true
	unpause := func() {
		if paused {
			paused = false
			if err := rig.Kafka.UnpauseNode(ctx, slow); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(unpause)
	// Within the slow node's broker session (9s): fenced, it would leave
	// the in-sync replicas and the leader would acknowledge what it holds.
	var held string
	faultWait(t, 6*time.Second, "dead letters appended by the leader and not acknowledged", func() (bool, string) {
		leo, hw, err := logEndAndHighWater(ctx, cl, victim, dlqTopic)
		held = fmt.Sprintf("log end %d, high watermark %d", leo, hw)
		if err != nil {
			return false, err.Error()
		}
		return leo > hw, held
	})
	atKill := w.Count("event_dead_lettered")
	killed := time.Now()
	if err := rig.Kafka.KillNode(ctx, victim); err != nil {
		t.Fatal(err)
	}
	unpause()
	t.Logf("SIGKILL node %d, leader of %s/0 (%s), at %d dead letters logged; node %d let go",
		victim, dlqTopic, held, atKill, slow)

	if _, err := w.WaitLog("event_dead_lettered", total, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	newLeader, newISR, err := rig.Kafka.Leader(ctx, dlqTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every record dead-lettered %.1fs after the kill; %s/0 led by node %d, in-sync replicas %v",
		time.Since(killed).Seconds(), dlqTopic, newLeader, newISR)
	rig.WaitCommitted(ctx, 30*time.Second)

	// Every record in the dead letter topic, up to its end: a copy the
	// worker never logged (its write was answered only the second time)
	// is read too.
	ends, err := adm.ListEndOffsets(ctx, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(dlqTopic, 0)
	if !ok || end.Err != nil {
		t.Fatalf("end offset of %s/0: %v", dlqTopic, end.Err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dls, err := rig.Kafka.ReadTopic(rctx, dlqTopic, int(end.Offset))
	if err != nil {
		t.Fatal(err)
	}

	identity := func(topic string, partition int32, offset int64) string {
		return fmt.Sprintf("%s/%d/%d", topic, partition, offset)
	}
	want := make(map[string]bool, total)
	for _, r := range recs {
		want[identity(r.Topic, r.Partition, r.Offset)] = true
	}
	written := map[string]int{}
	for _, dl := range dls {
		written[faultHeader(dl, "dlq.original.topic")+"/"+faultHeader(dl, "dlq.original.partition")+"/"+faultHeader(dl, "dlq.original.offset")]++
	}
	logged := map[string]int{}
	for _, ev := range w.Events("event_dead_lettered") {
		logged[fmt.Sprintf("%v/%v/%v", ev["topic"], ev["partition"], ev["offset"])]++
	}
	var missing, twice, unknown []string
	for id := range want {
		switch n := written[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s x%d (logged %d)", id, n, logged[id]))
		}
	}
	for id, n := range written {
		if !want[id] {
			unknown = append(unknown, fmt.Sprintf("%s x%d", id, n))
		}
	}
	sort.Strings(twice)
	t.Logf("dead letter failover: %d poison records, %d dead letters in %s, missing %d, there more than once %d, for no record %d; "+
		"%d event_dead_lettered, %d dead_letter_failed, %d partitions_assigned",
		total, len(dls), dlqTopic, len(missing), len(twice), len(unknown),
		w.Count("event_dead_lettered"), w.Count("dead_letter_failed"), w.Count("partitions_assigned"))

	t.Run("NoDeadLetterMissing", func(t *testing.T) {
		if len(missing) > 0 {
			sort.Strings(missing)
			t.Errorf("%d of %d records have no dead letter: %s", len(missing), total, strings.Join(firstN(missing, 10), ", "))
		}
	})
	t.Run("NoDeadLetterTwice", func(t *testing.T) {
		if len(twice) > 0 {
			t.Errorf("%d records have more than one dead letter: %s", len(twice), strings.Join(firstN(twice, 10), ", "))
		}
		if len(unknown) > 0 {
			t.Errorf("%d dead letters name no published record: %s", len(unknown), strings.Join(firstN(unknown, 10), ", "))
		}
	})
}

// mustCreateTopicOn creates topic with one partition on replicas, the
// first its preferred leader, which it leads once created.
func mustCreateTopicOn(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, replicas []int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30_000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions, rt.ReplicationFactor = -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, slices.Clone(replicas)
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	for _, r := range resp.Topics {
		if r.ErrorCode != 0 {
			t.Fatalf("create topic %s on %v: error code %d", topic, replicas, r.ErrorCode)
		}
	}
	// Metadata reaches every broker shortly after the answer.
	faultWait(t, 30*time.Second, "topic "+topic+" led by node "+fmt.Sprint(replicas[0]), func() (bool, string) {
		adm := kadm.NewClient(cl)
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return false, err.Error()
		}
		p := md.Topics[topic].Partitions[0]
		return p.Leader == replicas[0] && len(p.ISR) == len(replicas), fmt.Sprintf("leader %d, in-sync replicas %v", p.Leader, p.ISR)
	})
}

// logEndAndHighWater asks node, the leader of topic's partition 0, for its
// log end offset (what it appended: the answer to a ListOffsets from the
// debugging replica id) and its high watermark (what every in-sync
// replica has, so acknowledged under acks=all).
func logEndAndHighWater(ctx context.Context, cl *kgo.Client, node int32, topic string) (logEnd, highWater int64, err error) {
	ask := func(replicaID int32) (int64, error) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = replicaID
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := req.RequestWith(rctx, cl.Broker(int(node)))
		if err != nil {
			return 0, err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return 0, fmt.Errorf("list offsets of %s/0 on node %d: %d topics in the answer", topic, node, len(resp.Topics))
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return 0, fmt.Errorf("list offsets of %s/0 on node %d: %w", topic, node, err)
		}
		return p.Offset, nil
	}
	if logEnd, err = ask(-2); err != nil {
		return 0, 0, err
	}
	highWater, err = ask(-1)
	return logEnd, highWater, err
}

// firstN returns at most the first n of s.
func firstN(s []string, n int) []string { return s[:min(n, len(s))] }
