package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/internal/wait"
)

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = 16384

// Cluster is a Redis Cluster of primaries without replicas, each node a
// Server of its own (its own process, directory and ports).
type Cluster struct {
	// Nodes[i] serves the i-th of len(Nodes) equal ranges of the hash slots
	// (see Slots).
	Nodes []*Server
}

// MustStartCluster starts n redis-server processes in cluster mode, splits
// the 16384 hash slots between them (CLUSTER ADDSLOTSRANGE), joins them
// (CLUSTER MEET) and waits until every node reports cluster_state:ok and
// the full slot map. Extra args go to every node, as in MustStart. The nodes
// are stopped when tb ends. It needs redis-server >= 7.0 (ADDSLOTSRANGE,
// --cluster-port) and skips like MustStart when there is none.
func MustStartCluster(tb testing.TB, n int, args ...string) *Cluster {
	tb.Helper()
	return startCluster(tb, n, func(args []string) *Server { return newServer(tb, args) }, args)
}

// MustStartClusterWaitAOF is MustStartCluster with the server
// MustStartWaitAOF runs, and its persistence: a Cluster whose nodes have
// WAITAOF. MustAddReplica adds replicas of the same kind.
func MustStartClusterWaitAOF(tb testing.TB, n int, args ...string) *Cluster {
	tb.Helper()
	bin := waitAOFBin(tb)
	return startCluster(tb, n, func(args []string) *Server { return newServerBin(tb, bin, waitAOFPersist, args) }, args)
}

func startCluster(tb testing.TB, n int, newNode func(args []string) *Server, args []string) *Cluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("redistest: MustStartCluster(%d): want at least one node", n)
	}
	// Redis also uses the node timeout to expire handshakes (two nodes
	// sometimes meet twice while the cluster forms) and as how long a
	// primary that saw itself in a minority waits before serving (capped at
	// 5s). At the default 15s, one start in five took 3 to 8s instead of
	// about 2s (Redis holds a new primary's writes for 2s); at 1s, none of
	// 15 did. The cost, a node silent for 1s being marked as failing, is
	// moot while no test pauses a cluster node.
	args = append([]string{"--cluster-node-timeout", "1000"}, args...)
	c := &Cluster{}
	for range n {
		s := newNode(args)
		s.cluster = true
		s.mustStartFree(tb)
		c.Nodes = append(c.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	clients := make([]rueidis.Client, n)
	for i, s := range c.Nodes {
		clients[i] = s.MustClient(tb, 0)
		lo, hi := c.Slots(i)
		cmd := clients[i].B().Arbitrary("CLUSTER", "ADDSLOTSRANGE").Args(strconv.Itoa(lo), strconv.Itoa(hi)).Build()
		if err := clients[i].Do(ctx, cmd).Error(); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, s.Addr(), err)
		}
	}
	for _, s := range c.Nodes[1:] {
		// The bus port is not port+10000, so MEET names it.
		cmd := clients[0].B().Arbitrary("CLUSTER", "MEET").Args("127.0.0.1", strconv.Itoa(s.Port), strconv.Itoa(s.busPort)).Build()
		if err := clients[0].Do(ctx, cmd).Error(); err != nil {
			tb.Fatalf("redistest: CLUSTER MEET %s from %s: %v", s.Addr(), c.Nodes[0].Addr(), err)
		}
	}
	wait.For(tb, startWithin, fmt.Sprintf("redistest: cluster of %d settled", n), func() error { return c.settled(ctx, clients) })
	return c
}

// Slots returns the first and last hash slot MustStartCluster gave Nodes[i].
func (c *Cluster) Slots(i int) (lo, hi int) {
	n := len(c.Nodes)
	return i * slotCount / n, (i+1)*slotCount/n - 1
}

// URL is the first node's URL: a seed, from which a cluster-aware client
// learns the others.
func (c *Cluster) URL() string { return c.Nodes[0].URL() }

// MustClient returns a cluster-aware client seeded with every node, closed
// when tb ends: the test's own view of the whole cluster. For one node's
// contents, use c.Nodes[i].MustClient.
func (c *Cluster) MustClient(tb testing.TB) rueidis.Client {
	tb.Helper()
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		tb.Fatalf("redistest: cluster client for %v: %v", addrs, err)
	}
	tb.Cleanup(cl.Close)
	return cl
}

// MustNodeID returns Nodes[i]'s cluster node id (CLUSTER MYID).
func (c *Cluster) MustNodeID(tb testing.TB, i int) string {
	tb.Helper()
	cl := c.Nodes[i].MustClient(tb, 0)
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	id, err := cl.Do(ctx, cl.B().ClusterMyid().Build()).ToString()
	if err != nil {
		tb.Fatalf("redistest: CLUSTER MYID on %s: %v", c.Nodes[i].Addr(), err)
	}
	return id
}

// settled returns nil once every node reports cluster_state:ok, knows every
// other node, and lists in CLUSTER SLOTS exactly the ranges MustStartCluster
// assigned, each at its node's address: what a client reading the topology
// from any one node must see.
func (c *Cluster) settled(ctx context.Context, clients []rueidis.Client) error {
	want := make(map[string]string, len(c.Nodes)) // "lo-hi" -> addr
	for i, s := range c.Nodes {
		lo, hi := c.Slots(i)
		want[fmt.Sprintf("%d-%d", lo, hi)] = s.Addr()
	}
	for i, cl := range clients {
		addr := c.Nodes[i].Addr()
		info, err := cl.Do(ctx, cl.B().ClusterInfo().Build()).ToString()
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", addr, err)
		}
		for _, line := range []string{"cluster_state:ok", "cluster_known_nodes:" + strconv.Itoa(len(c.Nodes))} {
			if !strings.Contains(info, line+"\r\n") {
				return fmt.Errorf("CLUSTER INFO on %s lacks %s:\n%s", addr, line, info)
			}
		}
		ranges, err := cl.Do(ctx, cl.B().ClusterSlots().Build()).ToArray()
		if err != nil {
			return fmt.Errorf("CLUSTER SLOTS on %s: %w", addr, err)
		}
		got := make(map[string]string, len(ranges))
		for _, r := range ranges {
			// [lo, hi, [ip, port, id, ...], replicas...]
			f, err := r.ToArray()
			if err != nil || len(f) < 3 {
				return fmt.Errorf("CLUSTER SLOTS on %s: odd entry %v (%v)", addr, r, err)
			}
			lo, err1 := f[0].AsInt64()
			hi, err2 := f[1].AsInt64()
			node, err3 := f[2].ToArray()
			if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 {
				return fmt.Errorf("CLUSTER SLOTS on %s: odd entry %v", addr, r)
			}
			ip, err1 := node[0].ToString()
			port, err2 := node[1].AsInt64()
			if err1 != nil || err2 != nil {
				return fmt.Errorf("CLUSTER SLOTS on %s: odd node %v", addr, node)
			}
			got[fmt.Sprintf("%d-%d", lo, hi)] = net.JoinHostPort(ip, strconv.FormatInt(port, 10))
		}
		if len(got) != len(want) {
			return fmt.Errorf("CLUSTER SLOTS on %s: %v, want %v", addr, got, want)
		}
		for r, a := range want {
			if got[r] != a {
				return fmt.Errorf("CLUSTER SLOTS on %s: %v, want %v", addr, got, want)
			}
		}
	}
	return nil
}

// MustAddReplica starts a cluster node, joins it to c as a replica of
// Nodes[i] (CLUSTER MEET, CLUSTER REPLICATE) and waits until it is in sync
// and every node lists it in CLUSTER SLOTS, where a client learns of it.
// Extra args go to the replica, as in MustStart. It runs Nodes[i]'s server,
// with its persistence. It is stopped when tb ends.
func (c *Cluster) MustAddReplica(tb testing.TB, i int, args ...string) *Server {
	tb.Helper()
	r := newServerBin(tb, c.Nodes[i].bin, c.Nodes[i].persist, append([]string{"--cluster-node-timeout", "1000"}, args...))
	r.cluster = true
	r.mustStartFree(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*startWithin)
	defer cancel()
	rc := r.MustClient(tb, 0)
	primary := c.Nodes[i]
	meet := rc.B().Arbitrary("CLUSTER", "MEET").Args("127.0.0.1", strconv.Itoa(primary.Port), strconv.Itoa(primary.busPort)).Build()
	if err := rc.Do(ctx, meet).Error(); err != nil {
		tb.Fatalf("redistest: CLUSTER MEET %s from %s: %v", primary.Addr(), r.Addr(), err)
	}
	id := c.MustNodeID(tb, i)
	// The replica must know the primary before it can replicate it.
	wait.For(tb, 3*startWithin, fmt.Sprintf("redistest: CLUSTER REPLICATE %s on %s", id, r.Addr()), func() error {
		return rc.Do(ctx, rc.B().Arbitrary("CLUSTER", "REPLICATE").Args(id).Build()).Error()
	})
	inSync := r.replicationSays(tb, "master_link_status:up")
	wait.For(tb, 3*startWithin, fmt.Sprintf("redistest: replica %s of %s in sync and listed", r.Addr(), primary.Addr()), func() error {
		if err := inSync(); err != nil {
			return err
		}
		for _, n := range c.Nodes {
			nc := n.MustClient(tb, 0)
			slots, err := nc.Do(ctx, nc.B().ClusterSlots().Build()).ToAny()
			if err == nil && !strings.Contains(fmt.Sprint(slots), strconv.Itoa(r.Port)) {
				err = fmt.Errorf("not in CLUSTER SLOTS on %s", n.Addr())
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	return r
}

// MustWaitClusterPrimary waits until r is a primary and every node in nodes
// reports cluster_state:ok.
func MustWaitClusterPrimary(tb testing.TB, r *Server, nodes []*Server, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	wait.For(tb, within, "redistest: "+r.Addr()+" a primary", r.replicationSays(tb, "role:master"))
	for _, n := range append([]*Server{r}, nodes...) {
		nc := n.MustClient(tb, 0)
		wait.For(tb, within, "redistest: cluster state ok on "+n.Addr(), func() error {
			info, err := nc.Do(ctx, nc.B().ClusterInfo().Build()).ToString()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = errors.New("cluster_state not ok")
			}
			return err
		})
	}
}
