// Package redistest runs a throwaway redis-server process for tests: on a
// free 127.0.0.1 port, without persistence, killed by its PID when the test
// ends. It can kill, pause (SIGSTOP) and restart the server on the same port,
// so tests can cause a real outage. MustStartCluster starts several as a
// Redis Cluster.
//
// It needs the redis-server binary (Debian package redis-server, 7.x) on
// PATH. Without it, tests are skipped, unless the environment variable CI is
// set: a CI run must not pass by skipping. MustStartWaitAOF starts a server
// with Redis 7.2's WAITAOF instead, found as it says, under the same rule.
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/internal/testcert"
)

// startWithin bounds how long a server may take to accept connections.
const startWithin = 10 * time.Second

// Server is one redis-server process. Its methods are safe for concurrent
// use, though tests normally drive it from one goroutine.
type Server struct {
	// Port is the TCP port, kept across Kill and Restart.
	Port int

	bin       string
	dir       string
	persist   []string // persistence arguments, before args; nil: none
	args      []string
	clientTLS *tls.Config // nil: plain TCP
	cluster   bool        // a Redis Cluster node (see MustStartCluster)
	conf      string      // a Sentinel's config file (see MustStartSentinels)
	busPort   int         // its cluster bus port, probed with Port

	mu        sync.Mutex
	cmd       *exec.Cmd
	cmdExited <-chan error // receives when cmd has exited and been reaped
	paused    bool
}

// MustStart starts redis-server with its own arguments after ours (a later
// argument wins in redis-server), and stops it when tb ends.
func MustStart(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s := newServer(tb, args)
	s.mustStartFree(tb)
	return s
}

// MustStartTLS starts redis-server listening with TLS only, on a certificate
// for 127.0.0.1 signed by a fresh CA. It returns the CA pool a client needs.
func MustStartTLS(tb testing.TB, args ...string) (*Server, *x509.CertPool) {
	tb.Helper()
	s := newServer(tb, nil)
	serverTLS, clientTLS := testcert.New(tb)
	certFile, keyFile := testcert.MustWriteFiles(tb, serverTLS, s.dir)
	s.clientTLS = clientTLS
	s.args = append([]string{
		"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no",
	}, args...)
	s.mustStartFree(tb)
	return s, clientTLS.RootCAs
}

func newServer(tb testing.TB, args []string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "" {
			tb.Skip("redis-server not found on PATH (apt-get install -y redis-server); skipped outside CI")
		}
		tb.Fatalf("redis-server not found on PATH, and CI is set: install the redis-server package")
	}
	return newServerBin(tb, bin, nil, args)
}

func newServerBin(tb testing.TB, bin string, persist, args []string) *Server {
	tb.Helper()
	s := &Server{bin: bin, dir: tb.TempDir(), persist: persist, args: args}
	tb.Cleanup(s.stop)
	return s
}

// MustStartWaitAOF starts a server that has WAITAOF (Redis 7.2 or later),
// persisting every write to its append-only file (appendonly yes,
// appendfsync everysec; args may override them), as a replica must for
// WAITAOF to count it. MustStartReplica of it starts another such server.
//
// The server is the executable REDIS72_SERVER names, else the Valkey 8
// that scripts/redis72.sh unpacks into $NW_CACHE_DIR/redis72 (by default
// ~/.cache/notification-worker/redis72). Without it, the test is skipped,
// unless CI is set.
func MustStartWaitAOF(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s := newServerBin(tb, waitAOFBin(tb), waitAOFPersist, args)
	s.mustStartFree(tb)
	return s
}

// waitAOFPersist is the persistence of MustStartWaitAOF's servers.
var waitAOFPersist = []string{"--appendonly", "yes", "--appendfsync", "everysec"}

func waitAOFBin(tb testing.TB) string {
	tb.Helper()
	bin := os.Getenv("REDIS72_SERVER")
	if bin == "" {
		dir := os.Getenv("NW_CACHE_DIR")
		if dir == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				tb.Fatalf("redistest: no cache folder to find the WAITAOF server in: %v", err)
			}
			dir = filepath.Join(cache, "notification-worker")
		}
		bin = filepath.Join(dir, "redis72", "bin", "valkey-server")
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "" {
			tb.Skipf("no server with WAITAOF (%v): run scripts/redis72.sh, or set REDIS72_SERVER; skipped outside CI", err)
		}
		tb.Fatalf("no server with WAITAOF (%v), and CI is set: scripts/deps.sh runs scripts/redis72.sh", err)
	}
	return bin
}

// Dir is the server's working folder: its log, and with persistence its
// append-only files (appendonlydir/).
func (s *Server) Dir() string { return s.dir }

// MustAOFHold reports whether the append-only files of s (a server started
// with appendonly yes, such as MustStartWaitAOF's, or a replica of one)
// contain v, failing tb when s has none.
func (s *Server) MustAOFHold(tb testing.TB, v string) bool {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(s.dir, "appendonlydir", "*.aof"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no AOF files in %s: %v", s.dir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		if strings.Contains(string(b), v) {
			return true
		}
	}
	return false
}

// Addr is "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is "redis://127.0.0.1:<port>", or rediss:// for a TLS server.
func (s *Server) URL() string {
	if s.clientTLS != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// MustClient returns a client for the default user on database db, closed
// when tb ends: the test's own view of what is in Redis.
func (s *Server) MustClient(tb testing.TB, db int) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{s.Addr()},
		SelectDB:          db,
		TLSConfig:         s.clientTLS,
		DisableCache:      true,
		ForceSingleClient: true,
	})
	if err != nil {
		tb.Fatalf("redistest: client for %s: %v", s.Addr(), err)
	}
	tb.Cleanup(c.Close)
	return c
}

// CommandCalls is how many times the server behind c has run cmd
// (lower case, as INFO commandstats names it: "wait", "evalsha").
func CommandCalls(tb testing.TB, c rueidis.Client, cmd string) int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		tb.Fatalf("redistest: INFO commandstats: %v", err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, err := strconv.Atoi(v)
			if err != nil {
				tb.Fatalf("redistest: INFO commandstats: %q", line)
			}
			return n
		}
	}
	return 0
}

// MustFill writes n keys without a TTL of size bytes each, named
// "tenant:<i>", through c in one batch: another tenant's data, filling the
// server's memory. It fails tb on any refused write.
func MustFill(tb testing.TB, ctx context.Context, c rueidis.Client, n, size int) {
	tb.Helper()
	value := strings.Repeat("x", size)
	cmds := make(rueidis.Commands, 0, n)
	for i := range n {
		cmds = append(cmds, c.B().Set().Key("tenant:"+strconv.Itoa(i)).Value(value).Build())
	}
	for _, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			tb.Fatalf("redistest: co-tenant SET: %v", err)
		}
	}
}

// Kill kills the server (SIGKILL) and waits for it to exit: clients see their
// connections reset and new ones refused.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		tb.Fatalf("redistest: Kill: server not running")
	}
	s.killLocked()
}

// Pause stops the process (SIGSTOP): connections stay open and new ones are
// accepted by the kernel, but nothing is answered. Resume, Kill or the end of
// the test continues it.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	s.signal(tb, syscall.SIGSTOP, true)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.signal(tb, syscall.SIGCONT, false)
}

// Restart starts the server again on the same port after Kill, and waits
// until it accepts connections. The data is gone, unless the server
// persists (MustStartWaitAOF): then it loads its append-only file.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		tb.Fatalf("redistest: Restart: server still running (Kill it first)")
	}
	if err := s.startLocked(); err != nil {
		tb.Fatalf("redistest: restart on port %d: %v", s.Port, err)
	}
}

func (s *Server) signal(tb testing.TB, sig syscall.Signal, paused bool) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		tb.Fatalf("redistest: %v: server not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("redistest: %v to pid %d: %v", sig, s.cmd.Process.Pid, err)
	}
	s.paused = paused
}

// mustStartFree picks a free port and starts the server on it. Another
// process may take the port between our probe and redis-server's bind, so a
// few ports are tried.
func (s *Server) mustStartFree(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range 3 {
		if s.Port, err = freePort(); err != nil {
			continue
		}
		if s.cluster {
			// A cluster node also listens on its bus port: probe one
			// explicitly, since the default (port+10000) may be taken or
			// beyond 65535.
			if s.busPort, err = freePort(); err != nil {
				continue
			}
			if s.busPort == s.Port {
				err = fmt.Errorf("probed port %d twice", s.Port)
				continue
			}
		}
		if err = s.startLocked(); err == nil {
			return
		}
	}
	tb.Fatalf("redistest: start redis-server: %v", err)
}

func (s *Server) startLocked() error {
	// A primary starts a replica's full sync at once: by default Redis 7
	// waits 5 s (repl-diskless-sync-delay) for more replicas to share the
	// transfer, which every MustStartReplica, MustAddReplica and replica
	// following a new primary would otherwise sit out.
	args := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir, "--daemonize", "no",
		"--repl-diskless-sync-delay", "0"}
	if s.clientTLS != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.Port))
	} else {
		args = append(args, "--port", strconv.Itoa(s.Port))
	}
	if s.cluster {
		// The node's identity and view of the cluster live in nodes.conf,
		// in its own directory, so a Restart keeps them.
		args = append(args, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(s.busPort),
			// CLUSTER SLOTS lists a replica only once its replication
			// offset is above 0, and on an idle primary the offset moves
			// only with the primary's ping to its replicas, every 10 s
			// by default: every 1 s, MustAddReplica returns in about 1 s
			// instead of 8 to 10.
			"--repl-ping-replica-period", "1")
	}
	if s.conf != "" {
		// redis-server wants the config file first.
		args = append([]string{s.conf, "--sentinel"}, args...)
	}
	args = append(append(args, s.persist...), s.args...)
	logPath := filepath.Join(s.dir, "redis.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.cmd, s.cmdExited = cmd, exited
	if err := s.waitReady(exited); err != nil {
		s.killLocked()
		return fmt.Errorf("%w; log:\n%s", err, tail(logPath))
	}
	return nil
}

// waitReady pings until the server answers, the process exits, or
// startWithin passes.
func (s *Server) waitReady(exited <-chan error) error {
	deadline := time.Now().Add(startWithin)
	for {
		select {
		case err := <-exited:
			s.cmdExited = nil
			s.cmd = nil
			return fmt.Errorf("redis-server exited at start: %v", err)
		default:
		}
		err := Ping(s.Addr(), s.clientTLS)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering on %s within %v: %v", s.Addr(), startWithin, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ping sends PING on a fresh connection to the server at addr, over TLS
// with tlsConf when set, and returns nil once it answered PONG. A dial
// check, not a log line: accepting connections is not enough (a server
// answers LOADING while it reads its data), and after a restart the log
// still holds the first run's "ready" line.
func Ping(addr string, tlsConf *tls.Config) error {
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	var conn net.Conn
	var err error
	if tlsConf != nil {
		td := tls.Dialer{NetDialer: &d, Config: tlsConf}
		conn, err = td.DialContext(context.Background(), "tcp", addr)
	} else {
		conn, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// killLocked kills the process by its PID, continuing it first if paused
// (a stopped process still dies on SIGKILL, but this keeps the state plain),
// and waits until it has exited so the port is free for Restart.
func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	if s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		s.paused = false
	}
	_ = s.cmd.Process.Kill()
	if s.cmdExited != nil {
		select {
		case <-s.cmdExited:
		case <-time.After(startWithin):
		}
	}
	s.cmd, s.cmdExited = nil, nil
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
