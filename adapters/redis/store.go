// Package redis is the ports.IdempotencyStore on Redis (rueidis), shared by
// every worker so a notification claimed or sent by one is seen by all.
//
// # Values
//
// The caller's key maps to one Redis key in each Format (keys.go): a
// compact one, the default, and a readable one. A key holds a claim or a
// sent record, in the forms values.go lists, whatever the Format: a store
// reads all of them, under its own key and, with Config.ReadBoth, under the
// other Format's. A claim's key lives its lease
// plus Config.KeepAbandoned, so a claim whose worker died is found, and
// taken over, by the next Claim once its lease has passed
// (ports.Lease.Passed). Claims keep times to the millisecond, compact
// records to the second, readable ones to the millisecond; nothing finer
// survives a round trip. Any other value under our prefix is not ours to
// interpret: Claim reports it as an error wrapping ErrForeignValue rather
// than guessing "sent" or "free".
//
// # Calls
//
// Claim, Record and Release may be called concurrently by any number of
// callers. Each call's budget is its ctx's deadline (Config.Timeout when
// it has none): every command of the call, and the replicas'
// acknowledgement with Config.MinReplicas, runs within it.
//
// # What the store needs of the server
//
// Redis 7 or later; every command touches one key, so Redis Cluster works
// unchanged; the commands an ACL must allow, the Cluster's slot map,
// eviction and resets, replicas and Sentinel: docs/runbook.md, "What the
// worker needs of Redis". New checks each at start and refuses what breaks
// the guarantee (selfCheck, health.go, replicas.go); Claim is not retried
// by rueidis on CLUSTERDOWN or TRYAGAIN, Record and Release are.
package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

var _ ports.IdempotencyStore = (*Store)(nil)

// Defaults applied by New to zero Config fields.
const (
	DefaultKeyPrefix     = "notification-worker:idem:"
	DefaultCompactPrefix = "n"
	DefaultTimeout       = domain.DefaultStoreTimeout
)

// ErrForeignValue is wrapped by Claim when the key holds a value this store
// does not write (none of the forms values.go lists). The value itself is
// never put in the error: it may be someone else's data.
var ErrForeignValue = errors.New("redis: key holds a value that is neither a claim nor a sent record")

// maxFlushDelay is how long the pipeline may wait after a write for more
// commands to send with the next one (see New).
const maxFlushDelay = 500 * time.Microsecond

// clusterRefreshInterval is how often the store rereads a Redis Cluster's
// slot map (see New).
const clusterRefreshInterval = 5 * time.Second

// pipelineMultiplex -1 asks rueidis for a single connection (2^0): on a
// standalone server 0 would mean its default, which depends on GOMAXPROCS;
// on Redis Cluster both mean one connection per node.
const pipelineMultiplex = -1

// releaseLua deletes KEYS[1] only if it still holds the caller's pending
// claim (ARGV[1] = "pending:<token>", followed by the claim's '.' and its
// other fields).
// The compare and the delete must be one atomic step: between a GET and a
// DEL on the client, another worker could take the claim over, and the DEL
// would delete its claim.
const releaseLua = `
local v = redis.call("GET", KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. "." then
	return redis.call("DEL", KEYS[1])
end
return 0
`

var releaseScript = rueidis.NewLuaScriptRetryable(releaseLua)

// takeoverLua implements the takeover of a claim whose lease has passed by
// the one lease rule, ports.Lease.Passed: the caller judges ARGV[1], the
// value the claim's SET found, by that rule, and the script replaces it by
// ours, ARGV[2], living ARGV[3] ms, only if KEYS[1] still holds exactly
// ARGV[1]. The lease replaced is then the lease judged passed: of many
// workers taking the same claim over, one wins, and a record or a newer
// claim written meanwhile is never replaced. It returns 1 when it took the
// claim over, else what the key holds (nil when absent).
const takeoverLua = `
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
	return 1
end
return v
`

// takeoverScript is not retryable: a retry of a takeover that was applied
// would find our own claim and report it as another worker's.
var takeoverScript = rueidis.NewLuaScript(takeoverLua)

// takeAwayLua implements, for the other format's key, the same takeover by
// ports.Lease.Passed: the caller judged ARGV[1] abandoned by that rule, and
// the script deletes KEYS[1] only if it still holds exactly ARGV[1]: of
// many workers taking it over, one wins, and a record or a takeover written
// meanwhile stands. It returns 1 when it deleted the claim, else what the
// key holds (nil when absent).
const takeAwayLua = `
local v = redis.call("GET", KEYS[1])
if v == ARGV[1] then
	redis.call("DEL", KEYS[1])
	return 1
end
return v
`

// takeAwayScript is not retryable, as takeoverScript is not: a retry of a
// deletion that was applied would find the key gone, and report the
// takeover lost.
var takeAwayScript = rueidis.NewLuaScript(takeAwayLua)

// releaseSHA is the SHA1 EVALSHA names releaseLua by, for New's self-check,
// which sends the script itself (see selfCheck).
var releaseSHA = func() string {
	sum := sha1.Sum([]byte(releaseLua))
	return hex.EncodeToString(sum[:])
}()

// Config configures New.
type Config struct {
	// URL is redis:// or rediss:// (TLS), with optional user:password (ACL)
	// and /db number, as rueidis.ParseURL reads it. Query parameters
	// rueidis understands (addr, dial_timeout, write_timeout, ...) apply;
	// with master_set, the host and each addr are Sentinels that name the
	// primary of that master set, as SentinelAddrs and SentinelMaster do.
	URL string
	// Format is how keys and sent records are written: Compact (the zero
	// value) or Readable.
	Format Format
	// KeyPrefix is put before every Readable key. Empty: DefaultKeyPrefix.
	KeyPrefix string
	// CompactPrefix is put before every Compact key. Empty:
	// DefaultCompactPrefix.
	CompactPrefix string
	// ReadBoth makes Claim read the other format's key too, so that what
	// workers writing the other format claimed or recorded is honoured:
	// through the rolling deploy that changes Format, and for an
	// IDEMPOTENCY_TTL after it. It costs one GET per Claim, sent with the
	// claim's SET in one round trip.
	ReadBoth bool
	// Timeout is the budget of a Claim, Record or Release whose caller's
	// ctx has no deadline, and bounds Ping and Inspect on top of theirs.
	// A caller's deadline is its call's whole budget, the acknowledgement
	// of MinReplicas included (ports.IdempotencyStore: the caller owns
	// it), and Timeout does not shorten it. Zero: DefaultTimeout.
	// Connecting in New is bounded by rueidis' dial timeout instead (5s,
	// or the URL's dial_timeout), so a slow start-up handshake does not
	// stop the service from starting.
	Timeout time.Duration
	// MaxUnanswered is the most calls that may await an answer on one
	// connection at once: the calls being made, plus those whose callers
	// stopped waiting at their deadline and that the server has not
	// answered (yet). A call is one command at a time, or two at once for
	// a Claim with ReadBoth. Each connection's ring is sized to hold their
	// commands. rueidis keeps a command in its ring until the server
	// answers it, and a new command waits for a free slot without looking
	// at its context: a call finding the ring full would hang past its
	// deadline until the server answered or rueidis dropped the connection
	// (UnansweredFor). The store does not bound what callers leave
	// unanswered; the circuit breaker in front of it does (see
	// breaker.MaxUnanswered). The ring is the smallest power of two above
	// their commands plus the few rueidis sends by itself (keep-alive
	// PINGs, a cluster's slot-map reads), and never below rueidis' default
	// of 1024. New fails when that would exceed MaxRing (see MaxCalls).
	MaxUnanswered int
	// KeepAbandoned is how long a claim's key outlives its lease, so that
	// a claim left by a worker that died mid-send is found and taken over
	// rather than forgotten: the sent records' TTL (IDEMPOTENCY_TTL), so
	// that a replay that would find the record finds the claim. Zero:
	// domain.DefaultTTL, that TTL's default.
	KeepAbandoned time.Duration
	// TLSConfig, when set, replaces the TLS settings of a rediss:// URL (a
	// private CA, a client certificate). Its ServerName defaults to the URL's
	// host. Setting it with a redis:// URL is an error: it would silently
	// connect in plain text.
	TLSConfig *tls.Config
	// Health configures the store's watch over the server: eviction and
	// resets (health.go).
	Health HealthConfig
	// MinReplicas, when above 0, makes every write of a claim (a fresh
	// claim or a takeover) and of a record return only once that many
	// replicas acknowledged it (WAIT, on the connection that wrote it,
	// within what is left of the call's Timeout); short of that the call
	// fails with an error wrapping ErrNotReplicated (see acked). A fresh
	// claim that fell short is released first. Zero: the primary's word is
	// enough, and a failover may lose the last writes. AutoMinReplicas: New
	// chooses 1 or 0 by the primaries' connected replicas.
	MinReplicas int
	// WaitAOF makes the acknowledgement WAITAOF 0 MinReplicas: each replica
	// has written the write to its AOF and fsynced it. It needs Redis >= 7.2
	// on every node (New fails with ErrNoWaitAOF otherwise) and MinReplicas
	// above 0.
	WaitAOF bool
	// SentinelAddrs and SentinelMaster, set together, find the primary
	// through Redis Sentinel: the Sentinels at SentinelAddrs (host:port)
	// name the primary of the master set SentinelMaster, and the store
	// follows a failover they announce. URL then gives the scheme (rediss
	// means TLS, to the Sentinels too, with TLSConfig when set), the user,
	// password and database of the data nodes; its host is not dialled,
	// but is the TLS server name every node is checked against unless
	// TLSConfig names another. A URL naming more than
	// one address (a Cluster's "?addr=" seeds) is refused with them.
	SentinelAddrs  []string
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels
	// themselves, when they require it.
	SentinelUsername string
	SentinelPassword string
}

// MaxRing is the most slots New gives a connection's ring: Config.MaxUnanswered
// must be below it.
const MaxRing = 1 << 16

// Store is a ports.IdempotencyStore on Redis. It is safe for concurrent use;
// commands from concurrent calls are pipelined on shared connections.
//
// Every method returns an error when Redis does not answer before ctx's
// deadline (Config.Timeout for a call without one; see Config.Timeout) or
// before ctx is done, as long as no more than
// Config.MaxUnanswered commands await an answer on a connection; errors name
// the Redis key, never its value. After an outage the store reconnects by
// itself on the next call: it never needs to be rebuilt.
type Store struct {
	client  rueidis.Client
	cfg     Config // with defaults applied
	timeout time.Duration
	keep    time.Duration // Config.KeepAbandoned
	health  *health       // set by New (health.go)
	acks    ackGroup      // with Config.MinReplicas (replicas.go)
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	c.KeyPrefix = cmp.Or(c.KeyPrefix, DefaultKeyPrefix)
	c.CompactPrefix = cmp.Or(c.CompactPrefix, DefaultCompactPrefix)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.KeepAbandoned = cmp.Or(c.KeepAbandoned, domain.DefaultTTL)
	return c
}

// prefix is what the store's own keys start with in its Format, and
// otherPrefix the other Format's.
func (c Config) prefix() string {
	if c.Format == Readable {
		return c.KeyPrefix
	}
	return c.CompactPrefix
}

func (c Config) otherPrefix() string {
	if c.Format == Readable {
		return c.CompactPrefix
	}
	return c.KeyPrefix
}

// New connects to the server in cfg.URL and returns a Store. It fails if the
// URL or Config is invalid, if the server cannot be reached (and
// authenticated) within the dial timeout, if its self-check or the first
// look at the server's health fails (INFO refused, a marker key not
// written), and with an *EvictionPolicyError when a primary can evict the
// store's keys and cfg.Health.AllowEviction is false (health.go); and when
// a node refuses the acknowledgement cfg.MinReplicas asks for (the ACL
// lacks +wait or +waitaof; ErrNoWaitAOF without WAITAOF). Errors
// never carry the password. Client-side caching is off: the store never
// reads a key twice, and CLIENT TRACKING would need extra ACL rights.
func New(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if cfg.Format != Compact && cfg.Format != Readable {
		return nil, fmt.Errorf("redis: unknown Format %d", cfg.Format)
	}
	if cfg.KeepAbandoned < 0 {
		return nil, fmt.Errorf("redis: negative KeepAbandoned %v", cfg.KeepAbandoned)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("redis: negative timeout %v", cfg.Timeout)
	}
	if cfg.URL == "" {
		return nil, errors.New("redis: empty URL")
	}
	if err := cfg.checkReplicas(); err != nil {
		return nil, err
	}
	client, opt, err := cfg.connect("redis")
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, cfg: cfg, timeout: cfg.Timeout, keep: cfg.KeepAbandoned}
	if err := s.selfCheck(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis: %s: %w", ports.MaskURL(cfg.URL), err)
	}
	if err := s.startHealth(cfg.Health, unansweredFor(opt)); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis: %s: %w", ports.MaskURL(cfg.URL), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), selfCheckTimeout)
	defer cancel()
	if err := s.checkAcks(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("redis: %s: %w", ports.MaskURL(cfg.URL), err)
	}
	return s, nil
}

// tune sets the client options the store runs with, whatever the URL says.
func tune(opt *rueidis.ClientOption) {
	opt.DisableCache = true
	// A reader goroutine on every connection (not only on busy ones)
	// notices a connection the server closed and replaces it at once, so
	// the first command after a Redis restart does not meet the dead
	// socket and fail with EOF while the server is back. It also lets a
	// cancelled caller return early on a live connection.
	opt.AlwaysPipelining = true
	// Concurrent commands gather for up to maxFlushDelay and go out in one
	// write, rather than each in a syscall of its own that wakes the
	// server: with many handlers making two calls per record, those writes
	// are the largest CPU cost Redis adds to a record. rueidis skips the
	// pause when calls do not overlap, so a quiet worker's round trip does
	// not pay it.
	opt.MaxFlushDelay = maxFlushDelay
	// One connection, not rueidis' default of two to four (by GOMAXPROCS):
	// every command then joins the same pipeline, so more of them
	// share each write and each of the server's reads. A worker's Redis
	// traffic is two small commands per notification, a few thousand a
	// second at most, far below what one pipelined connection carries; and
	// the shared Redis serves one client per worker instead of four.
	opt.PipelineMultiplex = pipelineMultiplex
	// Ping, the breaker's probe, asks every node in rueidis' slot map, so
	// the map must drop the nodes the cluster has: a replica that died, a
	// primary replaced by a failover. rueidis otherwise rereads it only
	// when routed commands fail, and an open breaker sends none, so the
	// circuit would stay open after the cluster itself had recovered.
	// CLUSTER SLOTS omits failed replicas; every clusterRefreshInterval the
	// map follows it.
	opt.ClusterOption.ShardsRefreshInterval = cmp.Or(opt.ClusterOption.ShardsRefreshInterval, clusterRefreshInterval)
}

// selfCheckTimeout bounds New's one-time check: longer than a call's
// timeout, since it runs once and a cold connection may still be warming up.
const selfCheckTimeout = 5 * time.Second

// selfCheckTags are the hash tags of New's self-check keys: tag i hashes to
// slot i*1024 (CRC16 of the tag, mod 16384), so the keys are spread evenly
// over Redis Cluster's 16384 slots. On a cluster whose slot map
// the client could not read, some of them get MOVED unless the seed node owns
// all 16 of these slots, which no cluster of two or more primaries
// splitting the slots evenly in ranges allows.
var selfCheckTags = [...]string{
	"la2", "dlj", "qf7", "qbw", "lp0", "ltp", "h85", "qsu",
	"fjl", "ng4", "bfa", "jk9", "nrv", "nv6", "bwc", "sq3",
}

// selfCheck claims and releases one fresh key per selfCheckTags entry,
// "self-check:{<tag>}:<random>" under the prefix. A server older than Redis
// 7 rejects SET ... NX GET, an ACL user without +set, +get, +del or +evalsha
// is refused, and on a Redis Cluster whose slot map the client could not
// read (see the package comment) the keys outside the seed node's slots get
// MOVED. In each case the store's calls would fail, and the worker would
// quietly fail open on every notification, or on most of them: better to
// refuse to start.
//
// The claims go in one DoMulti, and so do the releases (by EVALSHA, then by
// EVAL for the keys whose node answered NOSCRIPT): each batch is one write
// and one round trip on the pipelined connection, and one caller, so
// rueidis' maxFlushDelay pause, which applies while more than one caller
// waits, does not lengthen New.
func (s *Store) selfCheck() error {
	ctx, cancel := context.WithTimeout(context.Background(), selfCheckTimeout)
	defer cancel()
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	keys := make([]string, len(selfCheckTags))
	claims := make(rueidis.Commands, len(selfCheckTags), 2*len(selfCheckTags))
	for i, tag := range selfCheckTags {
		keys[i] = s.cfg.prefix() + "self-check:{" + tag + "}:" + token
		claims[i] = s.claimCmd(keys[i], newClaim(token, "", "", time.Now(), time.Minute).encode(), time.Minute)
	}
	if s.cfg.ReadBoth {
		// Claim reads the other format's keys: the ACL must let it.
		for _, tag := range selfCheckTags {
			claims = append(claims, s.client.B().Get().Key(s.cfg.otherPrefix()+"self-check:{"+tag+"}:"+token).Build())
		}
	}
	claimErrs := make([]error, len(claims))
	var claimed []int
	for i, res := range s.client.DoMulti(ctx, claims...) {
		err := res.Error()
		switch {
		case i >= len(keys):
			if err != nil && !rueidis.IsRedisNil(err) {
				claimErrs[i] = fmt.Errorf("redis read of the other format's key %s (IDEMPOTENCY_READ_BOTH_FORMATS): %w", s.cfg.otherPrefix()+"self-check:{"+selfCheckTags[i-len(keys)]+"}:"+token, err)
			}
		case err != nil && !rueidis.IsRedisNil(err):
			claimErrs[i] = fmt.Errorf("redis claim %s: %w", keys[i], err)
		default:
			claimed = append(claimed, i)
		}
	}

	// Release what was claimed, even when some claims failed: the keys
	// would otherwise stay for the claim TTL.
	releaseErrs := s.releaseSelfCheck(ctx, keys, claimed, pendingPrefix+token)

	moved, firstMoved := 0, error(nil)
	for _, err := range claimErrs {
		if isMoved(err) {
			if moved == 0 {
				firstMoved = err
			}
			moved++
		}
	}
	if moved > 0 {
		return fmt.Errorf("self-check failed: %d of %d commands on keys spread over the hash slots were refused with MOVED: the server is a Redis Cluster node, but the client could not read the slot map and sent every command to the node in the URL; the ACL must allow CLUSTER SLOTS and CLUSTER SHARDS (+cluster|slots +cluster|shards) so the client can read the slot map: %w", moved, len(claims), firstMoved)
	}
	if err := firstError(claimErrs); err != nil {
		return fmt.Errorf("self-check claim failed (this store needs Redis >= 7.0 for SET NX GET, and an ACL allowing SET, GET, DEL, EVAL and EVALSHA on the key prefix): %w", err)
	}
	if err := firstError(releaseErrs); err != nil {
		return fmt.Errorf("self-check release failed (the ACL must allow EVAL and EVALSHA): %w", err)
	}
	return nil
}

// releaseSelfCheck releases the self-check's claims of owner on the
// keys at indexes claimed, in one DoMulti by EVALSHA and another by EVAL
// for the keys whose node answered NOSCRIPT, and returns each key's
// error.
func (s *Store) releaseSelfCheck(ctx context.Context, keys []string, claimed []int, owner string) []error {
	errs := make([]error, len(keys))
	release := func(idx []int, build func(k string) rueidis.Completed) (noScript []int) {
		cmds := make(rueidis.Commands, len(idx))
		for j, i := range idx {
			cmds[j] = build(keys[i])
		}
		for j, res := range s.client.DoMulti(ctx, cmds...) {
			err := res.Error()
			if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
				noScript = append(noScript, idx[j])
			} else if err != nil {
				errs[idx[j]] = fmt.Errorf("redis release %s: %w", keys[idx[j]], err)
			}
		}
		return noScript
	}
	if noScript := release(claimed, func(k string) rueidis.Completed {
		return s.client.B().Evalsha().Sha1(releaseSHA).Numkeys(1).Key(k).Arg(owner).Build()
	}); len(noScript) > 0 {
		release(noScript, func(k string) rueidis.Completed {
			return s.client.B().Eval().Script(releaseLua).Numkeys(1).Key(k).Arg(owner).Build()
		})
	}
	return errs
}

// isMoved reports whether err wraps a MOVED reply: the key's slot is served
// by another cluster node.
func isMoved(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return false
	}
	_, moved := re.IsMoved()
	return moved
}

// firstError returns the first non-nil error in errs.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Close stops the store's watch over the server (health.go) and closes the
// connections. Calls made after Close return an error.
func (s *Store) Close() {
	s.stopHealth()
	s.client.Close()
}

// Ping checks that every server the store talks to answers within the
// timeout, each on the connection that carries the store's commands, for
// the circuit breaker's probe: when it succeeds, every command sent before
// it has been answered too (a connection answers in order). On Redis
// Cluster that is every node in the client's slot map, replicas included;
// a node the cluster has given up on leaves the map within
// clusterRefreshInterval of leaving CLUSTER SLOTS. It returns the first
// node's error, naming the node.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	nodes := s.client.Nodes()
	errs := make(chan error, len(nodes))
	for addr, c := range nodes {
		go func() {
			if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
				errs <- fmt.Errorf("redis ping %s: %w", addr, err)
				return
			}
			errs <- nil
		}()
	}
	var first error
	for range nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Claim implements ports.IdempotencyStore in one round trip:
// SET key pending:<token>.<sender>.<firstuntil>.<digest>.<start>.<first>.<until> NX GET
// PX <ttl + KeepAbandoned>, which needs Redis >= 7. Only when that finds a
// claim whose lease has passed does it take a second, to take the claim
// over (takeoverLua), writing our claim with that claim's history. It is
// not retried on a connection error: the first attempt may have been
// applied, and a retry would then report our own claim as someone else's.
// It returns an error wrapping ErrForeignValue when the key holds a value
// this store did not write.
//
// With Config.ReadBoth, a GET of the other format's key goes out with the
// SET, in the same round trip, and what it found decides whenever the
// caller's key does not (see other).
//
// Leases are judged by this process's clock against the one that wrote
// them: clocks apart by more than a lease's slack make a claim look
// abandoned early, or late.
//
// With Config.MinReplicas, a claim the SET or the takeover wrote is
// acknowledged by that many replicas before Claim reports it (see acked);
// short of that, Claim returns an error wrapping ErrNotReplicated: the
// caller must not rely on the claim. A fresh claim is released first, and
// no claim comes with the error; a takeover is left in place (its key
// would otherwise lose the abandoned claim's lease), the next Claim past
// its lease takes it over, and the error comes with State TakenOver and
// the lease taken over, so that a caller that sends anyway (failing open)
// reconciles that lease's send first rather than sending blind.
//
// The same holds for every error once Claim has found an abandoned claim,
// under either format's key: Redis answered, but a later command of the
// call failed (the takeover's script refused, as NOPERM after an ACL
// change, or cut short by the budget; the other format's key unreadable).
// The error then comes with State TakenOver and that claim's lease,
// whether the takeover was applied, may have been, or was not: the
// abandoned claim's send may have reached the provider, and a caller
// failing open must ask before it sends. Only an error before any
// abandoned claim was found comes with a zero Claim.
//
// An error does not prove the claim was not made: a command cut short by the
// timeout may already be on its way, and run when a slow server catches up.
// Such a claim is harmless: the caller's Record overwrites it, Release
// deletes it, or it is taken over once its lease has passed. (Record and
// Release cut short may likewise still run.)
func (s *Store) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	k := s.cfg.key(key)
	if err := ctx.Err(); err != nil {
		return ports.Claim{}, fmt.Errorf("redis claim %s: %w", k, err)
	}
	ctx, cancel := s.budget(ctx)
	defer cancel()
	now := time.Now()
	mine, px := newClaim(token, digest, sender, now, ttl), ttl+s.keep
	var reads rueidis.Commands
	other := s.cfg.otherKey(key)
	if s.cfg.ReadBoth {
		reads = rueidis.Commands{s.client.B().Get().Key(other).Build()}
	}
	res, ackErr := s.acked(ctx, s.claimCmd(k, mine.encode(), px), reads...)
	own, old, err := held(k, res[0])
	if err != nil {
		return ports.Claim{}, err
	}
	var theirs found
	if s.cfg.ReadBoth {
		theirs.c, theirs.v, theirs.err = held(other, res[1])
	}
	switch {
	case own.State == 0:
		if ackErr != nil {
			// Ours on the primary only: give it back, so that a retry
			// finds the key free rather than an unknown worker's claim.
			_ = s.Release(ctx, key, token)
			return ports.Claim{}, fmt.Errorf("redis claim %s: %w", k, ackErr)
		}
		own.State = ports.Claimed
	case own.State == ports.InFlight && own.Lease.Passed(now):
		// An abandoned claim: a sent record or a live claim under the
		// other key decides first. Taking ours over, then releasing it
		// for a live claim there, would delete the abandoned claim and
		// its history: the worker behind that live claim, come to take
		// the same abandoned claim over from the other side, would find
		// it gone and release its own, and the next Claim would find
		// both keys free and send without asking the provider.
		if s.cfg.ReadBoth && theirs.err != nil {
			// Known, though not taken over: its lease goes with the
			// error (see above).
			return ports.Claim{State: ports.TakenOver, Lease: own.Lease}, theirs.err
		}
		if s.cfg.ReadBoth && theirs.c.State != 0 && !theirs.abandoned(now) {
			return theirs.c, nil
		}
		return s.takeOver(ctx, k, old, mine.inherit(own.Lease).encode(), px, own.Lease)
	case own.State == ports.AlreadySent || own.Lease.Token != token:
		return own, nil
	}
	if !s.cfg.ReadBoth {
		return own, nil
	}
	return s.other(ctx, key, other, theirs, own, mine, px)
}

// found is what a key held: c and the value v, or err.
type found struct {
	c   ports.Claim
	v   string
	err error
}

// abandoned reports whether f is a claim whose lease has passed at now.
func (f found) abandoned(now time.Time) bool {
	return f.err == nil && f.c.State == ports.InFlight && f.c.Lease.Passed(now)
}

// held reads res, the answer of a command that returns what the prefixed
// key k held: a zero Claim when k was empty, else the value v decoded. It
// fails when Redis did, and with ErrForeignValue for a value this store
// does not write; errors name k, never the value.
func held(k string, res rueidis.RedisResult) (c ports.Claim, v string, err error) {
	v, err = res.ToString()
	if rueidis.IsRedisNil(err) {
		return ports.Claim{}, "", nil
	}
	if err != nil {
		return ports.Claim{}, "", fmt.Errorf("redis claim %s: %w", k, err)
	}
	c, ok := Decode(v)
	if !ok {
		return ports.Claim{}, "", fmt.Errorf("redis claim %s: %w", k, ErrForeignValue)
	}
	return c, v, nil
}

// other weighs theirs, what the other format's key other held, against
// c, our claim on the caller's key: Claimed (the key was free) or our own
// token's live claim, from an earlier attempt. An empty key leaves c. A
// sent record there, or a claim whose lease has not passed, is what Claim
// reports, and our claim is released, so that nothing of ours stands
// while a worker of the other format sends, and nothing outlives the
// notification once it recorded. An abandoned claim there, when our key
// was free, is taken over (see takeOverOther); when it held our earlier
// claim, c stands. An error, or a value that
// is not ours, is Claim's error (our claim is released first): the store
// could not tell whether the notification was sent.
func (s *Store) other(ctx context.Context, key, other string, theirs found, c ports.Claim, mine claimValue, px time.Duration) (ports.Claim, error) {
	switch {
	case theirs.err == nil && theirs.c.State == 0:
		return c, nil
	case theirs.abandoned(mine.start): // mine.start is Claim's now
		if c.State == ports.Claimed {
			return s.takeOverOther(ctx, key, s.cfg.key(key), other, theirs.v, theirs.c.Lease, mine, px)
		}
		return c, nil
	}
	// Whatever Release answers, the claim left behind is harmless: the
	// next Claim with token looks at the other key again, and another
	// worker's takes it over once its lease has passed.
	_ = s.Release(ctx, key, mine.token)
	return theirs.c, theirs.err
}

// takeOverOther takes over old, an abandoned claim (whose lease is prev)
// under the other format's key other, for mine, which the caller's key k
// holds: it deletes other if it still holds exactly old, so that of all
// the workers taking it over, of either format, one wins; and then gives
// our claim prev's history. Our claim alone stands for the notification
// from then on: every worker that reads both formats finds it, and one
// that reads only the other format's key finds it free, as it would have
// once old expired.
//
// Should other no longer hold old (another worker took it over, or its
// worker recorded the send after all), our claim is released and Claim
// reports what other holds now. Should the deletion fail (an error: it
// may have been applied), our claim is kept and given prev's history, and
// the error returned with State TakenOver and prev: this call's caller,
// failing open, reconciles from prev's start, and so does whoever takes
// our claim over next (when it took the history). Should our claim not
// take the history (an error), the takeover stands: this call's caller has
// prev, and only a later takeover of our claim would miss prev's start. With Config.MinReplicas, the deletion and
// the history are each acknowledged (see script); should either fall
// short, the error wraps ErrNotReplicated and our claim is kept: after a
// failover old may be back under other, so the caller must not send on it.
func (s *Store) takeOverOther(ctx context.Context, key, k, other, old string, prev ports.Lease, mine claimValue, px time.Duration) (ports.Claim, error) {
	inherit := func() error {
		res, ackErr := s.script(ctx, takeoverScript, takeoverLua, k, mine.encode(), mine.inherit(prev).encode(), strconv.FormatInt(ms(px), 10))
		return cmp.Or(res.Error(), ackErr)
	}
	res, ackErr := s.script(ctx, takeAwayScript, takeAwayLua, other, old)
	if n, err := res.AsInt64(); err == nil && n == 1 {
		inheritErr := inherit()
		if ackErr != nil || errors.Is(inheritErr, ErrNotReplicated) {
			// Not acknowledged: after a failover the abandoned claim
			// may be back under other, or our claim without its
			// history. Reported with the lease taken over, as for a
			// takeover of our own key.
			return ports.Claim{State: ports.TakenOver, Lease: prev}, fmt.Errorf("redis claim %s: take over: %w", other, cmp.Or(ackErr, inheritErr))
		}
		return ports.Claim{State: ports.TakenOver, Lease: prev}, nil
	}
	c, _, err := held(other, res)
	if err != nil && !errors.Is(err, ErrForeignValue) {
		// The deletion failed: refused, or cut short (it may have been
		// applied). Whether our claim took the history or not, this
		// caller knows prev, and gets it with the error: failing open, it
		// reconciles prev's send first (see Claim).
		_ = inherit()
		return ports.Claim{State: ports.TakenOver, Lease: prev}, err
	}
	_ = s.Release(ctx, key, mine.token)
	return lost(c, err, prev)
}

// lost is what a takeover of prev reports when the key no longer held the
// claim judged abandoned, given c and err, what held read there: what the
// key holds now (another worker's takeover, or the record its worker wrote
// after all); InFlight with prev when it is empty (the claim expired in
// between, or was taken and released: the caller's next look tells); and
// on an error, the error with State TakenOver and prev (see Claim).
func lost(c ports.Claim, err error, prev ports.Lease) (ports.Claim, error) {
	switch {
	case err != nil:
		return ports.Claim{State: ports.TakenOver, Lease: prev}, err
	case c.State == 0:
		return ports.Claim{State: ports.InFlight, Lease: prev}, nil
	}
	return c, nil
}

// script runs sc, whose source is src, on key with args, and with
// Config.MinReplicas its acknowledgement, as acked reports it. With
// MinReplicas the script goes in full (EVAL), since its WAIT must follow it
// on the same connection: an EVALSHA answered NOSCRIPT would need a second
// round trip, and a second WAIT.
func (s *Store) script(ctx context.Context, sc *rueidis.Lua, src, key string, args ...string) (rueidis.RedisResult, error) {
	if s.cfg.MinReplicas == 0 {
		return sc.Exec(ctx, s.client, []string{key}, args), nil
	}
	res, ackErr := s.acked(ctx, s.client.B().Eval().Script(src).Numkeys(1).Key(key).Arg(args...).Build())
	return res[0], ackErr
}

// takeOver replaces the abandoned claim old (whose lease is prev) by mine.
// An error comes with State TakenOver and prev whenever the script may have
// run or did not (refused, cut short, not acknowledged): the abandoned
// claim is known, and its send may have gone out (see Claim).
func (s *Store) takeOver(ctx context.Context, k, old, mine string, px time.Duration, prev ports.Lease) (ports.Claim, error) {
	res, ackErr := s.script(ctx, takeoverScript, takeoverLua, k, old, mine, strconv.FormatInt(ms(px), 10))
	if n, err := res.AsInt64(); err == nil && n == 1 {
		if ackErr != nil {
			// Not released: the key would lose the abandoned claim's
			// lease, which the next takeover reconciles from. The
			// lease taken over goes with the error: a caller failing
			// open reconciles it before sending (see Claim).
			return ports.Claim{State: ports.TakenOver, Lease: prev}, fmt.Errorf("redis claim %s: take over: %w", k, ackErr)
		}
		return ports.Claim{State: ports.TakenOver, Lease: prev}, nil
	}
	// The script failed (refused, or cut short: it may have run), or the
	// key no longer held the abandoned claim.
	c, _, err := held(k, res)
	return lost(c, err, prev)
}

// claimCmd is Claim's command for the prefixed key k: set value, living px,
// if k is absent, and answer what k held.
func (s *Store) claimCmd(k, value string, px time.Duration) rueidis.Completed {
	return s.client.B().Set().Key(k).Value(value).Nx().Get().PxMilliseconds(ms(px)).Build()
}

// Record implements ports.IdempotencyStore: SET key <record> PX <ttl>,
// with the record in Config.Format (values.go). A plain SET is idempotent, so rueidis may retry it after a
// connection error within the timeout (not when it is acknowledged: see
// below).
//
// With Config.MinReplicas, Record returns nil only once that many replicas
// acknowledged the record (see acked), and otherwise an error wrapping
// ErrNotReplicated, though the primary may hold the record: the caller
// keeps it owed and writes it again, which is harmless.
func (s *Store) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	k := s.cfg.key(key)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis record %s: %w", k, err)
	}
	cmd := s.client.B().Set().Key(k).Value(encodeRecord(s.cfg.Format, r)).PxMilliseconds(ms(ttl)).Build().ToRetryable()
	ctx, cancel := s.budget(ctx)
	defer cancel()
	res, ackErr := s.acked(ctx, cmd)
	if err := res[0].Error(); err != nil {
		return fmt.Errorf("redis record %s: %w", k, err)
	}
	if ackErr != nil {
		return fmt.Errorf("redis record %s: %w", k, ackErr)
	}
	return nil
}

// Release implements ports.IdempotencyStore with a compare-and-delete Lua
// script, run by its SHA (EVALSHA) and sent in full (EVAL) only when the
// server does not have it yet. Running it twice is harmless, so rueidis may
// retry it after a connection error within the timeout.
func (s *Store) Release(ctx context.Context, key, token string) error {
	k := s.cfg.key(key)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis release %s: %w", k, err)
	}
	ctx, cancel := s.budget(ctx)
	defer cancel()
	if err := releaseScript.Exec(ctx, s.client, []string{k}, []string{pendingPrefix + token}).Error(); err != nil {
		return fmt.Errorf("redis release %s: %w", k, err)
	}
	return nil
}

// budget returns the context a Claim, Record or Release runs under, its
// one budget: ctx itself when the caller set a deadline (the caller owns
// the call's budget: the worker's domain gives every call
// IDEMPOTENCY_TIMEOUT), else ctx bounded by Config.Timeout. Every command
// of the call, the acknowledgement's WAIT included (see acked), runs
// within it.
func (s *Store) budget(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// bound returns ctx bounded by Config.Timeout as well, for Ping and
// Inspect, which answer whether Redis answers within the store's timeout.
// It adds no timer when the caller's deadline is the tighter one.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= s.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// commandsPerCall is the most commands one call sends at once: a Claim
// with ReadBoth sends two. (A takeover or a release follows an answer.)
func (c Config) commandsPerCall() int {
	if c.ReadBoth {
		return 2
	}
	return 1
}

// connect opens a client to the server in c: its URL, TLSConfig and
// Sentinel settings, each connection's ring sized for MaxUnanswered calls
// (of commandsPerCall commands each) besides the client's own commands.
// It returns the client and the options it was opened with. what starts
// every error ("redis", "redis rate limiter"); no error carries the
// password.
func (c Config) connect(what string) (rueidis.Client, rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(c.URL)
	if err != nil {
		return nil, opt, fmt.Errorf("%s: parse URL: %w", what, redactURLError(err))
	}
	if opt.ConnWriteTimeout < 0 {
		return nil, opt, errWriteTimeout(opt.ConnWriteTimeout)
	}
	if most := c.maxCalls(opt); c.MaxUnanswered > most {
		return nil, opt, fmt.Errorf("%s: %d calls awaiting an answer need a ring of more than %d slots per connection (at most %d calls fit)", what, c.MaxUnanswered, MaxRing, most)
	}
	opt.RingScaleEachConn = ringScale(c.commandsPerCall()*c.MaxUnanswered + ownCommands(opt))
	if c.TLSConfig != nil {
		if opt.TLSConfig == nil {
			return nil, opt, errors.New(what + ": TLSConfig is set but the URL scheme is not rediss://")
		}
		tc := c.TLSConfig.Clone()
		tc.ServerName = cmp.Or(tc.ServerName, opt.TLSConfig.ServerName)
		opt.TLSConfig = tc
	}
	if err := c.sentinel(&opt); err != nil {
		return nil, opt, err
	}
	tune(&opt)
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, opt, fmt.Errorf("%s: connect to %s: %w", what, ports.MaskURL(c.URL), err)
	}
	return client, opt, nil
}

// maxCalls is the most calls New accepts as MaxUnanswered under opt.
func (c Config) maxCalls(opt rueidis.ClientOption) int {
	return (MaxRing - 1 - ownCommands(opt)) / c.commandsPerCall()
}

// MaxCalls returns the largest MaxUnanswered New accepts for c. It fails
// when the URL does not parse or sets no positive write_timeout.
func (c Config) MaxCalls() (int, error) {
	opt, err := rueidis.ParseURL(c.URL)
	if err != nil {
		return 0, fmt.Errorf("redis: parse URL: %w", redactURLError(err))
	}
	if opt.ConnWriteTimeout < 0 {
		return 0, errWriteTimeout(opt.ConnWriteTimeout)
	}
	return c.maxCalls(opt), nil
}

// UnansweredFor returns how long a command whose caller stopped waiting
// for it (at its deadline) may keep its slot in the connection's ring: until
// the server answers it, or rueidis drops the connection. rueidis pings a
// connection that has had no reply for a keep-alive interval, and drops it
// when that ping has no answer within ConnWriteTimeout (a URL's
// write_timeout sets it). A command abandoned at its deadline was written,
// all but always, after the last reply, so two intervals plus that timeout
// from it the connection is gone; one more interval is the slack for timers
// and the rare exception: 13 s with rueidis' defaults. It fails when the URL
// does not parse or sets no positive write_timeout.
func (c Config) UnansweredFor() (time.Duration, error) {
	opt, err := rueidis.ParseURL(c.URL)
	if err != nil {
		return 0, fmt.Errorf("redis: parse URL: %w", redactURLError(err))
	}
	if opt.ConnWriteTimeout < 0 {
		return 0, errWriteTimeout(opt.ConnWriteTimeout)
	}
	return unansweredFor(opt), nil
}

func unansweredFor(opt rueidis.ClientOption) time.Duration {
	keepAlive := opt.Dialer.KeepAlive
	if keepAlive <= 0 {
		keepAlive = rueidis.DefaultTCPKeepAlive
	}
	writeTimeout := opt.ConnWriteTimeout
	if writeTimeout <= 0 {
		writeTimeout = max(rueidis.DefaultTCPKeepAlive, keepAlive) * 10
	}
	return writeTimeout + 3*keepAlive
}

// errWriteTimeout is New's error for a negative write_timeout: rueidis then
// never drops a silent connection, and the ring slots its abandoned
// commands hold are never freed.
func errWriteTimeout(d time.Duration) error {
	return fmt.Errorf("redis: write_timeout %v in the URL must be positive", d)
}

// ownCommands bounds the commands sent by the client by itself, or by the
// store besides its callers' calls, that may be unanswered on a connection
// at once: one keep-alive PING at a time, the slot-map reads of a Redis
// Cluster, one per clusterRefreshInterval for as long as a command may stay
// unanswered, and one look at the server's health (health.go).
func ownCommands(opt rueidis.ClientOption) int {
	return 1 + int(unansweredFor(opt)/clusterRefreshInterval) + 1 + healthCommands
}

// ringScale returns the RingScaleEachConn whose ring (2^scale slots) holds
// n commands; never below rueidis' default of 1024 slots.
func ringScale(n int) int {
	return max(rueidis.DefaultRingScale, bits.Len(uint(n)))
}

// redactURLError drops the URL from a *url.Error, whose message quotes the
// whole URL, password included.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
