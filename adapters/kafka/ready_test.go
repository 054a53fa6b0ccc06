package kafka_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// TestConsumer_ReadyWithoutPartitions: a member the group gave no partition
// (more members than partitions: a StatefulSet scaled past the partition
// count, or a spare) has joined and can take partitions at the next
// rebalance. It is Ready; otherwise a rollout waits for it for ever and a
// PodDisruptionBudget counts it as down.
func TestConsumer_ReadyWithoutPartitions(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "spare")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	cfgA, _ := testConfig(brokers, topic)
	cfgB, logsB := testConfig(brokers, topic)
	noop := ports.HandlerFunc(func(context.Context, ports.Record) error { return nil })

	a := MustRun(t, cfgA, noop)
	wait.For(t, 20*time.Second, "a to hold the only partition", func() bool { return a.c.Assigned() > 0 })
	b := MustRun(t, cfgB, noop)
	// b's join gives it the generation's assignment: none, as a keeps the
	// only partition (cooperative-sticky).
	wait.For(t, 20*time.Second, "b to join with no partition", func() bool {
		for _, line := range strings.Split(logsB.String(), "\n") {
			if strings.Contains(line, `"msg":"partitions_assigned"`) && strings.Contains(line, `"partitions":null`) {
				return true
			}
		}
		return false
	})
	wait.For(t, 20*time.Second, "the member without partitions to be Ready", b.c.Ready)
	if !a.c.Ready() {
		t.Error("the member holding the partition is not Ready")
	}
}

// TestConsumer_NotReadyBeforeJoining: a consumer whose group coordinator
// refuses it (here: every JoinGroup answered "coordinator loading") is
// running but not in the group, and must not be Ready; once the join goes
// through, it is.
func TestConsumer_NotReadyBeforeJoining(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "joining")
	cluster := MustStartCluster(t, 1, []string{topic})
	var refusing atomic.Bool
	refusing.Store(true)
	var refused atomic.Int64
	cluster.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !refusing.Load() {
			return nil, nil, false
		}
		refused.Add(1)
		r := req.(*kmsg.JoinGroupRequest)
		resp := r.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil, true
	})
	cfg, _ := testConfig(cluster.ListenAddrs(), topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(context.Context, ports.Record) error { return nil }))
	wait.For(t, 20*time.Second, "three refused joins", func() bool { return refused.Load() >= 3 })
	if rc.c.Ready() {
		t.Fatal("Ready while every join is refused")
	}
	refusing.Store(false)
	wait.For(t, 20*time.Second, "Ready once the join goes through", rc.c.Ready)
}
