//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// TestRedisSentinelFailover runs the worker against Redis through three
// Sentinels: a primary and two replicas, each replica behind a relay the
// test can hold. The worker sends a first batch with replication flowing,
// then a second while both replicas lag; the primary is killed (SIGKILL)
// and the Sentinels promote a replica, which never saw the second batch's
// writes. A second worker then handles a replay of both batches.
//
// With IDEMPOTENCY_MIN_REPLICAS=1 the second batch's claims and records
// fell short of their acknowledgement: the worker failed open, kept the
// records owed, and wrote them to the new primary once it had a replica to
// acknowledge them; the replay sends nothing, and nothing is lost. With 0
// the records were acknowledged by the dying primary alone, and the replay
// sends each of them again: the test logs how many, the reason for the
// setting.
func TestRedisSentinelFailover(t *testing.T) {
	for _, n := range []int{1, 0} {
		t.Run(fmt.Sprintf("MinReplicas=%d", n), func(t *testing.T) {
			sentinelFailover(t, n)
		})
	}
}

func sentinelFailover(t *testing.T, minReplicas int) {
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{})
	primary := redistest.MustStart(t)
	r1, l1 := redistest.MustStartReplica(t, primary)
	r2, l2 := redistest.MustStartReplica(t, primary)
	sentinels := redistest.MustStartSentinels(t, 3, "idem", primary, 2)
	env := map[string]string{
		// Its host is not dialled: the Sentinels name the primary.
		"REDIS_URL":                "redis://sentinel-named-primary:6379/0",
		"REDIS_SENTINEL_ADDRS":     strings.Join(sentinels.Addrs(), ","),
		"REDIS_SENTINEL_MASTER":    sentinels.Master,
		"IDEMPOTENCY_MIN_REPLICAS": strconv.Itoa(minReplicas),
	}
	w := rig.StartWorker(env)

	first, firstPhones := faultSMSEvents("a", 20)
	rig.Publish(ctx, first...)
	rig.WaitSMS(ctx, firstPhones, 60*time.Second)

	l1.Hold()
	l2.Hold()
	second, secondPhones := faultSMSEvents("b", 20)
	rig.Publish(ctx, second...)
	rig.WaitSMS(ctx, secondPhones, 60*time.Second)
	// Every second-batch notification finished (sent, and its record
	// written or owed) before the primary dies.
	faultWait(t, 30*time.Second, "second batch handled", func() (bool, string) {
		got := w.Count("notification_sent")
		return got >= len(first)+len(second), fmt.Sprintf("%d notification_sent lines", got)
	})

	primary.Kill(t)
	l1.Cut()
	l2.Cut()
	promoted := waitPromoted(t, sentinels, primary.Port, r1, r2)
	t.Logf("the Sentinels promoted %s", promoted.Addr())

	// What the store refused is owed; the worker writes it once the new
	// primary has a replica again (the Sentinels repoint the other one).
	faultWait(t, 90*time.Second, "owed records written", func() (bool, string) {
		m, err := w.Metrics(ctx)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(m, "\nnotification_worker_ledger_owed 0\n"), metricLine(m, "notification_worker_ledger_owed")
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	// The replay, on another worker.
	w2 := rig.StartWorker(env)
	rig.Publish(ctx, append(append([]faultEvent{}, first...), second...)...)
	total := len(first) + len(second)
	faultWait(t, 90*time.Second, "replay handled", func() (bool, string) {
		got := w2.Count("notification_sent") + w2.Count("duplicate_suppressed")
		return got >= total, fmt.Sprintf("%d of %d replayed notifications handled", got, total)
	})

	t.Logf("first worker: %d idempotency_check_unavailable, %d idempotency_record_failed; replay: %d notification_sent, %d duplicate_suppressed",
		w.Count("idempotency_check_unavailable"), w.Count("idempotency_record_failed"), w2.Count("notification_sent"), w2.Count("duplicate_suppressed"))
	counts := rig.SMSCount(ctx)
	twice, lost := 0, 0
	for _, p := range append(append([]string{}, firstPhones...), secondPhones...) {
		switch {
		case counts[p] == 0:
			lost++
		case counts[p] > 1:
			twice++
		}
	}
	if lost > 0 {
		t.Errorf("%d notifications never sent", lost)
	}
	switch {
	case minReplicas > 0 && twice > 0:
		t.Errorf("IDEMPOTENCY_MIN_REPLICAS=%d: %d notifications went out twice after the failover, want none", minReplicas, twice)
	case minReplicas == 0 && twice == 0:
		t.Errorf("no duplicate without acknowledgement: the rig did not hold replication back")
	case minReplicas == 0:
		t.Logf("IDEMPOTENCY_MIN_REPLICAS=0: %d of %d notifications went out twice after the failover (their records died with the primary)", twice, total)
	}
}

// waitPromoted waits until the Sentinels name a primary other than the one
// on port old, and returns the candidate they named once it is one.
func waitPromoted(t *testing.T, ss *redistest.Sentinels, old int, candidates ...*redistest.Server) *redistest.Server {
	t.Helper()
	c := ss.Nodes[0].MustClient(t, 0)
	var promoted *redistest.Server
	faultWait(t, 60*time.Second, "a promoted replica", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		addr, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(ss.Master).Build()).AsStrSlice()
		if err != nil || len(addr) != 2 {
			return false, fmt.Sprint(addr, err)
		}
		for _, s := range candidates {
			if addr[1] == strconv.Itoa(s.Port) && s.Port != old {
				promoted = s
				return true, ""
			}
		}
		return false, "primary still " + addr[1]
	})
	ss.MustWaitPrimary(t, promoted, 60*time.Second)
	return promoted
}

// metricLine is the line of m that starts with name, for a failure message.
func metricLine(m, name string) string {
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return name + " absent"
}
