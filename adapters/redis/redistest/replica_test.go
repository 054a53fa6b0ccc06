package redistest_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// TestLinkHoldsUnderSentinels: a replica that replicates through a Link
// stays on it while Sentinels watch its primary, so Hold still holds it
// back. A Sentinel repoints a replica whose primary address is not the one
// it monitors once it has known the replica for its failover-timeout, on
// its next INFO (every 10 s): the test watches for longer than both, then
// holds the link and writes.
func TestLinkHoldsUnderSentinels(t *testing.T) {
	primary := redistest.MustStart(t)
	replica, link := redistest.MustStartReplica(t, primary)
	redistest.MustStartSentinels(t, 3, "idem", primary, 1)
	_, linkPort, _ := net.SplitHostPort(link.Addr())

	rc := replica.MustClient(t, 0)
	for end := time.Now().Add(35 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := rc.Do(ctx, rc.B().Info().Section("replication").Build()).ToString()
		cancel()
		if err != nil {
			continue // the client dials again on the next call
		}
		if !strings.Contains(info, "master_port:"+linkPort+"\r\n") {
			t.Fatalf("the replica no longer replicates through its link (port %s):\n%s", linkPort, info)
		}
	}

	link.Hold()
	pc := primary.MustClient(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pc.Do(ctx, pc.B().Set().Key("held").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	acked, err := pc.Do(ctx, pc.B().Wait().Numreplicas(1).Timeout(500).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if acked != 0 {
		t.Errorf("WAIT 1 after Hold: %d replicas acknowledged the write, want 0", acked)
	}
}

// TestWaitAOFReplica: MustStartWaitAOF's server has WAITAOF, and a replica
// started of it counts for WAITAOF once it has fsynced a write to its
// append-only file; a replica started without one never does, though the
// write reaches it (which WAIT would count).
func TestWaitAOFReplica(t *testing.T) {
	primary := redistest.MustStartWaitAOF(t)
	redistest.MustStartReplica(t, primary)
	noAOF, _ := redistest.MustStartReplica(t, primary, "--appendonly", "no")
	pc, nc := primary.MustClient(t, 0), noAOF.MustClient(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// WAITAOF counts the replicas that have the writes of its own
	// connection: the SET and the WAITAOF go out together (rueidis sends a
	// DoMulti holding a blocking command on a connection of its own). Both
	// replicas are asked for: one answers, and the other makes the WAITAOF
	// run to its timeout, after which the count is final.
	res := pc.DoMulti(ctx, pc.B().Set().Key("k").Value("1").Build(),
		pc.B().Waitaof().Numlocal(1).Numreplicas(2).Timeout(2000).Build())
	if err := res[0].Error(); err != nil {
		t.Fatal(err)
	}
	ack, err := res[1].AsIntSlice()
	if err != nil {
		t.Fatalf("WAITAOF 1 2: %v", err)
	}
	if len(ack) != 2 || ack[0] != 1 || ack[1] != 1 {
		t.Fatalf("WAITAOF 1 2 after a SET, one replica with an AOF and one without: %v, want [1 1]", ack)
	}
	// The replica without an AOF has the write: WAIT would count it.
	res = pc.DoMulti(ctx, pc.B().Set().Key("k").Value("2").Build(), pc.B().Wait().Numreplicas(2).Timeout(5000).Build())
	if n, err := res[1].AsInt64(); err != nil || n != 2 {
		t.Fatalf("WAIT 2 after a SET: %d, %v; want both replicas", n, err)
	}
	if v, err := nc.Do(ctx, nc.B().Get().Key("k").Build()).ToString(); err != nil || v != "2" {
		t.Fatalf("GET on the replica without an AOF: %q, %v", v, err)
	}
}

// TestSentinelsFailOverAfterAStall: Sentinels starved of the CPU for a few
// seconds (a loaded machine: their timer did not run for over 2 s) still
// promote the replica when the primary dies right after: the stall must
// not cost them the 30 s of TILT mode after which the replica's link has
// been down too long for them to promote it.
func TestSentinelsFailOverAfterAStall(t *testing.T) {
	primary := redistest.MustStart(t)
	replica, link := redistest.MustStartReplica(t, primary)
	sentinels := redistest.MustStartSentinels(t, 3, "idem", primary, 1)

	for _, s := range sentinels.Nodes {
		s.Pause(t)
	}
	time.Sleep(3 * time.Second) // the stall: longer than TILT's 2 s trigger
	for _, s := range sentinels.Nodes {
		s.Resume(t)
	}
	sentinels.KillPrimary(t, primary)
	link.Cut()
	sentinels.MustWaitPrimary(t, replica, 60*time.Second)
}
