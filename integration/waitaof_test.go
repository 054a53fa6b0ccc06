//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// TestRedisWaitAOF runs the worker with IDEMPOTENCY_MIN_REPLICAS=1 and
// IDEMPOTENCY_WAIT_AOF=true, at the default IDEMPOTENCY_TIMEOUT, against a
// server that has WAITAOF and a replica fsyncing every write (appendfsync
// always). The worker starts (on a server without WAITAOF it exits 2),
// sends each notification once, and every record ends up in the replica's
// append-only file; a replay on a second worker sends nothing.
func TestRedisWaitAOF(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{})
	primary := redistest.MustStartWaitAOF(t)
	replica, _ := redistest.MustStartReplica(t, primary, "--appendfsync", "always")
	onReplica := replica.MustClient(t, 0)
	// The replica's first fsync waits for the rewrite that follows its
	// initial sync: the worker starts once the replica acknowledges.
	pc := primary.MustClient(t, 0)
	faultWait(t, 30*time.Second, "the replica's AOF acknowledges", func() (bool, string) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res := pc.DoMulti(c, pc.B().Set().Key("waitaof-probe").Value("1").Build(),
			pc.B().Waitaof().Numlocal(0).Numreplicas(1).Timeout(1000).Build())
		ack, err := res[1].AsIntSlice()
		return err == nil && len(ack) == 2 && ack[1] == 1, fmt.Sprintf("WAITAOF 0 1: %v, %v", ack, err)
	})

	env := map[string]string{
		"REDIS_URL":                primary.URL() + "/0",
		"IDEMPOTENCY_MIN_REPLICAS": "1",
		"IDEMPOTENCY_WAIT_AOF":     "true",
	}
	w := rig.StartWorker(env)
	events, phones := faultSMSEvents("w", 10)
	rig.Publish(ctx, events...)
	rig.WaitSMS(ctx, phones, 60*time.Second)
	faultWait(t, 30*time.Second, "batch handled", func() (bool, string) {
		got := w.Count("notification_sent")
		return got >= len(events), fmt.Sprintf("%d notification_sent lines", got)
	})
	// A record a loaded machine kept from its acknowledgement within the
	// timeout is owed, and written again: every one is written in the end.
	faultWait(t, 60*time.Second, "no record owed", func() (bool, string) {
		m, err := w.Metrics(ctx)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(m, "\nnotification_worker_ledger_owed 0\n"), metricLine(m, "notification_worker_ledger_owed")
	})
	for _, e := range events {
		key := rig.Key("sms", e.ID)
		v, err := onReplica.Do(ctx, onReplica.B().Get().Key(key).Build()).ToString()
		if err != nil || !isSentRecord(v) {
			t.Fatalf("%s on the replica: %q, %v; want its sent record", key, v, err)
		}
		if !replica.MustAOFHold(t, v) {
			t.Errorf("%s: the replica's AOF lacks its record %q", key, v)
		}
	}
	t.Logf("first worker: %d idempotency_check_unavailable, %d idempotency_record_failed",
		w.Count("idempotency_check_unavailable"), w.Count("idempotency_record_failed"))
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	w2 := rig.StartWorker(env)
	rig.Publish(ctx, events...)
	faultWait(t, 60*time.Second, "replay handled", func() (bool, string) {
		got := w2.Count("duplicate_suppressed") + w2.Count("notification_sent")
		return got >= len(events), fmt.Sprintf("%d of %d replayed notifications handled", got, len(events))
	})
	for _, p := range phones {
		if n := rig.SMSCount(ctx)[p]; n != 1 {
			t.Errorf("%s got %d SMS, want 1", p, n)
		}
	}
}
