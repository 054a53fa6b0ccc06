package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// TestStoreContract_MinReplicas runs the store contract with every write
// acknowledged by a replica, through both of acked's paths: a standalone
// primary, and a Redis Cluster whose primaries each have a replica; and
// both again with WAITAOF (IDEMPOTENCY_WAIT_AOF), on servers that have it.
func TestStoreContract_MinReplicas(t *testing.T) {
	t.Run("ClusterWaitAOF", func(t *testing.T) {
		c := redistest.MustStartClusterWaitAOF(t, 3)
		for i := range c.Nodes {
			c.MustAddReplica(t, i, "--appendfsync", "always")
		}
		// Reading both formats: the other key's GET is in another slot,
		// beside the write's dedicated connection.
		cfg := redis.Config{URL: c.URL(), Format: redis.Compact, CompactPrefix: "rca:", KeyPrefix: "replicas-ca:",
			ReadBoth: true, MinReplicas: 1, WaitAOF: true, Timeout: 5 * time.Second}
		storetest.Run(t, contractHarness(cfg, c.MustClient(t)))
	})
	t.Run("WaitAOF", func(t *testing.T) {
		primary := redistest.MustStartWaitAOF(t)
		redistest.MustStartReplica(t, primary, "--appendfsync", "always")
		cfg := redis.Config{URL: primary.URL(), Format: redis.Compact, CompactPrefix: "ra:", KeyPrefix: "replicas-a:",
			ReadBoth: true, MinReplicas: 1, WaitAOF: true, Timeout: 5 * time.Second}
		storetest.Run(t, contractHarness(cfg, primary.MustClient(t, 0)))
	})
	t.Run("Cluster", func(t *testing.T) {
		c := redistest.MustStartCluster(t, 3)
		for i := range c.Nodes {
			c.MustAddReplica(t, i)
		}
		raw := c.MustClient(t)
		for name, cfg := range map[string]redis.Config{
			"Compact": {Format: redis.Compact, CompactPrefix: "rc:"},
			// The other format's key is in another slot, most likely on
			// another node: its GET cannot share the WAIT's connection.
			"CompactReadsBoth": {Format: redis.Compact, CompactPrefix: "rcb:", KeyPrefix: "replicas-cb:", ReadBoth: true},
		} {
			cfg.URL, cfg.MinReplicas, cfg.Timeout = c.URL(), 1, 5*time.Second
			t.Run(name, func(t *testing.T) { storetest.Run(t, contractHarness(cfg, raw)) })
		}
	})
	primary := redistest.MustStart(t)
	redistest.MustStartReplica(t, primary)
	raw := primary.MustClient(t, 0)
	for name, cfg := range map[string]redis.Config{
		"Compact":          {Format: redis.Compact, CompactPrefix: "r:", MinReplicas: 1},
		"CompactReadsBoth": {Format: redis.Compact, CompactPrefix: "rb:", KeyPrefix: "replicas-b:", ReadBoth: true, MinReplicas: 1},
	} {
		cfg.URL = primary.URL()
		// Each call acknowledged on a pooled connection of its own: the
		// suite's concurrent calls dial them at once, which under the race
		// detector on two shared cores took more than 200 ms.
		cfg.Timeout = 5 * time.Second
		t.Run(name, func(t *testing.T) { storetest.Run(t, contractHarness(cfg, raw)) })
	}
}

// TestMinReplicas: with replication held back, a claim, a takeover and a
// record each fail with ErrNotReplicated within their timeout, never a
// silent success; once replication flows, each returns with its write on
// the replica.
func TestMinReplicas(t *testing.T) {
	primary := redistest.MustStart(t)
	replica, link := redistest.MustStartReplica(t, primary)
	onPrimary, onReplica := primary.MustClient(t, 0), replica.MustClient(t, 0)
	// A budget the server's 100 ms timer leaves room in; the default
	// 200 ms is tried on its own.
	const timeout = time.Second
	cfg := redis.Config{URL: primary.URL(), Timeout: timeout, MinReplicas: 1, CompactPrefix: "mr:"}
	s := MustStore(t, cfg)
	// budget gives each call the timeout as its deadline, as the domain
	// does: the caller's deadline is the call's budget. patient gives one
	// no load on the machine exhausts, for the steps whose timing is not
	// what is tested: the set-up, and the writes once replication flows.
	budget := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(testCtx(t), timeout)
		t.Cleanup(cancel)
		return ctx
	}
	patient := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}

	// within runs f and fails the test when it took past the timeout.
	within := func(what string, f func() error) error {
		t.Helper()
		start := time.Now()
		err := f()
		if took := time.Since(start); took > timeout+margin {
			t.Errorf("%s took %v, want at most %v", what, took, timeout+margin)
		}
		return err
	}

	t.Run("HeldBack", func(t *testing.T) {
		// An abandoned claim to take over below: its lease is long past.
		abandoned := uniqueKey(t)
		if _, err := s.Claim(patient(t), abandoned, "dead", "", "", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)

		link.Hold()
		defer link.Release()

		k := uniqueKey(t)
		err := within("Claim", func() error { _, err := s.Claim(budget(t), k, "tok", "", "", time.Minute); return err })
		if !errors.Is(err, redis.ErrNotReplicated) {
			t.Fatalf("Claim with replication held back: %v, want ErrNotReplicated", err)
		}
		// The claim was given back: a retry finds the key free.
		if v, ok := MustGet(t, onPrimary, cfg.Key(k)); ok {
			t.Errorf("key after a claim that fell short holds %q, want it released", v)
		}

		c, err := s.Claim(budget(t), abandoned, "taker", "", "", time.Minute)
		if !errors.Is(err, redis.ErrNotReplicated) {
			t.Fatalf("takeover with replication held back: %+v, %v, want ErrNotReplicated", c, err)
		}

		r := uniqueKey(t)
		err = within("Record", func() error { return s.Record(budget(t), r, receipt, time.Hour) })
		if !errors.Is(err, redis.ErrNotReplicated) {
			t.Fatalf("Record with replication held back: %v, want ErrNotReplicated", err)
		}
		if _, ok := MustGet(t, onReplica, cfg.Key(r)); ok {
			t.Fatalf("the replica has the record: replication was not held back")
		}
	})

	t.Run("Flowing", func(t *testing.T) {
		k := uniqueKey(t)
		if c, err := s.Claim(patient(t), k, "tok", "", "", time.Minute); err != nil || c.State != ports.Claimed {
			t.Fatalf("Claim: %+v, %v", c, err)
		}
		if _, ok := MustGet(t, onReplica, cfg.Key(k)); !ok {
			t.Errorf("claim acknowledged but not on the replica")
		}
		if err := s.Record(patient(t), k, receipt, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if v, _ := MustGet(t, onReplica, cfg.Key(k)); v == "" || v[0] == 'p' {
			t.Errorf("record acknowledged, but the replica holds %q", v)
		}
	})
}

// TestMinReplicas_ShortBudget: with the default 200 ms budget (the
// caller's deadline, as the domain sets it) and replication held back, a
// claim and a record fail within the budget (plus the margin), with
// ErrNotReplicated or the deadline's error.
func TestMinReplicas_ShortBudget(t *testing.T) {
	primary := redistest.MustStart(t)
	_, link := redistest.MustStartReplica(t, primary)
	s := MustStore(t, redis.Config{URL: primary.URL(), Timeout: timeout, MinReplicas: 1})
	link.Hold()
	defer link.Release()
	for name, call := range map[string]func(ctx context.Context) error{
		"Claim": func(ctx context.Context) error {
			_, err := s.Claim(ctx, uniqueKey(t), "tok", "", "", time.Minute)
			return err
		},
		"Record": func(ctx context.Context) error {
			return s.Record(ctx, uniqueKey(t), ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
		},
	} {
		ctx, cancel := context.WithTimeout(testCtx(t), timeout)
		start := time.Now()
		err := call(ctx)
		cancel()
		if took := time.Since(start); took > timeout+margin {
			t.Errorf("%s took %v, want at most %v", name, took, timeout+margin)
		}
		if err == nil {
			t.Errorf("%s with replication held back succeeded", name)
		}
	}
}

// TestMinReplicas_NoReplica: a primary with no replica at all cannot
// acknowledge, so every write fails, and New still starts (a replica may
// come later).
func TestMinReplicas_NoReplica(t *testing.T) {
	primary := redistest.MustStart(t)
	s := MustStore(t, redis.Config{URL: primary.URL(), Timeout: timeout, MinReplicas: 1})
	err := s.Record(testCtx(t), uniqueKey(t), ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
	if !errors.Is(err, redis.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("Record without a replica: %v, want ErrNotReplicated, 0 of 1", err)
	}
}

// TestWaitAOF_Refused: Redis 7.0 has no WAITAOF, and New says so rather
// than failing every write.
func TestWaitAOF_Refused(t *testing.T) {
	primary := redistest.MustStart(t)
	c := primary.MustClient(t, 0)
	if err := c.Do(testCtx(t), c.B().Waitaof().Numlocal(0).Numreplicas(0).Timeout(1).Build()).Error(); err == nil {
		t.Skip("this redis-server has WAITAOF")
	}
	_, err := redis.New(redis.Config{URL: primary.URL(), MinReplicas: 1, WaitAOF: true})
	if !errors.Is(err, redis.ErrNoWaitAOF) {
		t.Fatalf("New with WaitAOF on Redis < 7.2: %v, want ErrNoWaitAOF", err)
	}
}

func TestReplicaConfigRefused(t *testing.T) {
	for name, cfg := range map[string]redis.Config{
		"NegativeMinReplicas":    {MinReplicas: -1},
		"WaitAOFWithoutReplicas": {WaitAOF: true},
		"SentinelAddrsOnly":      {SentinelAddrs: []string{"127.0.0.1:1"}},
		"SentinelMasterOnly":     {SentinelMaster: "m"},
		"SentinelPasswordOnly":   {SentinelPassword: "x"},
		"SentinelWithClusterSeeds": {
			SentinelAddrs: []string{"127.0.0.1:1"}, SentinelMaster: "m",
			URL: "redis://127.0.0.1:1?addr=127.0.0.1:2",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if cfg.URL == "" {
				cfg.URL = "redis://127.0.0.1:1"
			}
			if s, err := redis.New(cfg); err == nil {
				s.Close()
				t.Fatalf("New(%+v) succeeded", cfg)
			}
		})
	}
}

// TestSentinelFailover: the primary dies while its replica lags, and the
// Sentinels promote the replica. Every record the store reported written
// must still be there for a replay, or the replay sends it again. The
// store is configured from the worker's environment, as the worker
// configures it. With IDEMPOTENCY_MIN_REPLICAS unset (the primary has a
// replica: one must acknowledge) or 1, none is lost (the records written
// while replication was held back failed, and a caller keeps them owed);
// with 0 the test logs how many were lost, each a message a replay sends
// twice.
func TestSentinelFailover(t *testing.T) {
	for _, c := range failoverSettings("", "1", "0") {
		t.Run(c.name, func(t *testing.T) {
			primary := redistest.MustStart(t)
			replica, link := redistest.MustStartReplica(t, primary)
			sentinels := redistest.MustStartSentinels(t, 3, "idem", primary, 1)
			env := map[string]string{
				"REDIS_URL":             "redis://ignored:1",
				"REDIS_SENTINEL_ADDRS":  strings.Join(sentinels.Addrs(), ","),
				"REDIS_SENTINEL_MASTER": "idem",
			}
			cfg := workerStoreConfig(t, env, c.setting)
			cfg.Timeout = timeout
			s := MustStore(t, cfg)
			// The replay reads what survived, without acknowledgement: the
			// promoted primary has no replica left to give one.
			cfg.MinReplicas = 0
			replay := MustStore(t, cfg)
			lost, owed := failoverReplay(t, s, replay, link.Hold, func() {
				sentinels.KillPrimary(t, primary)
				link.Cut()
				sentinels.MustWaitPrimary(t, replica, 60*time.Second)
			})
			judgeFailover(t, c.acked, lost, owed, "the replica")
		})
	}
}

// failoverSetting is a value of IDEMPOTENCY_MIN_REPLICAS ("" for unset)
// beside a primary with a replica, and whether it acknowledges writes.
type failoverSetting struct {
	name, setting string
	acked         bool
}

func failoverSettings(settings ...string) []failoverSetting {
	var out []failoverSetting
	for _, v := range settings {
		name := "MinReplicas=" + v
		if v == "" {
			name = "MinReplicasUnset"
		}
		out = append(out, failoverSetting{name: name, setting: v, acked: v != "0"})
	}
	return out
}

// workerStoreConfig is the store's configuration as the worker reads it
// from env, with IDEMPOTENCY_MIN_REPLICAS set to minReplicas unless that
// is "".
func workerStoreConfig(t *testing.T, env map[string]string, minReplicas string) redis.Config {
	t.Helper()
	if minReplicas != "" {
		env["IDEMPOTENCY_MIN_REPLICAS"] = minReplicas
	}
	c, err := config.Load(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	return redis.LoadSettings(c.Settings())
}

// failoverReplay writes records through s (a claim, then a record, per
// key, as the worker does) before and after hold, then runs kill, then
// claims every key whose Record succeeded through replay, once it
// answers: a key that is free again was lost, and a replay would send it
// twice.
func failoverReplay(t *testing.T, s, replay *redis.Store, hold, kill func()) (lost, owed int) {
	t.Helper()
	ctx := testCtx(t)
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}
	recorded := map[string]bool{}
	write := func(n int) {
		for range n {
			k := uniqueKey(t)
			// Whatever the claim answers, the message goes out (a worker
			// failing open sends on an error too); then its record.
			_, _ = s.Claim(ctx, k, "first", "", "", time.Minute)
			if err := s.Record(ctx, k, receipt, time.Hour); err != nil {
				owed++
				continue
			}
			recorded[k] = true
		}
	}
	write(20)
	hold()
	write(20)
	kill()
	for k := range recorded {
		// The store follows the failover (the Sentinels' announcement, a
		// Cluster's new slot map): until then a claim fails.
		var c ports.Claim
		wait.For(t, 30*time.Second, "a claim on the new primary", func() error {
			var err error
			c, err = replay.Claim(context.Background(), k, "replay", "", "", time.Minute)
			return err
		})
		if c.State != ports.AlreadySent {
			lost++
		}
	}
	return lost, owed
}

// TestClusterFailover: the Sentinel failover above, on a Redis Cluster of three
// primaries, each with a replica: node 0's replica falls behind, node 0
// dies, and the cluster promotes the replica. Unset, IDEMPOTENCY_MIN_REPLICAS
// is 1: every primary has a replica.
func TestClusterFailover(t *testing.T) {
	for _, set := range failoverSettings("", "0") {
		t.Run(set.name, func(t *testing.T) {
			c := redistest.MustStartCluster(t, 3)
			replicas := make([]*redistest.Server, len(c.Nodes))
			for i := range c.Nodes {
				replicas[i] = c.MustAddReplica(t, i)
			}
			// As deployed: reading both formats, whose GET is in another slot.
			cfg := workerStoreConfig(t, map[string]string{"REDIS_URL": c.URL()}, set.setting)
			cfg.Timeout = time.Second
			s := MustStore(t, cfg)
			// The replay reads what survived: a claim on a key that lost
			// its record writes one, which no replica can acknowledge
			// now that the promoted node has none.
			replay := MustStore(t, redis.Config{URL: c.URL(), Timeout: time.Second})
			lost, owed := failoverReplay(t, s, replay, func() {
				// A stopped replica would still read, once resumed, what
				// the kernel holds in its socket: push more than the
				// socket buffers hold first, so what follows stays in the
				// primary's own buffer, and dies with it.
				replicas[0].Pause(t)
				mustFill(t, c.Nodes[0], 32, 1<<20)
			}, func() {
				c.Nodes[0].Kill(t)
				replicas[0].Resume(t)
				redistest.MustWaitClusterPrimary(t, replicas[0], c.Nodes[1:], 60*time.Second)
			})
			judgeFailover(t, set.acked, lost, owed, "node 0's replica")
		})
	}
}

// mustFill writes n values of size bytes to node under keys in hash slot 0
// (hash tag "la2"), which the first of a Cluster's nodes serves.
func mustFill(t *testing.T, node *redistest.Server, n, size int) {
	t.Helper()
	c := node.MustClient(t, 0)
	v := strings.Repeat("x", size)
	for i := range n {
		if err := c.Do(testCtx(t), c.B().Set().Key(fmt.Sprintf("filler:{la2}:%d", i)).Value(v).Build()).Error(); err != nil {
			t.Fatalf("filler: %v", err)
		}
	}
}

// judgeFailover fails t when a store acknowledging writes (acked) lost
// any of them in a failover (lost), or when without acknowledgement none
// was lost, which means the rig did not hold replication back; and logs,
// without, how many were lost from the replica named lagging, and the
// writes the store refused (owed).
func judgeFailover(t *testing.T, acked bool, lost, owed int, lagging string) {
	t.Helper()
	switch {
	case acked && lost > 0:
		t.Errorf("%d records reported written were gone after the failover: a replay sends each again", lost)
	case !acked && lost == 0:
		t.Errorf("no record lost without acknowledgement: the rig did not hold replication back")
	case !acked:
		t.Logf("IDEMPOTENCY_MIN_REPLICAS=0: %d of the records written while %s lagged were lost in the failover; a replay sends each of them twice", lost, lagging)
	}
	t.Logf("owed (the store refused them, the caller writes them again): %d", owed)
}

// TestMinReplicas_CallersDeadlineIsTheBudget: a call's budget is its
// caller's deadline (the worker's domain sets IDEMPOTENCY_TIMEOUT on every
// call), not Config.Timeout on top of it: a Record given three seconds,
// on a primary no replica can acknowledge, waits for replicas within those
// seconds (WAIT's timeout is drawn from them) and fails with
// ErrNotReplicated, not with its store's much shorter Timeout.
func TestMinReplicas_CallersDeadlineIsTheBudget(t *testing.T) {
	primary := redistest.MustStart(t)
	s := MustStore(t, redis.Config{URL: primary.URL(), Timeout: 100 * time.Millisecond, MinReplicas: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := s.Record(ctx, uniqueKey(t), ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
	took := time.Since(start)
	if !errors.Is(err, redis.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("Record without a replica, given 3s: %v, want ErrNotReplicated, 0 of 1", err)
	}
	// WAIT blocks server-side for its timeout: 3s less the reply share
	// and a server tick is over 2s. Cut to Config.Timeout, it would be 1ms.
	if took < time.Second {
		t.Fatalf("Record returned after %v: its WAIT did not take the caller's 3s budget", took)
	}
}

// TestMinReplicasUnset: with IDEMPOTENCY_MIN_REPLICAS unset, the store
// chooses from what the primary reports at start, and its start line
// (idempotency_replicas) says which and why: beside a connected replica,
// one must acknowledge every write, so a record that replication cannot
// reach fails with ErrNotReplicated; alone, no write waits for a replica.
// Set to 0 beside a replica, nothing is acknowledged, and the line warns.
func TestMinReplicasUnset(t *testing.T) {
	for _, c := range []struct {
		name, setting string
		replica       bool
		wantMin       float64
		wantLevel     string
	}{
		{"BesideReplica", "", true, 1, "INFO"},
		{"Alone", "", false, 0, "INFO"},
		{"ZeroBesideReplica", "0", true, 0, "WARN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			primary := redistest.MustStart(t)
			cfg := workerStoreConfig(t, map[string]string{"REDIS_URL": primary.URL()}, c.setting)
			var link *redistest.Link
			if c.replica {
				_, link = redistest.MustStartReplica(t, primary)
			}
			logs := &logtest.Buffer{}
			cfg.Health.Logger = slog.New(slog.NewJSONHandler(logs, nil))
			cfg.Health.Interval = noTick
			cfg.Timeout = time.Second
			s := MustStore(t, cfg)

			if link != nil {
				link.Hold()
				defer link.Release()
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := s.Record(ctx, uniqueKey(t), ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
			switch {
			case c.wantMin > 0 && !errors.Is(err, redis.ErrNotReplicated):
				t.Errorf("Record with replication held back: %v, want ErrNotReplicated (the replica must acknowledge)", err)
			case c.wantMin == 0 && err != nil:
				t.Errorf("Record: %v, want it written without acknowledgement", err)
			}

			setting := c.setting
			if setting == "" {
				setting = "unset"
			}
			got := logs.Events(t, "idempotency_replicas")
			if len(got) != 1 || got[0]["level"] != c.wantLevel || got[0]["min_replicas"] != c.wantMin ||
				got[0]["setting"] != setting || got[0]["primary"] != primary.Addr() || got[0]["reason"] == "" {
				t.Fatalf("idempotency_replicas lines %v, want one at %s: min_replicas %v, setting %s, primary %s, a reason", got, c.wantLevel, c.wantMin, setting, primary.Addr())
			}
		})
	}
}

// TestMinReplicas_GroupCommit: concurrent calls share a WAIT, and none is
// reported acknowledged that its WAIT did not cover. With replication held
// back, a WAIT covering a write cannot count the replica, while one that
// does not (sent on a connection that did not make the write) answers at
// once with it: every call must fail. The first call's WAIT blocks while
// the others queue, and they go out in batches, each with one WAIT (INFO
// commandstats counts fewer WAITs than calls). Once replication flows,
// every call returns with its write on the replica.
func TestMinReplicas_GroupCommit(t *testing.T) {
	primary := redistest.MustStart(t)
	replica, link := redistest.MustStartReplica(t, primary)
	onPrimary, onReplica := primary.MustClient(t, 0), replica.MustClient(t, 0)
	cfg := redis.Config{URL: primary.URL(), MinReplicas: 1, CompactPrefix: "gc:"}
	s := MustStore(t, cfg)
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}
	const callers = 32
	// calls runs a claim and a record on a fresh key from each of callers
	// goroutines, each call within budget, and returns the keys and each
	// call's error.
	calls := func(budget time.Duration, started func()) (keys []string, errs []error) {
		keys, errs = make([]string, callers), make([]error, 2*callers)
		var wg sync.WaitGroup
		for i := range callers {
			keys[i] = uniqueKey(t)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), budget)
				defer cancel()
				_, errs[2*i] = s.Claim(ctx, keys[i], "tok", "", "", time.Minute)
				ctx, cancel = context.WithTimeout(context.Background(), budget)
				defer cancel()
				errs[2*i+1] = s.Record(ctx, keys[i], receipt, time.Hour)
			})
			if i == 0 && started != nil {
				started()
			}
		}
		wg.Wait()
		return keys, errs
	}

	t.Run("HeldBack", func(t *testing.T) {
		link.Hold()
		defer link.Release()
		waits := redistest.CommandCalls(t, onPrimary, "wait")
		// The first caller's WAIT blocks for seconds (its budget's share),
		// so the other callers find a batch out and queue behind it.
		_, errs := calls(5*time.Second, func() {
			wait.For(t, 10*time.Second, "a WAIT blocked on the primary", func() error {
				if n := infoInt(t, onPrimary, "blocked_clients"); n == 0 {
					return errors.New("no blocked client")
				}
				return nil
			})
		})
		for i, err := range errs {
			if err == nil {
				t.Errorf("call %d (%s) reported acknowledged while replication was held back", i, []string{"Claim", "Record"}[i%2])
			}
		}
		n := redistest.CommandCalls(t, onPrimary, "wait") - waits
		t.Logf("%d calls, %d WAITs", len(errs), n)
		if n == 0 || n >= len(errs) {
			t.Errorf("%d WAITs for %d calls, want fewer WAITs than calls, and some", n, len(errs))
		}
	})

	t.Run("Flowing", func(t *testing.T) {
		keys, errs := calls(30*time.Second, nil)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		for _, k := range keys {
			if v, _ := MustGet(t, onReplica, cfg.Key(k)); v == "" || v[0] == 'p' {
				t.Errorf("record of %s acknowledged, but the replica holds %q", k, v)
			}
		}
	})
}

// TestMinReplicas_ConnectionKilled: the connection a batch's WAIT blocks
// on is killed (CLIENT KILL) while replication is held back. A WAIT sent
// again on another connection would count the replica at once, for writes
// it never saw: every call of the batch must fail, and the next calls, on
// a new connection, acknowledge their own writes.
func TestMinReplicas_ConnectionKilled(t *testing.T) {
	primary := redistest.MustStart(t)
	replica, link := redistest.MustStartReplica(t, primary)
	onPrimary, onReplica := primary.MustClient(t, 0), replica.MustClient(t, 0)
	cfg := redis.Config{URL: primary.URL(), MinReplicas: 1, CompactPrefix: "ck:"}
	s := MustStore(t, cfg)
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}

	link.Hold()
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			errs <- s.Record(ctx, uniqueKey(t), receipt, time.Hour)
		}()
	}
	var killed string
	wait.For(t, 10*time.Second, "a WAIT blocked on the primary", func() error {
		list, err := onPrimary.Do(testCtx(t), onPrimary.B().ClientList().Build()).ToString()
		if err != nil {
			return err
		}
		for line := range strings.Lines(list) {
			if strings.Contains(line, " cmd=wait ") {
				killed, _, _ = strings.Cut(strings.TrimPrefix(line, "id="), " ")
				id, err := strconv.ParseInt(killed, 10, 64)
				if err != nil {
					return fmt.Errorf("CLIENT LIST line %q: %w", line, err)
				}
				return onPrimary.Do(testCtx(t), onPrimary.B().ClientKill().Id(id).Build()).Error()
			}
		}
		return errors.New("no client in WAIT")
	})
	for range n {
		if err := <-errs; err == nil {
			t.Errorf("a record of the batch whose connection (client %s) was killed was reported acknowledged", killed)
		}
	}
	link.Release()

	k := uniqueKey(t)
	if err := s.Record(testCtx(t), k, receipt, time.Hour); err != nil {
		t.Fatalf("Record after the kill, replication flowing: %v", err)
	}
	if v, _ := MustGet(t, onReplica, cfg.Key(k)); v == "" || v[0] == 'p' {
		t.Errorf("record acknowledged after the kill, but the replica holds %q", v)
	}
}

// TestMinReplicas_ClusterMoved: a slot moves from node 0 to node 1 after
// the store read the slot map, and node 1's replica is stopped, so no
// WAIT on node 1 can count it while node 0's and node 2's replicas
// answer. A write of that slot goes to node 0, which answers MOVED: it
// must be an error, not a write made on node 1 and acknowledged by a WAIT
// on another node. Once the store follows the new map, its WAIT on node 1
// falls short; once node 1's replica resumes, the write is acknowledged
// there.
func TestMinReplicas_ClusterMoved(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	replicas := make([]*redistest.Server, len(c.Nodes))
	for i := range c.Nodes {
		replicas[i] = c.MustAddReplica(t, i)
	}
	const prefix = "cm:"
	cfg := redis.Config{URL: c.URL(), CompactPrefix: prefix, MinReplicas: 1, Timeout: time.Second}
	s := MustStore(t, cfg)
	k := mustMoveEmptySlot(t, c, prefix, 0, 1)
	replicas[1].Pause(t)
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}
	wait.For(t, 30*time.Second, "the store following the new slot map", func() error {
		err := s.Record(testCtx(t), k, receipt, time.Hour)
		switch {
		case err == nil:
			t.Fatalf("Record in the moved slot reported acknowledged while node 1's replica is stopped")
		case errors.Is(err, redis.ErrNotReplicated):
			return nil // sent to node 1, where the WAIT fell short
		case !redis.IsMoved(err):
			t.Fatalf("Record in the moved slot: %v, want MOVED or ErrNotReplicated", err)
		}
		return err
	})
	replicas[1].Resume(t)
	wait.For(t, 30*time.Second, "the record acknowledged on node 1", func() error {
		return s.Record(testCtx(t), k, receipt, time.Hour)
	})
	// A Cluster replica answers reads once told READONLY.
	r := replicas[1].MustClient(t, 0)
	res := r.DoMulti(testCtx(t), r.B().Readonly().Build(), r.B().Get().Key(cfg.Key(k)).Build())
	if v, err := res[1].ToString(); err != nil || v == "" || v[0] == 'p' {
		t.Errorf("record acknowledged, but node 1's replica holds %q (%v)", v, err)
	}
}

// TestMinReplicas_ACLWithoutWait: an ACL user refused WAIT (the package
// comment's standalone ACL, less WAIT, which +@connection grants) could
// not acknowledge a write, so beside a replica, with
// IDEMPOTENCY_MIN_REPLICAS unset, New refuses to start, saying what to
// grant or set, rather than failing every call; with 0 set, it starts.
func TestMinReplicas_ACLWithoutWait(t *testing.T) {
	primary := redistest.MustStart(t)
	redistest.MustStartReplica(t, primary)
	admin := primary.MustClient(t, 0)
	acl := []string{"SETUSER", "nowait", "reset", "on", ">pw", "~aw:*", "+@connection", "+select", "+set", "+get", "+del", "+evalsha", "+eval", "+ping", "+info", "-wait"}
	if err := admin.Do(testCtx(t), admin.B().Arbitrary("ACL").Args(acl...).Build()).Error(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	url := "redis://nowait:pw@" + primary.Addr()

	cfg := workerStoreConfig(t, map[string]string{"REDIS_URL": url, "IDEMPOTENCY_COMPACT_KEY_PREFIX": "aw:", "IDEMPOTENCY_READ_BOTH_FORMATS": "false"}, "")
	if s, err := redis.New(cfg); err == nil {
		s.Close()
		t.Fatalf("New unset beside a replica, as a user without +wait: no error")
	} else if !errors.Is(err, redis.ErrAckRefused) || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "+wait") || !strings.Contains(err.Error(), "IDEMPOTENCY_MIN_REPLICAS=0") {
		t.Fatalf("New: %v, want WAIT's NOPERM, the +wait the ACL needs, and IDEMPOTENCY_MIN_REPLICAS=0", err)
	}

	cfg = workerStoreConfig(t, map[string]string{"REDIS_URL": url, "IDEMPOTENCY_COMPACT_KEY_PREFIX": "aw:", "IDEMPOTENCY_READ_BOTH_FORMATS": "false"}, "0")
	MustStore(t, cfg)
}
