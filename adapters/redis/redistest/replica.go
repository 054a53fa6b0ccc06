package redistest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/internal/wait"
)

// Link is a TCP relay between a replica and its primary, so a test can hold
// replication back: while held, what the primary sends is kept in the
// relay, where the replica does not see it; Cut drops it for good, as a
// primary's death would. (Stopping the replica process would not do: the
// kernel keeps what the primary wrote in the replica's socket, and a
// resumed replica reads it even after the primary died.)
type Link struct {
	ln      net.Listener
	primary string

	mu    sync.Mutex
	held  bool
	cut   bool
	conns []net.Conn
	wake  *sync.Cond
}

// Addr is where the replica connects: "127.0.0.1:<port>".
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Hold stops passing the primary's bytes on to the replica.
func (l *Link) Hold() { l.mu.Lock(); l.held = true; l.mu.Unlock() }

// Release passes on what was held, and what comes next.
func (l *Link) Release() {
	l.mu.Lock()
	l.held = false
	l.wake.Broadcast()
	l.mu.Unlock()
}

// Cut drops what was held and closes the link for good: the replica never
// sees those bytes, and cannot reconnect through it.
func (l *Link) Cut() {
	l.mu.Lock()
	l.cut = true
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.wake.Broadcast()
	l.mu.Unlock()
	_ = l.ln.Close()
}

func newLink(tb testing.TB, primary string) *Link {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: link listen: %v", err)
	}
	l := &Link{ln: ln, primary: primary}
	l.wake = sync.NewCond(&l.mu)
	tb.Cleanup(l.Cut)
	go l.accept()
	return l
}

func (l *Link) accept() {
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.primary)
		l.mu.Lock()
		if err != nil || l.cut {
			l.mu.Unlock()
			_ = down.Close()
			if up != nil {
				_ = up.Close()
			}
			continue
		}
		l.conns = append(l.conns, down, up)
		l.mu.Unlock()
		go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
		go l.relay(down, up)
	}
}

// relay copies the primary's bytes (from up) to the replica (down), keeping
// them while the link is held.
func (l *Link) relay(down, up net.Conn) {
	defer down.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		l.mu.Lock()
		for l.held && !l.cut {
			l.wake.Wait()
		}
		cut := l.cut
		l.mu.Unlock()
		if cut {
			return
		}
		if n > 0 {
			if _, werr := down.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// MustStartReplica starts a server replicating primary through a Link, and
// waits until the replica is in sync (master_link_status:up). The replica
// runs primary's server, with its persistence (see MustStartWaitAOF).
func MustStartReplica(tb testing.TB, primary *Server, args ...string) (*Server, *Link) {
	tb.Helper()
	l := newLink(tb, primary.Addr())
	host, port, _ := net.SplitHostPort(l.Addr())
	r := newServerBin(tb, primary.bin, primary.persist, append([]string{"--replicaof", host, port}, args...))
	r.mustStartFree(tb)
	wait.For(tb, startWithin, fmt.Sprintf("redistest: replica %s of %s in sync", r.Addr(), primary.Addr()), r.replicationSays(tb, "master_link_status:up"))
	return r, l
}

// replicationSays is a condition: s's INFO replication holds line
// ("master_link_status:up", "role:master").
func (s *Server) replicationSays(tb testing.TB, line string) func() error {
	c := s.MustClient(tb, 0)
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), startWithin)
		defer cancel()
		info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
		if err == nil && !strings.Contains(info, line) {
			return fmt.Errorf("INFO replication lacks %s:\n%s", line, info)
		}
		return err
	}
}

// Sentinels are Redis Sentinel processes watching one master set.
type Sentinels struct {
	Nodes  []*Server
	Master string
}

// MustStartSentinels starts n Sentinels (redis-server --sentinel) watching
// primary as master set master, with a quorum of n/2+1 and a primary
// declared down after 1 s of silence, and waits until each knows the
// others and replicas replicas of primary.
//
// A Sentinel whose timer did not run for 2 s (a loaded machine starves
// it, or its config file's fsync stalls) takes it for a clock jump and
// enters TILT mode: for 30 s it neither marks the primary down nor fails
// over. The primary then went down for it 30 s after its death, while the
// replica's link went down at the death; and a Sentinel never promotes a
// replica whose link went down more than 10 down-after periods (10 s)
// before the primary went down for it: no failover came. The Sentinels here are told to
// enter TILT only for a timer late by an hour (SENTINEL DEBUG
// tilt-trigger): a test's clock does not jump.
//
// Until KillPrimary, the Sentinels leave replicas where they are: a
// Sentinel repoints a replica whose primary address is not the one it
// monitors (a replica behind a Link) straight at the primary once it has
// known the replica for its failover-timeout, after which Hold would no
// longer hold that replica back. So they start with a failover-timeout
// longer than any test, and KillPrimary sets the one a failover runs with.
func MustStartSentinels(tb testing.TB, n int, master string, primary *Server, replicas int) *Sentinels {
	tb.Helper()
	ss := &Sentinels{Master: master}
	for range n {
		s := newServer(tb, nil)
		s.conf = filepath.Join(s.dir, "sentinel.conf")
		conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s %[4]d\n", master, primary.Port, n/2+1, idleFailoverTimeout.Milliseconds())
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			tb.Fatalf("redistest: sentinel config: %v", err)
		}
		s.mustStartFree(tb)
		ss.Nodes = append(ss.Nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*startWithin)
	defer cancel()
	for _, s := range ss.Nodes {
		c := s.MustClient(tb, 0)
		err := c.Do(ctx, c.B().Arbitrary("SENTINEL", "DEBUG").Args("tilt-trigger", strconv.FormatInt(tiltTrigger.Milliseconds(), 10)).Build()).Error()
		if err != nil {
			tb.Fatalf("redistest: sentinel %s: set tilt-trigger: %v", s.Addr(), err)
		}
	}
	for _, s := range ss.Nodes {
		c := s.MustClient(tb, 0)
		wait.For(tb, 3*startWithin, "redistest: sentinel "+s.Addr()+" knows its peers and replicas", func() (bool, string) {
			peers, err1 := c.Do(ctx, c.B().Arbitrary("SENTINEL", "SENTINELS").Args(master).Build()).ToArray()
			reps, err2 := c.Do(ctx, c.B().Arbitrary("SENTINEL", "REPLICAS").Args(master).Build()).ToArray()
			return err1 == nil && err2 == nil && len(peers) == n-1 && len(reps) == replicas,
				fmt.Sprintf("knows %d of %d peers and %d of %d replicas (%v, %v)", len(peers), n-1, len(reps), replicas, err1, err2)
		})
	}
	return ss
}

const (
	// idleFailoverTimeout is the Sentinels' failover-timeout until
	// KillPrimary: longer than any test, so no replica is repointed.
	idleFailoverTimeout = time.Hour
	// failoverTimeout is the one a failover runs with: it bounds each of
	// its steps, and a failed election is retried after twice as long.
	failoverTimeout = 10 * time.Second
	// tiltTrigger is how long a Sentinel's timer may go without running
	// before it enters TILT mode (default 2 s). See MustStartSentinels.
	tiltTrigger = time.Hour
)

// KillPrimary kills primary (SIGKILL) and gives the Sentinels the
// failover-timeout a failover runs with (SENTINEL SET). A replica they
// repoint at the dead primary from then on follows nothing, as a replica
// behind a cut Link does.
func (ss *Sentinels) KillPrimary(tb testing.TB, primary *Server) {
	tb.Helper()
	primary.Kill(tb)
	for _, s := range ss.Nodes {
		c := s.MustClient(tb, 0)
		ctx, cancel := context.WithTimeout(context.Background(), startWithin)
		err := c.Do(ctx, c.B().Arbitrary("SENTINEL", "SET").Args(ss.Master, "failover-timeout", strconv.FormatInt(failoverTimeout.Milliseconds(), 10)).Build()).Error()
		cancel()
		if err != nil {
			tb.Fatalf("redistest: sentinel %s: set failover-timeout: %v", s.Addr(), err)
		}
	}
}

// logs is the end of each Sentinel's log, for a failure message: what
// they saw and decided (+sdown, +odown, elections, aborted failovers).
func (ss *Sentinels) logs() string {
	var b strings.Builder
	for _, s := range ss.Nodes {
		fmt.Fprintf(&b, "\nsentinel %s log:\n%s", s.Addr(), tail(filepath.Join(s.dir, "redis.log")))
	}
	return b.String()
}

// Addrs are the Sentinels' "127.0.0.1:<port>" addresses.
func (ss *Sentinels) Addrs() []string {
	a := make([]string, len(ss.Nodes))
	for i, s := range ss.Nodes {
		a[i] = s.Addr()
	}
	return a
}

// MustWaitPrimary waits until every Sentinel names want as the master
// set's primary, and want says it is one (role:master).
func (ss *Sentinels) MustWaitPrimary(tb testing.TB, want *Server, within time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	agreed := false
	defer func() {
		if !agreed { // what they saw and decided, after wait.For's failure
			tb.Logf("redistest: the Sentinels' logs:%s", ss.logs())
		}
	}()
	for _, s := range ss.Nodes {
		c := s.MustClient(tb, 0)
		wait.For(tb, within, fmt.Sprintf("redistest: sentinel %s names %s as %s's primary", s.Addr(), want.Addr(), ss.Master), func() (bool, string) {
			addr, err := c.Do(ctx, c.B().SentinelGetMasterAddrByName().Master(ss.Master).Build()).AsStrSlice()
			return err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(want.Port), fmt.Sprintf("names %v (%v)", addr, err)
		})
	}
	agreed = true
	wait.For(tb, within, "redistest: "+want.Addr()+" a primary", want.replicationSays(tb, "role:master"))
}
