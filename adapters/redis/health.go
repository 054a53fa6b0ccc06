package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// DefaultHealthInterval is how often the store rereads the server's
// eviction settings and counters, and looks for a reset, when
// HealthConfig.Interval is zero.
const DefaultHealthInterval = time.Minute

// healthStartTimeout bounds New's first look (see selfCheckTimeout).
const healthStartTimeout = selfCheckTimeout

// markerCount is how many marker keys the store keeps: one per
// selfCheckTags entry, so that on Redis Cluster every primary owning 1024
// consecutive slots holds at least one (see the package comment).
const markerCount = len(selfCheckTags)

// healthCommands bounds the commands one look sends on one connection: an
// INFO to the node, and the marker keys routed to it. A look waits for its
// answers for as long as a command may stay unanswered (see
// Config.UnansweredFor), so no more than one look's commands hold slots in
// a connection's ring at once.
const healthCommands = 1 + markerCount

// HealthConfig configures how the store watches the Redis it runs on. At New
// and every Interval, it reads INFO from every primary: maxmemory,
// maxmemory_policy and evicted_keys, and run_id (a new one on every start of
// the server). It also keeps marker keys under the key prefix,
// "store-marker:{<tag>}", one per self-check tag and without a TTL, each
// holding the random token of the worker that wrote it. A marker that is
// gone, or holds another token than the one this store saw last, was lost:
// when that coincides with a primary's new run_id, the server restarted
// without its data, and the store reports a reset.
type HealthConfig struct {
	// AllowEviction lets New accept a primary whose maxmemory is set and
	// whose maxmemory-policy can evict the store's keys (allkeys-*, and
	// volatile-*: every key the store writes, but its markers, has a TTL).
	// An evicted sent record lets a replay send its notification again.
	// False: New fails with an *EvictionPolicyError. True: New logs
	// idempotency_eviction_allowed at warn level and goes on.
	AllowEviction bool
	// Interval is the time between looks. Zero: DefaultHealthInterval.
	Interval time.Duration
	// Logger receives the store's log events (idempotency_eviction_allowed,
	// idempotency_keys_evicted, idempotency_store_reset,
	// redis_health_check_failed). Nil: slog.Default().
	Logger *slog.Logger
	// Events is told what the looks find. Nil: nobody.
	Events HealthEvents
}

// HealthEvents is told what the store's looks at Redis find. Its methods are
// called from one goroutine at a time and must not block.
type HealthEvents interface {
	// RedisKeysEvicted is called with n > 0, the keys the server's
	// primaries evicted since the previous look: anyone's keys, as Redis
	// counts them, not only the store's.
	RedisKeysEvicted(n int64)
	// IdempotencyStoreReset is called once for each look that found the
	// server restarted without the store's data.
	IdempotencyStoreReset()
}

// EvictionPolicyError is New's error when a primary can evict the store's
// keys (see HealthConfig.AllowEviction). It is a configuration problem: the
// worker refuses to start on it.
type EvictionPolicyError struct {
	Node      string // the primary's address
	Policy    string // its maxmemory-policy
	MaxMemory int64  // its maxmemory, in bytes
}

// Reason says what is wrong and how to put it right, without the node.
func (e *EvictionPolicyError) Reason() string {
	return fmt.Sprintf("maxmemory-policy %s with maxmemory %d bytes lets Redis evict idempotency keys (every one has a TTL), and a replay of a notification whose sent record was evicted sends it again; set maxmemory-policy noeviction (sizing maxmemory for the keys, see docs/capacity.md) or give the worker a Redis of its own, or accept the risk explicitly with IDEMPOTENCY_ALLOW_EVICTION=true",
		e.Policy, e.MaxMemory)
}

func (e *EvictionPolicyError) Error() string {
	return "redis: primary " + e.Node + ": " + e.Reason()
}

// canEvict reports whether a server with policy may evict the store's keys
// once it reaches maxmemory.
func canEvict(policy string) bool {
	return strings.HasPrefix(policy, "allkeys-") || strings.HasPrefix(policy, "volatile-")
}

// nodeInfo is what a look reads from one primary's INFO.
type nodeInfo struct {
	addr      string
	runID     string
	maxMemory int64
	policy    string
	evicted   int64
	replicas  int // connected_slaves
}

// health is the store's watch over Redis: New's first look, then a
// goroutine looking every interval until Close.
type health struct {
	cfg HealthConfig
	log *slog.Logger
	// wait bounds a look's wait for its answers: as long as a command
	// may stay unanswered, so that a look's commands are answered or
	// dropped when it returns.
	wait    time.Duration
	markers []string

	// Owned by the looking goroutine after New.
	nodes  map[string]nodeInfo // by address: the primaries seen last
	tokens []string            // what each marker held at the last look
	// restarted lists the primaries seen with a new run_id since the
	// markers were last read.
	restarted []string

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// startHealth takes New's first look, settles Config.MinReplicas by what
// it found (chooseReplicas), and starts the goroutine that looks every
// interval. It fails when INFO is refused or lacks a field the store
// reads, when a marker cannot be written, or with an *EvictionPolicyError.
func (s *Store) startHealth(cfg HealthConfig, unanswered time.Duration) error {
	if cfg.Interval < 0 {
		return fmt.Errorf("negative health interval %v", cfg.Interval)
	}
	cfg.Interval = cmp.Or(cfg.Interval, DefaultHealthInterval)
	h := &health{
		cfg:    cfg,
		log:    cfg.Logger,
		wait:   max(unanswered, s.timeout),
		tokens: make([]string, markerCount),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	h.log = cmp.Or(h.log, slog.Default())
	h.markers = s.cfg.markerKeys()
	ctx, cancel := context.WithTimeout(context.Background(), healthStartTimeout)
	defer cancel()
	nodes, err := s.readNodes(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.maxMemory == 0 || !canEvict(n.policy) {
			continue
		}
		if !cfg.AllowEviction {
			return &EvictionPolicyError{Node: n.addr, Policy: n.policy, MaxMemory: n.maxMemory}
		}
		h.log.Warn("idempotency_eviction_allowed", slog.String("node", n.addr),
			slog.String("maxmemory_policy", n.policy), slog.Int64("maxmemory", n.maxMemory),
			slog.String("reason", "IDEMPOTENCY_ALLOW_EVICTION=true: Redis may evict sent records, and a replay of an evicted one sends its notification again; evictions are logged idempotency_keys_evicted"))
	}
	s.chooseReplicas(nodes, h.log)
	if _, err := s.touchMarkers(ctx, h); err != nil {
		return err
	}
	h.nodes = byAddr(nodes)
	s.health = h
	go s.watch(h)
	return nil
}

// stopHealth stops the looking goroutine and waits for it; a look in
// progress is cut short. It may be called more than once.
func (s *Store) stopHealth() {
	h := s.health
	if h == nil {
		return
	}
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.done
}

// watch looks every interval until stop.
func (s *Store) watch(h *health) {
	defer close(h.done)
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		s.look(h)
	}
}

// look reads every primary's INFO and the markers, reports evictions and a
// reset, and remembers what it saw. A look that fails is logged and
// changes nothing: the next one compares with what was seen before it.
func (s *Store) look(h *health) {
	ctx, cancel := context.WithTimeout(context.Background(), h.wait)
	defer cancel()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	nodes, err := s.readNodes(ctx)
	if err != nil {
		h.failed(err)
		return
	}
	var restarted []string
	for _, n := range nodes {
		prev, seen := h.nodes[n.addr]
		delta := int64(0)
		switch {
		case !seen:
			// A primary new to this store (a failover, a node added):
			// its count so far is not ours to report.
		case prev.runID != n.runID:
			restarted = append(restarted, n.addr)
			delta = n.evicted // the count restarted at zero
		case n.evicted < prev.evicted:
			delta = n.evicted // CONFIG RESETSTAT
		default:
			delta = n.evicted - prev.evicted
		}
		if delta > 0 {
			h.log.Warn("idempotency_keys_evicted", slog.String("node", n.addr),
				slog.Int64("delta", delta), slog.Int64("evicted_keys", n.evicted),
				slog.String("maxmemory_policy", n.policy), slog.Int64("maxmemory", n.maxMemory))
			if h.cfg.Events != nil {
				h.cfg.Events.RedisKeysEvicted(delta)
			}
		}
	}
	h.nodes = byAddr(nodes)
	h.restarted = append(h.restarted, restarted...)
	lost, err := s.touchMarkers(ctx, h)
	if err != nil {
		// The restarts seen wait for the next look that reads the markers.
		h.failed(err)
		return
	}
	restarted, h.restarted = h.restarted, nil
	if len(restarted) > 0 && lost > 0 {
		sort.Strings(restarted)
		h.log.Error("idempotency_store_reset", slog.Any("restarted", restarted),
			slog.Int("markers_lost", lost), slog.Int("markers", markerCount),
			slog.String("reason", "Redis restarted without the store's data: replays of notifications sent within IDEMPOTENCY_TTL before the restart will be sent again"))
		if h.cfg.Events != nil {
			h.cfg.Events.IdempotencyStoreReset()
		}
	}
}

func (h *health) failed(err error) {
	h.log.Warn("redis_health_check_failed", slog.String("error", err.Error()))
}

// touchMarkers sets every marker that is absent to a fresh token (SET NX
// GET: one round trip, and a marker present is left as it is) and returns
// how many were lost since the last look: absent (now holding the fresh
// token), or holding another token than the one seen then, which another
// store wrote after finding it absent. On New's first look none is lost.
func (s *Store) touchMarkers(ctx context.Context, h *health) (lost int, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	cmds := make(rueidis.Commands, len(h.markers))
	for i, k := range h.markers {
		cmds[i] = s.client.B().Set().Key(k).Value(token).Nx().Get().Build()
	}
	now := make([]string, len(h.markers))
	for i, res := range s.client.DoMulti(ctx, cmds...) {
		v, err := res.ToString()
		switch {
		case rueidis.IsRedisNil(err):
			now[i] = token
		case err != nil:
			return 0, fmt.Errorf("redis marker %s: %w", h.markers[i], err)
		default:
			now[i] = v
		}
	}
	for i, v := range now {
		if h.tokens[i] != "" && v != h.tokens[i] {
			lost++
		}
		h.tokens[i] = v
	}
	return lost, nil
}

// readNodes reads INFO from every node the client knows and returns the
// primaries'. On Redis Cluster that is every primary in the slot map.
func (s *Store) readNodes(ctx context.Context) ([]nodeInfo, error) {
	var nodes []nodeInfo
	for addr, c := range s.client.Nodes() {
		text, err := c.Do(ctx, c.B().Info().Section("server", "memory", "stats", "replication").Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("redis INFO on %s (the ACL must allow INFO: +info): %w", addr, err)
		}
		n, primary, err := parseInfo(addr, text)
		if err != nil {
			return nil, err
		}
		if primary {
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

// parseInfo reads the fields the store needs from an INFO answer, and
// whether the node is a primary.
func parseInfo(addr, text string) (n nodeInfo, primary bool, err error) {
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	n.addr = addr
	for _, f := range []string{"role", "run_id", "maxmemory", "maxmemory_policy", "evicted_keys"} {
		if _, ok := fields[f]; !ok {
			return n, false, fmt.Errorf("redis INFO on %s has no %s field", addr, f)
		}
	}
	n.runID, n.policy = fields["run_id"], fields["maxmemory_policy"]
	if n.maxMemory, err = strconv.ParseInt(fields["maxmemory"], 10, 64); err != nil {
		return n, false, fmt.Errorf("redis INFO on %s: maxmemory %q: %w", addr, fields["maxmemory"], err)
	}
	if n.evicted, err = strconv.ParseInt(fields["evicted_keys"], 10, 64); err != nil {
		return n, false, fmt.Errorf("redis INFO on %s: evicted_keys %q: %w", addr, fields["evicted_keys"], err)
	}
	// Absent from a server that hides its replication: none known.
	n.replicas, _ = strconv.Atoi(fields["connected_slaves"])
	return n, fields["role"] == "master", nil
}

// MarkerKeys returns the marker keys a store built from c keeps (see
// HealthConfig): the only keys under its prefix that are not a
// notification's, and that never expire.
func (c Config) MarkerKeys() []string { return c.withDefaults().markerKeys() }

func (c Config) markerKeys() []string {
	keys := make([]string, len(selfCheckTags))
	for i, tag := range selfCheckTags {
		keys[i] = c.prefix() + "store-marker:{" + tag + "}"
	}
	return keys
}

func byAddr(nodes []nodeInfo) map[string]nodeInfo {
	m := make(map[string]nodeInfo, len(nodes))
	for _, n := range nodes {
		m[n.addr] = n
	}
	return m
}
