package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/ports"
)

// ErrNotReplicated is wrapped by Claim and Record when Config.MinReplicas
// replicas did not acknowledge the write within the call's budget (or the
// acknowledgement itself failed). The write may be on the primary, and may
// even reach the replicas later: the store cannot tell, so it does not
// report success. For a claim it is an unknown outcome, not a claim: the
// caller must not send on it (its failure mode applies, as to any store
// error); a takeover's error comes with the lease taken over (see
// Store.Claim). For a record it means the record is not known to survive a
// failover: the caller keeps it owed and writes it again.
var ErrNotReplicated = errors.New("redis: write not acknowledged by enough replicas")

// ErrNoWaitAOF is wrapped by New when Config.WaitAOF is set and a server
// does not know WAITAOF (Redis before 7.2).
var ErrNoWaitAOF = errors.New("redis: the server has no WAITAOF (needs Redis >= 7.2)")

// ErrAckRefused is wrapped by New when replicas must acknowledge writes
// (Config.MinReplicas above 0, or AutoMinReplicas beside a replica) and a
// server refuses the user WAIT or WAITAOF (NOPERM: its ACL): every claim
// and record would fail.
var ErrAckRefused = errors.New("redis: the ACL refuses the acknowledgement command")

// waitReplyShare is the part of a call's remaining budget the server may
// take to answer a WAIT, and serverTick how late it may answer past the
// WAIT's timeout: Redis times blocked commands out from its event loop,
// which with the default hz 10 wakes every 100 ms (WAIT 1 150 against a
// primary without replicas answers after about 210 ms on Redis 7.0). The
// WAIT's own timeout is what is left after both, so that a WAIT that falls
// short is answered, with the count the server gave, before the caller's
// deadline.
const (
	waitReplyShare = 0.75
	serverTick     = 100 * time.Millisecond
)

// AutoMinReplicas, as Config.MinReplicas, has New choose the count from
// what the server reports when it starts: 1 when every primary the store
// writes to has a connected replica (INFO replication, connected_slaves),
// else 0. New logs the choice (idempotency_replicas). It is what an unset
// IDEMPOTENCY_MIN_REPLICAS means.
const AutoMinReplicas = -1

// MinReplicasSetting is IDEMPOTENCY_MIN_REPLICAS as it reads in c: "unset"
// for AutoMinReplicas, else the count. For logs and errors.
func (c Config) MinReplicasSetting() string {
	if c.MinReplicas == AutoMinReplicas {
		return "unset"
	}
	return strconv.Itoa(c.MinReplicas)
}

// minReplicas reads IDEMPOTENCY_MIN_REPLICAS: AutoMinReplicas when unset.
func minReplicas(s ports.Settings) int {
	if !s.Set("IDEMPOTENCY_MIN_REPLICAS") {
		return AutoMinReplicas
	}
	return s.Int("IDEMPOTENCY_MIN_REPLICAS", 0, 100)
}

// acked sends write, then reads, and with Config.MinReplicas > 0 the
// replicas' acknowledgement of write (a WAIT, and a WAITAOF with
// Config.WaitAOF), and returns the answers to write and reads, in that
// order, and the acknowledgement's outcome: nil when MinReplicas is 0 or
// enough replicas acknowledged, else an error wrapping ErrNotReplicated.
// The caller judges the acknowledgement only when its write was applied.
// reads must not write. ctx must have a deadline: the call's budget.
//
// WAIT counts the replicas that acknowledged every write its connection
// made before it, and only those: a write on another connection, or on an
// earlier connection that a reconnect replaced, is not covered, and a
// WAIT on a connection that wrote nothing answers at once with every
// replica. So a write and the WAIT that acknowledges it go out in one
// DoMulti, which rueidis writes in order on one connection (a DoMulti
// holding a blocking command, as WAIT is, on a pooled connection of its
// own, never on the shared pipeline), and reports a broken connection as
// an error for every command after the break, WAIT included: nothing
// resends part of it elsewhere (WAIT is not retryable, so neither is a
// DoMulti holding it; rueidis' ConnLifetime, which would resend the rest
// of one on a new connection, is never set).
//
// Concurrent calls share their WAIT (a group commit, see ackGroup): the
// writes of every call that came while the previous batch was out go in
// one DoMulti, followed by one WAIT, whose answer is each call's
// acknowledgement. On Redis Cluster a batch would span nodes, and a
// DoMulti there sends each command to its slot's node (following a MOVED
// for a write alone, while the WAIT stays behind): each write goes alone
// with its WAIT on a dedicated connection to the node owning its slot,
// where a MOVED is an error, not followed; the reads, whose keys may be in
// other slots (a dedicated connection refuses them: rueidis panics), go out
// at the same time on the shared pipeline.
func (s *Store) acked(ctx context.Context, write rueidis.Completed, reads ...rueidis.Completed) ([]rueidis.RedisResult, error) {
	if s.cfg.MinReplicas == 0 {
		if len(reads) == 0 {
			return []rueidis.RedisResult{s.client.Do(ctx, write)}, nil
		}
		return s.client.DoMulti(ctx, append(rueidis.Commands{write}, reads...)...), nil
	}
	if s.client.Mode() != rueidis.ClientModeCluster {
		return s.commit(ctx, append(rueidis.Commands{write}, reads...))
	}
	var rr []rueidis.RedisResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		if len(reads) > 0 {
			rr = s.client.DoMulti(ctx, reads...)
		}
	}()
	res, ackErr := s.acknowledge(ctx, rueidis.Commands{write})
	<-done
	return append(res, rr...), ackErr
}

// acknowledge sends cmds, then a WAIT for Config.MinReplicas, in one
// DoMulti, and with Config.WaitAOF, once the WAIT counted enough replicas,
// a WAITAOF on the same connection; it returns the answers to cmds and the
// acknowledgement's outcome, as acked does. On Redis Cluster every write in
// cmds must be in one slot.
//
// A replica tells the primary how far it has fsynced its AOF when the
// primary asks (a WAIT or WAITAOF that blocks makes it ask at once), and
// otherwise once a second. Asked at once, a replica has read the write but
// not yet fsynced it, so a WAITAOF on its own waited for the next report,
// up to a second, on a replica that fsyncs every write within
// milliseconds (appendfsync always). The WAIT's question comes back once
// the replica has the write; the WAITAOF sent after it asks again, and a
// replica with appendfsync always has fsynced the write by then. (With
// everysec, the fsync itself waits for the next second.) A WAIT that falls
// short ends the call: the WAITAOF could count no more replicas.
//
// The WAIT's timeout is what is left of ctx's deadline, times
// waitReplyShare, less serverTick, and at least 1 ms (0 would block
// forever); the WAITAOF's is drawn from what the WAIT left. Below about
// 150 ms left, a WAIT that falls short may be answered past the deadline,
// and the call fails with the deadline's error instead of
// ErrNotReplicated: an error all the same.
func (s *Store) acknowledge(ctx context.Context, cmds rueidis.Commands) ([]rueidis.RedisResult, error) {
	n := len(cmds)
	waitMs := s.waitMs(ctx)
	cmds = append(cmds, s.client.B().Wait().Numreplicas(int64(s.cfg.MinReplicas)).Timeout(waitMs).Build())
	if !s.cfg.WaitAOF && s.client.Mode() != rueidis.ClientModeCluster {
		res := s.client.DoMulti(ctx, cmds...)
		return res[:n], s.replicated(res[n], false, waitMs)
	}
	var res []rueidis.RedisResult
	var ackErr error
	_ = s.client.Dedicated(func(c rueidis.DedicatedClient) error {
		defer func() {
			if ctx.Err() != nil {
				// Its WAIT or WAITAOF may be unanswered yet: the
				// connection must not go back to the pool with it.
				c.Close()
			}
		}()
		res = c.DoMulti(ctx, cmds...)
		if ackErr = s.replicated(res[n], false, waitMs); ackErr != nil || !s.cfg.WaitAOF {
			return nil
		}
		waitMs = s.waitMs(ctx)
		ackErr = s.replicated(c.Do(ctx, c.B().Waitaof().Numlocal(0).Numreplicas(int64(s.cfg.MinReplicas)).Timeout(waitMs).Build()), true, waitMs)
		return nil
	})
	return res[:n], ackErr
}

// ackGroup batches the acknowledged writes of concurrent calls: while one
// batch is out, the calls that come queue; when it is answered, every
// call queued goes out as the next batch, its commands in the order the
// calls came, followed by one WAIT (see acknowledge). One replica round
// trip, and one connection, then serve every call of a batch, however
// many there are; a call alone goes out at once, in a batch of one. The
// zero value is ready to use.
//
// A batch runs under the latest deadline of its calls, and its WAIT's
// timeout is drawn from that: a call whose own deadline comes first
// returns then with the deadline's error, and does not cut the others'
// wait short. A call whose caller stopped waiting before its batch went
// out is left out of it.
type ackGroup struct {
	mu      sync.Mutex
	queue   []*ackCall
	sending bool // a goroutine is sending the queue's batches
}

// ackCall is one call's part of a batch.
type ackCall struct {
	ctx  context.Context
	cmds rueidis.Commands
	// res and ack are its answers, set before done is closed.
	res  []rueidis.RedisResult
	ack  error
	done chan struct{}
}

// commit queues cmds (a write, then reads) in the acknowledgement's next
// batch (see ackGroup) and returns their answers and the
// acknowledgement's outcome, as acked does, or at ctx's end the error it
// ended with for every command.
func (s *Store) commit(ctx context.Context, cmds rueidis.Commands) ([]rueidis.RedisResult, error) {
	g := &s.acks
	call := &ackCall{ctx: ctx, cmds: cmds, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, call)
	start := !g.sending
	g.sending = true
	g.mu.Unlock()
	if start {
		go s.sendBatches()
	}
	select {
	case <-call.done:
		return call.res, call.ack
	case <-ctx.Done():
		err := ctx.Err()
		res := make([]rueidis.RedisResult, len(cmds))
		for i := range res {
			res[i] = rueidis.NewErrorResult(err)
		}
		return res, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	}
}

// sendBatches sends the queue's batches, one at a time, until it is
// empty.
func (s *Store) sendBatches() {
	g := &s.acks
	for {
		g.mu.Lock()
		batch := g.queue
		g.queue = nil
		if len(batch) == 0 {
			g.sending = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		s.flush(batch)
	}
}

// flush sends one batch and hands each call its answers.
func (s *Store) flush(batch []*ackCall) {
	var cmds rueidis.Commands
	var last time.Time
	live := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() != nil {
			continue // its caller has its error: its write stays unsent
		}
		live = append(live, c)
		cmds = append(cmds, c.cmds...)
		d, ok := c.ctx.Deadline()
		if !ok {
			d = time.Now().Add(s.timeout)
		}
		if d.After(last) {
			last = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	res, ackErr := s.acknowledge(ctx, cmds)
	for _, c := range live {
		c.res, res = res[:len(c.cmds):len(c.cmds)], res[len(c.cmds):]
		c.ack = ackErr
		close(c.done)
	}
}

// waitMs is the timeout of a WAIT or WAITAOF sent now, in milliseconds:
// what is left of ctx's deadline (else Config.Timeout), times
// waitReplyShare, less serverTick, and at least 1 (0 would block forever).
func (s *Store) waitMs(ctx context.Context) int64 {
	wait := s.timeout
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	return max(1, int64(time.Duration(float64(wait)*waitReplyShare)-serverTick)/int64(time.Millisecond))
}

// replicated judges res, the answer to a WAIT (aof false: its count of
// replicas) or a WAITAOF (aof true: its pair, local fsyncs and replicas),
// sent with a timeout of waitMs milliseconds.
func (s *Store) replicated(res rueidis.RedisResult, aof bool, waitMs int64) error {
	wait := time.Duration(waitMs) * time.Millisecond
	name := "WAIT"
	var n int64
	var err error
	if aof {
		name = "WAITAOF"
		var pair []int64
		if pair, err = res.AsIntSlice(); err == nil && len(pair) != 2 {
			err = fmt.Errorf("WAITAOF answered %d numbers, want 2", len(pair))
		}
		if err == nil {
			n = pair[1]
		}
	} else {
		n, err = res.AsInt64()
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotReplicated, name, err)
	}
	if n < int64(s.cfg.MinReplicas) {
		if aof {
			return fmt.Errorf("%w: %d of %d replicas fsynced it within %v", ErrNotReplicated, n, s.cfg.MinReplicas, wait)
		}
		return fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, s.cfg.MinReplicas, wait)
	}
	return nil
}

// checkAcks asks every node for the acknowledgement the store sends with
// Config.MinReplicas, waiting for nothing: WAIT 0 1, and WAITAOF 0 0 1
// with Config.WaitAOF. An ACL without +wait or +waitaof answers NOPERM,
// and a server before Redis 7.2 "unknown command" to WAITAOF: every claim
// and record would then fail, so New does instead. A replica (a
// Cluster's slot map lists them) refuses either for being one: the
// command exists there.
func (s *Store) checkAcks(ctx context.Context) error {
	if s.cfg.MinReplicas == 0 {
		return nil
	}
	for addr, c := range s.client.Nodes() {
		cmds := rueidis.Commands{c.B().Wait().Numreplicas(0).Timeout(1).Build()}
		if s.cfg.WaitAOF {
			cmds = append(cmds, c.B().Waitaof().Numlocal(0).Numreplicas(0).Timeout(1).Build())
		}
		for i, cmd := range cmds {
			name := []string{"WAIT", "WAITAOF"}[i]
			err := c.Do(ctx, cmd).Error()
			re, isRedis := rueidis.IsRedisErr(err)
			switch {
			case err == nil:
			case isRedis && name == "WAITAOF" && strings.Contains(strings.ToLower(re.Error()), "unknown command"):
				return fmt.Errorf("%w: %s answered %v; unset IDEMPOTENCY_WAIT_AOF, or upgrade every node", ErrNoWaitAOF, addr, err)
			case isRedis && strings.Contains(strings.ToLower(re.Error()), "replica"):
			case isRedis && strings.HasPrefix(re.Error(), "NOPERM"):
				return fmt.Errorf("%w: %s on %s, to acknowledge every write by %d replicas (IDEMPOTENCY_MIN_REPLICAS; the ACL must allow +%s, or set IDEMPOTENCY_MIN_REPLICAS=0 to take the primary's word alone): %v",
					ErrAckRefused, name, addr, s.cfg.MinReplicas, strings.ToLower(name), err)
			default:
				return fmt.Errorf("%s on %s, to acknowledge every write by %d replicas (IDEMPOTENCY_MIN_REPLICAS; the ACL must allow +%s, or set IDEMPOTENCY_MIN_REPLICAS=0 to take the primary's word alone): %w",
					name, addr, s.cfg.MinReplicas, strings.ToLower(name), err)
			}
		}
	}
	return nil
}

// checkReplicas validates MinReplicas and WaitAOF.
func (c Config) checkReplicas() error {
	switch {
	case c.MinReplicas < AutoMinReplicas:
		return fmt.Errorf("redis: negative MinReplicas %d", c.MinReplicas)
	case c.WaitAOF && c.MinReplicas <= 0:
		return errors.New("redis: WaitAOF needs MinReplicas above 0 (IDEMPOTENCY_WAIT_AOF needs IDEMPOTENCY_MIN_REPLICAS)")
	}
	return nil
}

// chooseReplicas settles Config.MinReplicas from primaries, what New's
// first look at the server found: AutoMinReplicas becomes 1 when each of
// them has a connected replica, else 0. It logs the choice
// (idempotency_replicas, at info level), and warns, in the same event, of
// a count set explicitly that the primaries' replicas belie: 0 beside a
// connected replica, whose promotion in a failover would lose the writes
// it had not copied, or more than a primary has, which fails every write
// until enough replicas connect. The choice holds until the store is
// closed.
func (s *Store) chooseReplicas(primaries []nodeInfo, log *slog.Logger) {
	fewest := nodeInfo{replicas: -1}
	for _, n := range primaries {
		if fewest.replicas < 0 || n.replicas < fewest.replicas {
			fewest = n
		}
	}
	fewest.replicas = max(0, fewest.replicas)
	setting := "unset"
	if s.cfg.MinReplicas != AutoMinReplicas {
		setting = strconv.Itoa(s.cfg.MinReplicas)
	}
	logAt := func(level slog.Level, reason string) {
		log.Log(context.Background(), level, "idempotency_replicas", slog.Int("min_replicas", s.cfg.MinReplicas),
			slog.String("setting", setting), slog.String("primary", fewest.addr),
			slog.Int("connected_replicas", fewest.replicas), slog.String("reason", reason))
	}
	switch {
	case s.cfg.MinReplicas == AutoMinReplicas && fewest.replicas > 0:
		s.cfg.MinReplicas = 1
		logAt(slog.LevelInfo, "IDEMPOTENCY_MIN_REPLICAS is unset and the primary has a connected replica: every claim and sent record waits for one replica's acknowledgement, so that a failover to that replica loses none of them; IDEMPOTENCY_MIN_REPLICAS=0 takes the primary's word alone")
	case s.cfg.MinReplicas == AutoMinReplicas:
		s.cfg.MinReplicas = 0
		logAt(slog.LevelInfo, "IDEMPOTENCY_MIN_REPLICAS is unset and the primary has no connected replica: no write is acknowledged, since none could be; a replica that connects later counts from the next start")
	case s.cfg.MinReplicas == 0 && fewest.replicas > 0:
		logAt(slog.LevelWarn, "IDEMPOTENCY_MIN_REPLICAS=0 beside a primary with a connected replica: no write is acknowledged, and a failover to a replica that lagged loses the last records, whose replays are sent again; unset it to have one replica acknowledge every claim and record")
	case s.cfg.MinReplicas > fewest.replicas:
		logAt(slog.LevelWarn, "IDEMPOTENCY_MIN_REPLICAS is more than the primary's connected replicas: every claim and record fails, and the failure mode applies, until enough replicas connect")
	}
}

// sentinelRefreshInterval is how often a Sentinel client rereads which
// node is the primary, besides following the Sentinels' +switch-master
// announcements: a missed announcement would otherwise bind it to a
// demoted primary, which stays up and closes no connection, for good.
const sentinelRefreshInterval = 5 * time.Second

// sentinel points opt, parsed from c.URL, at the Sentinels when c names
// them, in the URL (rueidis' own form: master_set, the host and each addr
// being Sentinels) or in SentinelAddrs and SentinelMaster, and refuses a
// half-set Sentinel config, both forms at once, or SentinelAddrs beside a
// URL's Cluster seeds.
func (c Config) sentinel(opt *rueidis.ClientOption) error {
	inURL := opt.Sentinel.MasterSet != ""
	if inURL && (len(c.SentinelAddrs) > 0 || c.SentinelMaster != "") {
		return errors.New("redis: the URL's master_set and SentinelAddrs, SentinelMaster (REDIS_SENTINEL_ADDRS, REDIS_SENTINEL_MASTER) both name Sentinels: give them one way")
	}
	if (len(c.SentinelAddrs) == 0) != (c.SentinelMaster == "") {
		return errors.New("redis: SentinelAddrs and SentinelMaster (REDIS_SENTINEL_ADDRS, REDIS_SENTINEL_MASTER) must be set together")
	}
	if !inURL && c.SentinelMaster == "" {
		if c.SentinelUsername != "" || c.SentinelPassword != "" {
			return errors.New("redis: SentinelUsername and SentinelPassword (REDIS_SENTINEL_USERNAME, REDIS_SENTINEL_PASSWORD) need Sentinels: the URL's master_set, or SentinelAddrs and SentinelMaster")
		}
		return nil
	}
	if !inURL {
		if len(opt.InitAddress) > 1 {
			return errors.New("redis: the URL names several addresses (Redis Cluster seeds, ?addr=); Sentinel (SentinelAddrs, SentinelMaster) finds one primary, and cannot be used with them")
		}
		opt.InitAddress = append([]string(nil), c.SentinelAddrs...)
	}
	opt.Sentinel = rueidis.SentinelOption{
		Dialer:                  opt.Dialer,
		TLSConfig:               opt.TLSConfig,
		MasterSet:               cmp.Or(c.SentinelMaster, opt.Sentinel.MasterSet),
		Username:                c.SentinelUsername,
		Password:                c.SentinelPassword,
		TopologyRefreshInterval: sentinelRefreshInterval,
	}
	return nil
}
