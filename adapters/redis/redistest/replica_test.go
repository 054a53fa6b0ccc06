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
