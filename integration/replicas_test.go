//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/integration"
)

// TestRedisSentinelFailover runs the worker against Redis through three
// Sentinels: a primary and two replicas, each replica behind a relay the
// test can hold. The worker sends a first batch with replication flowing,
// then a second while both replicas lag; the primary is killed (SIGKILL)
// and the Sentinels promote a replica, which never saw the second batch's
// writes. A second worker then handles a replay of both batches.
//
// With IDEMPOTENCY_MIN_REPLICAS unset, the default, the worker chose to
// have one replica acknowledge every write (the primary has replicas), and
// the second batch's claims and records fell short of their
// acknowledgement: the worker failed open, kept the records owed, and wrote
// them to the new primary once it had a replica to acknowledge them; the
// replay sends nothing, and nothing is lost. With 0 the records were
// acknowledged by the dying primary alone, and the replay sends each of
// them again: the test logs how many, the reason for the default.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	for _, setting := range []string{"", "0"} {
		t.Run(minReplicasName(setting), func(t *testing.T) {
			t.Parallel()
			sentinelFailover(t, setting)
		})
	}
}

// minReplicasName names a subtest by its IDEMPOTENCY_MIN_REPLICAS, ""
// for unset.
func minReplicasName(setting string) string {
	if setting == "" {
		return "MinReplicasUnset"
	}
	return "MinReplicas=" + setting
}

func sentinelFailover(t *testing.T, minReplicas string) {
	rig := startFaultRig(t, faultRigOptions{})
	primary := redistest.MustStart(t)
	r1, l1 := redistest.MustStartReplica(t, primary)
	r2, l2 := redistest.MustStartReplica(t, primary)
	sentinels := redistest.MustStartSentinels(t, 3, "idem", primary, 2)
	env := map[string]string{
		// Its host is not dialled: the Sentinels name the primary.
		"REDIS_URL":             "redis://sentinel-named-primary:6379/0",
		"REDIS_SENTINEL_ADDRS":  strings.Join(sentinels.Addrs(), ","),
		"REDIS_SENTINEL_MASTER": sentinels.Master,
	}
	failoverScenario(t, rig, env, minReplicas, func() {
		waitReplicasCaughtUp(t, primary, r1, r2)
		l1.Hold()
		l2.Hold()
	}, func() rueidis.Client {
		t.Logf("before the kill: %s", replicationOffsets(primary, r1, r2))
		sentinels.KillPrimary(t, primary)
		l1.Cut()
		l2.Cut()
		promoted := waitPromoted(t, sentinels, primary.Port, r1, r2)
		t.Logf("the Sentinels promoted %s", promoted.Addr())
		return promoted.MustClient(t, 0)
	})
}

// TestRedisClusterFailover is the Sentinel failover scenario on a Redis Cluster
// of three primaries, each with a replica, and two for the first: both of
// its replicas fall behind, it is killed, and the cluster promotes one of
// them; the other then replicates the new primary. Only the notifications
// whose keys the first primary serves are at risk. Unset,
// IDEMPOTENCY_MIN_REPLICAS is 1: every primary has a replica.
func TestRedisClusterFailover(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"", "0"} {
		t.Run(minReplicasName(n), func(t *testing.T) {
			t.Parallel()
			rig := startFaultRig(t, faultRigOptions{})
			c := redistest.MustStartCluster(t, 3)
			lagging := []*redistest.Server{c.MustAddReplica(t, 0), c.MustAddReplica(t, 0)}
			for i := 1; i < len(c.Nodes); i++ {
				c.MustAddReplica(t, i)
			}
			env := map[string]string{
				// Seeded with a node that stays up.
				"REDIS_URL": c.Nodes[1].URL() + "?addr=" + c.Nodes[2].Addr(),
			}
			failoverScenario(t, rig, env, n, func() {
				waitReplicasCaughtUp(t, c.Nodes[0], lagging...)
				// A stopped replica would still read, once resumed, what
				// the kernel holds in its socket: push more than the
				// socket buffers hold first, so what follows stays in the
				// primary's own buffer, and dies with it.
				for _, r := range lagging {
					r.Pause(t)
				}
				mustFillNode(t, c.Nodes[0], 32, 1<<20)
			}, func() rueidis.Client {
				c.Nodes[0].Kill(t)
				for _, r := range lagging {
					r.Resume(t)
				}
				faultWait(t, 60*time.Second, "a lagging replica promoted", func() (bool, string) {
					for _, r := range lagging {
						if isPrimary(r) {
							return true, ""
						}
					}
					return false, "neither replica is a primary yet"
				})
				for _, r := range lagging {
					if isPrimary(r) {
						redistest.MustWaitClusterPrimary(t, r, c.Nodes[1:], 60*time.Second)
						t.Logf("the cluster promoted %s", r.Addr())
					}
				}
				return c.MustClient(t)
			})
		})
	}
}

// failoverScenario runs a worker configured by env, with
// IDEMPOTENCY_MIN_REPLICAS set to minReplicas unless that is "", on rig,
// sends a first batch with
// replication flowing and waits until the worker handled all of it, runs
// hold, sends a second batch, runs failover (which returns a client of the
// store after it), waits until the worker owes no record, stops it, and
// has a second worker handle a replay of both batches. It fails the test
// on a notification never sent, and, with acknowledgement, on one sent
// twice; with 0 it logs how many went out twice, and fails when none did
// (the rig did not hold replication back). Each notification sent twice is
// named with what the first worker logged for it and what the store holds
// for its key. Unset, the first worker's start line must say that one
// replica acknowledges.
//
// hold must leave every replica with the first batch's writes: WAIT n
// promises that n replicas have a write, not which, and a failover that
// promotes a replica without it loses it (ADR-0006, window 6). The
// scenario's claim is about the second batch, which no replica sees.
func failoverScenario(t *testing.T, rig *faultRig, env map[string]string, minReplicas string, hold func(), failover func() rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	acked := minReplicas != "0"
	if minReplicas != "" {
		env["IDEMPOTENCY_MIN_REPLICAS"] = minReplicas
	}
	w := rig.StartWorker(env)
	t.Cleanup(func() {
		if t.Failed() {
			logs := w.Logs()
			t.Logf("first worker's last log lines:\n%s", strings.Join(logs[max(0, len(logs)-30):], "\n"))
		}
	})

	first, firstPhones := faultSMSEvents("a", 20)
	rig.Publish(ctx, first...)
	rig.WaitSMS(ctx, firstPhones, 60*time.Second)
	// An SMS at the double is not yet its record: the worker writes that
	// after the send, and logs notification_sent once it is written or
	// owed.
	faultWait(t, 30*time.Second, "first batch handled", func() (bool, string) {
		got := w.Count("notification_sent")
		return got >= len(first), fmt.Sprintf("%d notification_sent lines", got)
	})

	hold()
	second, secondPhones := faultSMSEvents("b", 20)
	rig.Publish(ctx, second...)
	rig.WaitSMS(ctx, secondPhones, 60*time.Second)
	// Every second-batch notification finished (sent, and its record
	// written or owed) before the primary dies.
	faultWait(t, 30*time.Second, "second batch handled", func() (bool, string) {
		got := w.Count("notification_sent")
		return got >= len(first)+len(second), fmt.Sprintf("%d notification_sent lines", got)
	})

	store := failover()

	// What the store refused is owed; the worker writes it once the new
	// primary has a replica again.
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

	t.Logf("first worker: %d idempotency_check_unavailable, %d idempotency_record_failed; replay: %d notification_sent, %d duplicate_suppressed, %d idempotency_check_unavailable",
		w.Count("idempotency_check_unavailable"), w.Count("idempotency_record_failed"), w2.Count("notification_sent"), w2.Count("duplicate_suppressed"), w2.Count("idempotency_check_unavailable"))
	t.Cleanup(func() {
		if t.Failed() {
			logs := w2.Logs()
			t.Logf("replay worker's first log lines:\n%s", strings.Join(logs[:min(len(logs), 30)], "\n"))
		}
	})
	counts := rig.SMSCount(ctx)
	twice, lost := 0, 0
	for _, e := range append(append([]faultEvent{}, first...), second...) {
		switch {
		case counts[e.Phone] == 0:
			lost++
		case counts[e.Phone] > 1:
			twice++
			if acked {
				t.Errorf("%s", sentTwice(ctx, rig, store, w, e, counts[e.Phone]))
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d notifications never sent", lost)
	}
	switch {
	case acked && twice > 0:
		t.Errorf("IDEMPOTENCY_MIN_REPLICAS %q: %d notifications went out twice after the failover, want none", minReplicas, twice)
	case !acked && twice == 0:
		t.Errorf("no duplicate without acknowledgement: the rig did not hold replication back")
	case !acked:
		t.Logf("IDEMPOTENCY_MIN_REPLICAS=0: %d of %d notifications went out twice after the failover (their records died with the primary)", twice, total)
	}
	if chose := w.Events("idempotency_replicas"); minReplicas == "" && (len(chose) != 1 || chose[0]["min_replicas"] != 1.0 || chose[0]["setting"] != "unset") {
		t.Errorf("start lines idempotency_replicas %v, want one: min_replicas 1, setting unset", chose)
	}
}

// sentTwice describes a notification sent twice: which one, its batch, what
// the first worker logged for it, and what store holds for its key.
func sentTwice(ctx context.Context, rig *faultRig, store rueidis.Client, w *integration.Worker, e faultEvent, n int) string {
	key := rig.Key("sms", e.ID)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	held, err := store.Do(ctx, store.B().Get().Key(key).Build()).ToString()
	switch {
	case rueidis.IsRedisNil(err):
		held = "nothing"
	case err != nil:
		held = "unknown: " + err.Error()
	default:
		held = strconv.Quote(held)
	}
	var logged []string
	for _, l := range w.Logs() {
		if strings.Contains(l, `"`+e.ID+`"`) {
			logged = append(logged, l)
		}
	}
	return fmt.Sprintf("%s (event %s, batch %s) sent %d times; the store now holds %s at %s; the first worker logged for it:\n%s",
		e.Phone, e.ID, strings.Split(e.ID, "-")[1], n, held, key, strings.Join(logged, "\n"))
}

// waitReplicasCaughtUp waits until each replica has processed everything
// primary had written when called (INFO replication offsets).
func waitReplicasCaughtUp(t *testing.T, primary *redistest.Server, replicas ...*redistest.Server) {
	t.Helper()
	want, err := replicationOffset(primary, "master_repl_offset")
	if err != nil {
		t.Fatalf("primary %s: %v", primary.Addr(), err)
	}
	faultWait(t, 30*time.Second, "replicas caught up", func() (bool, string) {
		for _, r := range replicas {
			got, err := replicationOffset(r, "slave_repl_offset")
			if err != nil || got < want {
				return false, fmt.Sprintf("replica %s at %d of %d (%v)", r.Addr(), got, want, err)
			}
		}
		return true, ""
	})
}

// replicationOffsets describes where primary and each replica are in the
// replication stream.
func replicationOffsets(primary *redistest.Server, replicas ...*redistest.Server) string {
	p, err := replicationOffset(primary, "master_repl_offset")
	out := fmt.Sprintf("primary %s at %d (%v)", primary.Addr(), p, err)
	for _, r := range replicas {
		o, err := replicationOffset(r, "slave_repl_offset")
		out += fmt.Sprintf(", replica %s at %d (%v)", r.Addr(), o, err)
	}
	return out
}

// replicationOffset reads field (an offset) from s's INFO replication.
func replicationOffset(s *redistest.Server, field string) (int64, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in INFO replication", field)
}

// isPrimary reports whether s says it is a primary (INFO replication).
func isPrimary(s *redistest.Server) bool {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
	return err == nil && strings.Contains(info, "role:master")
}

// mustFillNode writes n values of size bytes to node under keys in hash
// slot 0 (hash tag "la2"), which the first of a Cluster's nodes serves.
func mustFillNode(t *testing.T, node *redistest.Server, n, size int) {
	t.Helper()
	c := node.MustClient(t, 0)
	v := strings.Repeat("x", size)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("filler:{la2}:%d", i)).Value(v).Build()).Error()
		cancel()
		if err != nil {
			t.Fatalf("filler: %v", err)
		}
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
