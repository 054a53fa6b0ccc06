package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
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

// acked sends write, then reads, and with Config.MinReplicas > 0 a WAIT
// (and a WAITAOF with Config.WaitAOF: see ackedAOF) right after write on
// the same connection,
// and returns the answers to write and reads, in that order, and the
// acknowledgement's outcome: nil when MinReplicas is 0 or enough replicas
// acknowledged everything the connection had written, else an error
// wrapping ErrNotReplicated. The caller judges the acknowledgement only
// when its write was applied. reads must not write.
//
// WAIT counts the replicas that acknowledged the writes of the connection it
// is sent on, so it must follow the write on that connection. rueidis sends
// a DoMulti holding a blocking command (WAIT is one) on a pooled connection
// of its own, in order, rather than on the shared pipeline: that holds on a
// standalone server and through Sentinel. On Redis Cluster a DoMulti would
// follow a MOVED for the write alone, leaving the WAIT on the old node, so
// the write and its WAIT go on a dedicated connection to the node owning
// the write's slot instead, where a MOVED is an error, not followed; the
// reads, whose keys may be in other slots (a dedicated connection refuses
// them: rueidis panics), go out at the same time on the shared pipeline.
//
// The WAIT's timeout is what is left of ctx's deadline (the call's
// budget), times waitReplyShare, less serverTick, and at least 1 ms (0
// would block forever). Below about 150 ms left, a WAIT that falls short
// may be answered past the deadline, and the call fails with the
// deadline's error instead of ErrNotReplicated: an error all the same.
func (s *Store) acked(ctx context.Context, write rueidis.Completed, reads ...rueidis.Completed) ([]rueidis.RedisResult, error) {
	if s.cfg.MinReplicas == 0 {
		if len(reads) == 0 {
			return []rueidis.RedisResult{s.client.Do(ctx, write)}, nil
		}
		return s.client.DoMulti(ctx, append(rueidis.Commands{write}, reads...)...), nil
	}
	if s.cfg.WaitAOF {
		return s.ackedAOF(ctx, write, reads...)
	}
	waitMs := s.waitMs(ctx)
	waitCmd := s.waitCmd(s.client.B(), waitMs)
	var res []rueidis.RedisResult
	if s.client.Mode() == rueidis.ClientModeCluster {
		var rr []rueidis.RedisResult
		done := make(chan struct{})
		if len(reads) > 0 {
			go func() {
				defer close(done)
				rr = s.client.DoMulti(ctx, reads...)
			}()
		} else {
			close(done)
		}
		_ = s.client.Dedicated(func(c rueidis.DedicatedClient) error {
			res = c.DoMulti(ctx, write, waitCmd)
			return nil
		})
		<-done
		ack := res[1]
		return append(res[:1], rr...), s.replicated(ack, false, time.Duration(waitMs)*time.Millisecond)
	}
	res = s.client.DoMulti(ctx, append(rueidis.Commands{write}, append(reads, waitCmd)...)...)
	n := 1 + len(reads)
	return res[:n], s.replicated(res[n], false, time.Duration(waitMs)*time.Millisecond)
}

// ackedAOF is acked with Config.WaitAOF: the write, a WAIT, and once the
// WAIT has counted enough replicas, a WAITAOF, on one dedicated connection.
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
// Each step's timeout is drawn from what is left of the budget, as in
// acked; the WAITAOF's from what the WAIT left.
func (s *Store) ackedAOF(ctx context.Context, write rueidis.Completed, reads ...rueidis.Completed) ([]rueidis.RedisResult, error) {
	cluster := s.client.Mode() == rueidis.ClientModeCluster
	var rr []rueidis.RedisResult
	done := make(chan struct{})
	if cluster && len(reads) > 0 {
		// As in acked: the reads' keys may be in other slots, which a
		// dedicated Cluster connection refuses.
		go func() {
			defer close(done)
			rr = s.client.DoMulti(ctx, reads...)
		}()
	} else {
		close(done)
	}
	var res []rueidis.RedisResult
	var ackErr error
	_ = s.client.Dedicated(func(c rueidis.DedicatedClient) error {
		cmds := rueidis.Commands{write}
		if !cluster {
			cmds = append(cmds, reads...)
		}
		waitMs := s.waitMs(ctx)
		res = c.DoMulti(ctx, append(cmds, c.B().Wait().Numreplicas(int64(s.cfg.MinReplicas)).Timeout(waitMs).Build())...)
		n := len(cmds)
		ack := res[n]
		res = res[:n]
		if err := res[0].Error(); err != nil && !rueidis.IsRedisNil(err) {
			return nil // not applied: the caller reports the write's error
		}
		if ackErr = s.replicated(ack, false, time.Duration(waitMs)*time.Millisecond); ackErr != nil {
			return nil
		}
		waitMs = s.waitMs(ctx)
		ack = c.Do(ctx, c.B().Waitaof().Numlocal(0).Numreplicas(int64(s.cfg.MinReplicas)).Timeout(waitMs).Build())
		ackErr = s.replicated(ack, true, time.Duration(waitMs)*time.Millisecond)
		return nil
	})
	<-done
	return append(res, rr...), ackErr
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

// waitCmd is the acknowledgement Config asks for, bounded by waitMs.
func (s *Store) waitCmd(b rueidis.Builder, waitMs int64) rueidis.Completed {
	return b.Wait().Numreplicas(int64(s.cfg.MinReplicas)).Timeout(waitMs).Build()
}

// replicated judges res, the answer to a WAIT (aof false: its count of
// replicas) or a WAITAOF (aof true: its pair, local fsyncs and replicas).
func (s *Store) replicated(res rueidis.RedisResult, aof bool, wait time.Duration) error {
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

// checkWaitAOF asks every node for WAITAOF 0 0 with a 1 ms timeout, which
// waits for nothing: a server before Redis 7.2 answers "unknown command",
// and an ACL without +waitaof answers NOPERM. A replica (a Cluster's slot
// map lists them) refuses WAITAOF for being one: the command exists there.
func (s *Store) checkWaitAOF(ctx context.Context) error {
	if !s.cfg.WaitAOF {
		return nil
	}
	for addr, c := range s.client.Nodes() {
		err := c.Do(ctx, c.B().Waitaof().Numlocal(0).Numreplicas(0).Timeout(1).Build()).Error()
		re, isRedis := rueidis.IsRedisErr(err)
		switch {
		case err == nil:
		case isRedis && strings.Contains(strings.ToLower(re.Error()), "unknown command"):
			return fmt.Errorf("%w: %s answered %v; unset IDEMPOTENCY_WAIT_AOF, or upgrade every node", ErrNoWaitAOF, addr, err)
		case isRedis && strings.Contains(strings.ToLower(re.Error()), "replica"):
		default:
			return fmt.Errorf("WAITAOF on %s: %w", addr, err)
		}
	}
	return nil
}

// checkReplicas validates MinReplicas and WaitAOF.
func (c Config) checkReplicas() error {
	switch {
	case c.MinReplicas < 0:
		return fmt.Errorf("redis: negative MinReplicas %d", c.MinReplicas)
	case c.WaitAOF && c.MinReplicas == 0:
		return errors.New("redis: WaitAOF needs MinReplicas above 0 (IDEMPOTENCY_WAIT_AOF needs IDEMPOTENCY_MIN_REPLICAS)")
	}
	return nil
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
