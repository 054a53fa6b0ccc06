package redis_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// TestCluster backs the package comment's "# Redis Cluster" section: a store
// given one node's URL works on a 3-node cluster, sending every command to
// the node that owns its key's slot. The subtests share one cluster (it takes
// about 2s to form); FollowsMoved changes its slot map, so it runs last.
func TestCluster(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	raw := c.MustClient(t)
	nodes := make([]rueidis.Client, len(c.Nodes))
	for i, s := range c.Nodes {
		nodes[i] = s.MustClient(t, 0)
	}

	t.Run("Contract", func(t *testing.T) {
		// Reading both formats: the claim's SET and the other key's GET go
		// to the nodes of two different slots in one DoMulti.
		cfg := redis.Config{URL: c.URL(), CompactPrefix: "contract:", KeyPrefix: "contract-r:", ReadBoth: true}
		storetest.Run(t, contractHarness(cfg, raw))
	})

	t.Run("ReadableRecordsHonoured", func(t *testing.T) {
		cfg := redis.Config{URL: c.URL(), CompactPrefix: "up:", KeyPrefix: "up-r:", ReadBoth: true}
		s, ctx := MustStore(t, cfg), testCtx(t)
		for i := range 30 {
			k := fmt.Sprintf("sms:%s-%d", t.Name(), i)
			MustSet(t, raw, cfg.OtherKey(k), "sent:1775121240000:~Zx9_k2ab:SM"+strconv.Itoa(i))
			if got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute); got.State != ports.AlreadySent || got.Receipt.ProviderID != "SM"+strconv.Itoa(i) {
				t.Fatalf("claim %d over a readable record: %+v, want already_sent", i, got)
			}
			if v, ok := MustGet(t, raw, cfg.Key(k)); ok {
				t.Fatalf("compact key %d left holding %q, want the claim released", i, v)
			}
		}
	})

	t.Run("KeysSpreadOverNodes", func(t *testing.T) {
		// The seed owns a third of the slots: a store that took it for a
		// standalone server would get MOVED for the rest. Every node must
		// end up with some of the keys, and Release (a Lua script by
		// EVALSHA, loaded on each node by EVAL on NOSCRIPT) must reach
		// them all too.
		const prefix = "spread:"
		s, ctx := MustStore(t, redis.Config{URL: c.URL(), CompactPrefix: prefix}), testCtx(t)
		mustSpread(t, c, nodes, s, ctx, prefix)
	})

	t.Run("OtherSeedWhenFirstIsDown", func(t *testing.T) {
		// "?addr=" adds seeds: the first one refusing connections is no
		// reason not to start.
		url := fmt.Sprintf("redis://%s?addr=%s", closedAddr(t), c.Nodes[1].Addr())
		const prefix = "seeds:"
		s, ctx := MustStore(t, redis.Config{URL: url, CompactPrefix: prefix}), testCtx(t)
		mustSpread(t, c, nodes, s, ctx, prefix)
	})

	t.Run("DatabaseNotZeroRefused", func(t *testing.T) {
		s, err := redis.New(redis.Config{URL: c.URL() + "/3"})
		if err == nil {
			s.Close()
			t.Fatalf("New with db 3 on a cluster: no error")
		}
		if !strings.Contains(err.Error(), "SELECT is not allowed in cluster mode") {
			t.Fatalf("New with db 3: %v, want Redis refusing SELECT", err)
		}
		MustStore(t, redis.Config{URL: c.URL() + "/0"}) // db 0 named explicitly is fine
	})

	// The package comment's standalone ACL; ACLs are per node, so every
	// node gets the user.
	standaloneACL := []string{"~acl:*", "+@connection", "+select", "+set", "+get", "+del", "+evalsha", "+eval", "+ping", "+info"}
	setUser := func(t *testing.T, name string, rules ...string) string {
		t.Helper()
		for i, node := range nodes {
			cmd := node.B().Arbitrary("ACL", "SETUSER", name).Args(slices.Concat([]string{"reset", "on", ">s3cret-pw"}, rules)...).Build()
			if err := node.Do(testCtx(t), cmd).Error(); err != nil {
				t.Fatalf("ACL SETUSER on node %d: %v", i, err)
			}
		}
		return fmt.Sprintf("redis://%s:s3cret-pw@%s", name, c.Nodes[0].Addr())
	}

	t.Run("ACL", func(t *testing.T) {
		// The documented cluster ACL: the standalone one plus the right to
		// read the slot map (CLUSTER SLOTS below Redis 8, SHARDS from 8).
		url := setUser(t, "worker", slices.Concat(standaloneACL, []string{"+cluster|slots", "+cluster|shards"})...)
		s, ctx := MustStore(t, redis.Config{URL: url, CompactPrefix: "acl:ok:"}), testCtx(t)
		mustSpread(t, c, nodes, s, ctx, "acl:ok:")
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})

	t.Run("ACLWithoutSlotMapFails", func(t *testing.T) {
		// Refused CLUSTER SLOTS, rueidis falls back to a single-node client
		// on the seed, which cannot follow MOVED: every key outside the
		// seed's slots fails. New's self-check claims keys spread over all
		// the slots, so it must refuse to start every time, not only when
		// a random key happens to land outside the seed's slots, and say
		// why. (With the rights, New succeeds: see ACL above.)
		url := setUser(t, "noslots", standaloneACL...)
		for i := range 10 {
			s, err := redis.New(redis.Config{URL: url, CompactPrefix: "acl:noslots:"})
			if err == nil {
				s.Close()
				t.Fatalf("New %d without +cluster|slots: no error", i)
			}
			msg := err.Error()
			for _, want := range []string{"self-check", "MOVED", "the ACL must allow CLUSTER SLOTS and CLUSTER SHARDS"} {
				if !strings.Contains(msg, want) {
					t.Fatalf("New %d without +cluster|slots: %v, want it to say %q", i, err, want)
				}
			}
			if strings.Contains(msg, "s3cret-pw") {
				t.Fatalf("New %d: error %q carries the password", i, err)
			}
			if i == 0 {
				t.Logf("New: %v", err)
			}
		}
		// The self-check keys the seed accepted were released.
		if got := countKeys(t, nodes[0], "acl:noslots:*"); got != 0 {
			t.Fatalf("seed holds %d keys after the failed self-checks, want 0", got)
		}
	})

	t.Run("FollowsMoved", func(t *testing.T) {
		// A slot moves from node 0 to node 1 after the store has read the
		// slot map. The store's next command for that slot goes to node 0,
		// which answers MOVED; rueidis must send it on to node 1.
		const prefix = "moved:"
		s, ctx := MustStore(t, redis.Config{URL: c.URL(), CompactPrefix: prefix}), testCtx(t)
		src, dst := nodes[0], nodes[1]
		k := mustMoveEmptySlot(t, c, prefix, 0, 1)
		moved := movedCount(t, src)

		if got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute); got.State != ports.Claimed {
			t.Fatalf("Claim in the moved slot: state %v, want claimed", got.State)
		}
		if v, ok := MustGet(t, dst, redis.Config{CompactPrefix: prefix}.Key(k)); !ok || !strings.HasPrefix(v, "pending:tok.") {
			t.Fatalf("node 1 holds %q (present %v), want pending:tok", v, ok)
		}
		if got := movedCount(t, src); got <= moved {
			t.Fatalf("node 0 sent no MOVED (%d before the claim, %d after): the store did not use its old slot map", moved, got)
		}
		if err := s.Release(ctx, k, "tok"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if v, ok := MustGet(t, dst, redis.Config{CompactPrefix: prefix}.Key(k)); ok {
			t.Fatalf("node 1 still holds %q after Release", v)
		}
	})
}

// mustMoveEmptySlot finds a key, as a store with CompactPrefix prefix
// names it, in an empty slot of c's node from, hands that slot over to
// node to, and returns the key. Only an empty slot can be handed over
// without MIGRATE.
func mustMoveEmptySlot(t *testing.T, c *redistest.Cluster, prefix string, from, to int) string {
	t.Helper()
	ctx := testCtx(t)
	src, dst := c.Nodes[from].MustClient(t, 0), c.Nodes[to].MustClient(t, 0)
	lo, hi := c.Slots(from)
	var k string
	var slot int64
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatalf("no key found in an empty slot of node %d", from)
		}
		k = uniqueKey(t)
		var err error
		if slot, err = src.Do(ctx, src.B().ClusterKeyslot().Key(redis.Config{CompactPrefix: prefix}.Key(k)).Build()).AsInt64(); err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if slot < int64(lo) || slot > int64(hi) {
			continue
		}
		n, err := src.Do(ctx, src.B().ClusterCountkeysinslot().Slot(slot).Build()).AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER COUNTKEYSINSLOT: %v", err)
		}
		if n == 0 {
			break
		}
	}
	srcID, dstID := c.MustNodeID(t, from), c.MustNodeID(t, to)
	sl := strconv.FormatInt(slot, 10)
	for _, step := range []struct {
		node rueidis.Client
		args []string
	}{
		{dst, []string{sl, "IMPORTING", srcID}},
		{src, []string{sl, "MIGRATING", dstID}},
		{dst, []string{sl, "NODE", dstID}}, // bumps the destination's epoch
		{src, []string{sl, "NODE", dstID}},
	} {
		if err := step.node.Do(ctx, step.node.B().Arbitrary("CLUSTER", "SETSLOT").Args(step.args...).Build()).Error(); err != nil {
			t.Fatalf("CLUSTER SETSLOT %v: %v", step.args, err)
		}
	}
	return k
}

// mustSpread checks every node holds at least one of the store's marker
// keys (so a reset of any primary loses one), claims 300 keys through s and
// checks every node holds some of them and the nodes hold all of them
// between them, then releases them and checks they are gone from every
// node.
func mustSpread(t *testing.T, c *redistest.Cluster, nodes []rueidis.Client, s *redis.Store, ctx context.Context, prefix string) {
	t.Helper()
	markers, all := make([]int, len(nodes)), 0
	for i, node := range nodes {
		markers[i] = countKeys(t, node, prefix+"*")
		if markers[i] == 0 {
			t.Errorf("node %d (%s) holds none of the store's marker keys", i, c.Nodes[i].Addr())
		}
		all += markers[i]
	}
	if want := len(redis.Config{CompactPrefix: prefix}.MarkerKeys()); all != want {
		t.Fatalf("nodes hold %d keys before any claim, want the %d marker keys", all, want)
	}
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uniqueKey(t)
		if got := storetest.MustClaim(t, s, ctx, keys[i], "tok", time.Minute); got.State != ports.Claimed {
			t.Fatalf("Claim %d: state %v, want claimed", i, got.State)
		}
	}
	total := 0
	for i, node := range nodes {
		got := countKeys(t, node, prefix+"*") - markers[i]
		lo, hi := c.Slots(i)
		t.Logf("node %d (%s, slots %d-%d): %d of %d keys", i, c.Nodes[i].Addr(), lo, hi, got, n)
		if got == 0 {
			t.Errorf("node %d (%s) holds none of the %d keys", i, c.Nodes[i].Addr(), n)
		}
		total += got
	}
	if total != n {
		t.Fatalf("nodes hold %d keys in all, want %d", total, n)
	}
	for _, k := range keys {
		if err := s.Release(ctx, k, "tok"); err != nil {
			t.Fatalf("Release %s: %v", k, err)
		}
	}
	for i, node := range nodes {
		if got := countKeys(t, node, prefix+"*") - markers[i]; got != 0 {
			t.Errorf("node %d still holds %d keys after Release", i, got)
		}
	}
}

// countKeys counts one node's keys matching pattern.
func countKeys(tb testing.TB, node rueidis.Client, pattern string) int {
	tb.Helper()
	ctx := testCtx(tb)
	n, cursor := 0, uint64(0)
	for {
		e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			tb.Fatalf("SCAN: %v", err)
		}
		n += len(e.Elements)
		if cursor = e.Cursor; cursor == 0 {
			return n
		}
	}
}

// movedCount is how many MOVED replies the node has sent (INFO errorstats).
func movedCount(tb testing.TB, node rueidis.Client) int {
	tb.Helper()
	info, err := node.Do(testCtx(tb), node.B().Info().Section("errorstats").Build()).ToString()
	if err != nil {
		tb.Fatalf("INFO errorstats: %v", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_MOVED:count="); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				tb.Fatalf("INFO errorstats: %q", line)
			}
			return n
		}
	}
	return 0
}

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
