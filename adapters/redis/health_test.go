package redis_test

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/ports"
)

// noTick is a HealthConfig.Interval no test outlives: tests that must
// know when the store looked call Look themselves.
const noTick = time.Hour

// healthEvents keeps what the store reported, as the worker's metrics do.
type healthEvents struct {
	mu      sync.Mutex
	evicted int64
	resets  int
}

func (e *healthEvents) RedisKeysEvicted(n int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evicted += n
}

func (e *healthEvents) IdempotencyStoreReset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.resets++
}

func (e *healthEvents) counts() (evicted int64, resets int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.evicted, e.resets
}

// watched returns a store config on srv whose health events go to a
// fresh healthEvents and whose logs go to a fresh buffer.
func watched(url string, interval time.Duration) (redis.Config, *healthEvents, *logtest.Buffer) {
	ev, logs := &healthEvents{}, &logtest.Buffer{}
	return redis.Config{URL: url, Health: redis.HealthConfig{
		Interval: interval,
		Logger:   slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Events:   ev,
	}}, ev, logs
}

// infoInt reads one integer field of INFO from c.
func infoInt(tb testing.TB, c rueidis.Client, field string) int64 {
	tb.Helper()
	text, err := c.Do(testCtx(tb), c.B().Info().Build()).ToString()
	if err != nil {
		tb.Fatalf("INFO: %v", err)
	}
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatalf("INFO %s: %q", field, v)
			}
			return n
		}
	}
	tb.Fatalf("INFO has no %s", field)
	return 0
}

// A Redis that may evict the store's keys once full is refused at start,
// naming its policy and the operator's way to accept it; one that cannot
// evict them, or has no memory limit, is not.
func TestHealth_EvictionPolicyAtStart(t *testing.T) {
	for _, policy := range []string{"allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"} {
		t.Run("Refused/"+policy, func(t *testing.T) {
			srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", policy)
			s, err := redis.New(redis.Config{URL: srv.URL()})
			if err == nil {
				s.Close()
				t.Fatalf("New on maxmemory 3mb and %s: no error", policy)
			}
			var pe *redis.EvictionPolicyError
			if !errors.As(err, &pe) || pe.Policy != policy || pe.Node != srv.Addr() || pe.MaxMemory != 3<<20 {
				t.Fatalf("New: %v, want an *EvictionPolicyError naming %s on %s with 3 MiB", err, policy, srv.Addr())
			}
			for _, want := range []string{policy, "IDEMPOTENCY_ALLOW_EVICTION=true", "noeviction"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New: %q does not say %q", err, want)
				}
			}
		})
	}

	t.Run("AllowedWithTheFlag", func(t *testing.T) {
		srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
		cfg, _, logs := watched(srv.URL(), noTick)
		cfg.Health.AllowEviction = true
		MustStore(t, cfg)
		got := logs.Events(t, "idempotency_eviction_allowed")
		if len(got) != 1 || got[0]["level"] != "WARN" || got[0]["maxmemory_policy"] != "allkeys-lru" || got[0]["node"] != srv.Addr() {
			t.Fatalf("idempotency_eviction_allowed lines %v, want one at WARN naming allkeys-lru on %s", got, srv.Addr())
		}
	})

	for _, args := range [][]string{
		{"--maxmemory", "3mb", "--maxmemory-policy", "noeviction"},
		{"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"},
	} {
		t.Run("Accepted/"+strings.Join(args, " "), func(t *testing.T) {
			srv := redistest.MustStart(t, args...)
			cfg, _, logs := watched(srv.URL(), noTick)
			MustStore(t, cfg)
			if got := logs.Events(t, "idempotency_eviction_allowed"); len(got) != 0 {
				t.Fatalf("idempotency_eviction_allowed logged on a Redis that cannot evict: %v", got)
			}
		})
	}

	t.Run("EveryClusterPrimary", func(t *testing.T) {
		// The seed in the URL cannot evict; another primary can.
		c := redistest.MustStartCluster(t, 3)
		admin := c.Nodes[2].MustClient(t, 0)
		for _, kv := range [][2]string{{"maxmemory", "64mb"}, {"maxmemory-policy", "volatile-lru"}} {
			if err := admin.Do(testCtx(t), admin.B().Arbitrary("CONFIG", "SET").Args(kv[0], kv[1]).Build()).Error(); err != nil {
				t.Fatalf("CONFIG SET %s: %v", kv[0], err)
			}
		}
		s, err := redis.New(redis.Config{URL: c.Nodes[0].URL()})
		if err == nil {
			s.Close()
			t.Fatalf("New on a cluster with one volatile-lru primary: no error")
		}
		var pe *redis.EvictionPolicyError
		if !errors.As(err, &pe) || pe.Node != c.Nodes[2].Addr() || pe.Policy != "volatile-lru" {
			t.Fatalf("New: %v, want an *EvictionPolicyError naming volatile-lru on %s", err, c.Nodes[2].Addr())
		}
	})
}

// A store whose ACL user may not run INFO cannot watch for eviction or a
// reset: it refuses to start, saying so.
func TestHealth_ACLWithoutInfoRefusedAtStart(t *testing.T) {
	srv := redistest.MustStart(t)
	admin := srv.MustClient(t, 0)
	acl := []string{"SETUSER", "noinfo", "reset", "on", ">pw", "~hc:*", "+@connection", "+select", "+set", "+get", "+del", "+evalsha", "+eval", "+ping"}
	if err := admin.Do(testCtx(t), admin.B().Arbitrary("ACL").Args(acl...).Build()).Error(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	s, err := redis.New(redis.Config{URL: "redis://noinfo:pw@" + srv.Addr(), CompactPrefix: "hc:"})
	if err == nil {
		s.Close()
		t.Fatalf("New as a user without +info: no error")
	}
	if !strings.Contains(err.Error(), "+info") || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("New: %v, want INFO's NOPERM and the +info the ACL needs", err)
	}
}

// With eviction accepted, keys another tenant's writes evict while the
// worker runs are logged idempotency_keys_evicted and counted, as many as
// the server counted, by the store's own periodic look.
func TestHealth_EvictionWhileRunning(t *testing.T) {
	srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	cfg, ev, logs := watched(srv.URL(), 100*time.Millisecond)
	cfg.Health.AllowEviction = true
	s, ctx := MustStore(t, cfg), testCtx(t)
	for i := range 200 {
		if err := s.Record(ctx, uniqueKey(t)+strconv.Itoa(i), ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
	// The co-tenant: 4 MiB of keys without a TTL, in 1 KiB values.
	tenant := srv.MustClient(t, 0)
	before := infoInt(t, tenant, "evicted_keys")
	redistest.MustFill(t, ctx, tenant, 4096, 1024)
	if infoInt(t, tenant, "evicted_keys") == before {
		t.Fatalf("the co-tenant's 4 MiB evicted nothing under maxmemory 3mb")
	}
	// A server at maxmemory may evict again on any later command (an
	// INFO's answer takes memory too): the server's count is read again
	// at each look, and the store's must catch up with it.
	var evicted int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, _ := ev.counts()
		if evicted = infoInt(t, tenant, "evicted_keys") - before; got == evicted {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("store counted %d evicted keys within 30s, the server %d", got, evicted)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var logged int64
	for _, e := range logs.Events(t, "idempotency_keys_evicted") {
		if e["level"] != "WARN" || e["maxmemory_policy"] != "allkeys-lru" || e["node"] != srv.Addr() {
			t.Errorf("idempotency_keys_evicted line %v, want WARN naming allkeys-lru on %s", e, srv.Addr())
		}
		logged += int64(e["delta"].(float64))
	}
	if logged != evicted {
		t.Fatalf("idempotency_keys_evicted lines add up to %d, the server evicted %d", logged, evicted)
	}
	t.Logf("the co-tenant evicted %d keys; logged and counted", evicted)
}

// A Redis restarted without its data is a reset: logged
// idempotency_store_reset and counted, once. One restarted with its data
// (AOF, or an RDB snapshot) is not, though its run_id changed too.
func TestHealth_Reset(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		save  bool // SAVE an RDB snapshot before the kill
		reset bool
	}{
		{"WithoutPersistence", nil, false, true},
		{"WithAOF", []string{"--appendonly", "yes", "--appendfsync", "always"}, false, false},
		{"WithRDB", nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.MustStart(t, tc.args...)
			cfg, ev, logs := watched(srv.URL(), noTick)
			s, ctx := MustStore(t, cfg), testCtx(t)
			k := uniqueKey(t)
			if err := s.Record(ctx, k, ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour); err != nil {
				t.Fatalf("Record: %v", err)
			}
			s.Look()
			if tc.save {
				c := srv.MustClient(t, 0)
				if err := c.Do(ctx, c.B().Save().Build()).Error(); err != nil {
					t.Fatalf("SAVE: %v", err)
				}
			}
			srv.Kill(t)
			srv.Restart(t)
			// The store reconnects by itself; a look on a connection still
			// failing is logged and changes nothing, so look until one read
			// the server.
			deadline := time.Now().Add(30 * time.Second)
			for {
				n := len(logs.Events(t, "redis_health_check_failed"))
				s.Look()
				if len(logs.Events(t, "redis_health_check_failed")) == n {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no look succeeded within 30s of the restart: %s", logs)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, kept := MustGet(t, srv.MustClient(t, 0), cfg.Key(k)); kept == tc.reset {
				t.Fatalf("after the restart the sent record is kept: %v, want %v", kept, !tc.reset)
			}
			_, resets := ev.counts()
			lines := logs.Events(t, "idempotency_store_reset")
			want := map[bool]int{true: 1, false: 0}[tc.reset]
			if resets != want || len(lines) != want {
				t.Fatalf("%d resets counted, %d logged; want %d", resets, len(lines), want)
			}
			if want == 1 && lines[0]["level"] != "ERROR" {
				t.Errorf("idempotency_store_reset at %v, want ERROR", lines[0]["level"])
			}
			// Later looks do not report the same reset again.
			s.Look()
			if _, again := ev.counts(); again != want {
				t.Fatalf("%d resets counted after another look, want %d", again, want)
			}
		})
	}
}

// On Redis Cluster every primary holds a marker key: one primary restarted
// without its data is a reset, named in the log.
func TestHealth_ResetOfOneClusterPrimary(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	cfg, ev, logs := watched(c.URL(), noTick)
	s := MustStore(t, cfg)
	c.Nodes[2].Kill(t)
	c.Nodes[2].Restart(t)
	// Until the cluster serves the restarted node's slots again, a look
	// fails (and is logged) and changes nothing.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.Look()
		if _, resets := ev.counts(); resets > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reset reported within 30s of the restart: %s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lines := logs.Events(t, "idempotency_store_reset")
	if _, resets := ev.counts(); resets != 1 || len(lines) != 1 {
		t.Fatalf("%d resets counted, %d logged; want 1", resets, len(lines))
	}
	restarted, _ := lines[0]["restarted"].([]any)
	if len(restarted) != 1 || restarted[0] != c.Nodes[2].Addr() {
		t.Fatalf("idempotency_store_reset names %v as restarted, want [%s]", lines[0]["restarted"], c.Nodes[2].Addr())
	}
}

// A marker key is never a notification's key, in either format, so no
// claim or record ever reads or overwrites one, and no marker ever makes a
// notification look sent or claimed: readable keys are the prefix, a
// channel and a colon, and no channel is "store-marker"; compact keys are
// the prefix and 13 characters, shorter than any marker.
func TestHealth_MarkersAreNoNotificationKeys(t *testing.T) {
	for _, format := range []redis.Format{redis.Compact, redis.Readable} {
		cfg := redis.Config{Format: format}
		for _, marker := range cfg.MarkerKeys() {
			for _, ch := range []ports.Channel{ports.ChannelSMS, ports.ChannelEmail} {
				for _, id := range []string{"", "x", "{la2}", "e1b2c3d4-0000-4000-8000-000000000000", strings.Repeat("z", 300)} {
					k := domain.NotificationKey(id, ch)
					if cfg.Key(k) == marker || cfg.OtherKey(k) == marker {
						t.Fatalf("%v: the key of event %q on %s is the marker %s", format, id, ch, marker)
					}
				}
				if format == redis.Readable && strings.HasPrefix(marker, redis.DefaultKeyPrefix+string(ch)+":") {
					t.Fatalf("marker %s has the form of a readable %s key", marker, ch)
				}
			}
			if format == redis.Compact && len(marker) == len(cfg.Key(domain.NotificationKey("e1", ports.ChannelSMS))) {
				t.Fatalf("marker %s is as long as a compact key", marker)
			}
		}
	}
}
