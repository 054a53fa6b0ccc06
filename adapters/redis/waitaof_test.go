package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// TestWaitAOF: on a server with WAITAOF (Redis 7.2's protocol), a store
// with IDEMPOTENCY_MIN_REPLICAS=1 and IDEMPOTENCY_WAIT_AOF=true starts,
// and its claims, takeovers and records return only once the replica has
// them in its append-only file.
func TestWaitAOF(t *testing.T) {
	primary := redistest.MustStartWaitAOF(t)
	replica, _ := redistest.MustStartReplica(t, primary, "--appendfsync", "always")
	onReplica := replica.MustClient(t, 0)
	cfg := redis.Config{URL: primary.URL(), Timeout: time.Second, MinReplicas: 1, WaitAOF: true, CompactPrefix: "wa:"}
	s, err := redis.New(cfg)
	if err != nil {
		t.Fatalf("New with WaitAOF on a server with WAITAOF: %v", err)
	}
	t.Cleanup(s.Close)
	// Not what is tested: the time the replica takes. Its first write to
	// its AOF waits for the rewrite that follows its initial sync.
	patient := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}

	k := uniqueKey(t)
	if c, err := s.Claim(patient(t), k, "tok", "", "", time.Minute); err != nil || c.State != ports.Claimed {
		t.Fatalf("Claim: %+v, %v", c, err)
	}
	claim, ok := MustGet(t, onReplica, cfg.Key(k))
	if !ok || !replica.MustAOFHold(t, claim) {
		t.Fatalf("claim acknowledged, but the replica's AOF lacks it (on the replica: %q, %v)", claim, ok)
	}
	if err := s.Record(patient(t), k, receipt, time.Hour); err != nil {
		t.Fatalf("Record: %v", err)
	}
	rec, _ := MustGet(t, onReplica, cfg.Key(k))
	if rec == claim || !replica.MustAOFHold(t, rec) {
		t.Fatalf("record acknowledged, but the replica's AOF lacks it (on the replica: %q)", rec)
	}

	// A takeover, acknowledged the same way (the script's effect is
	// replicated as the SET it made).
	abandoned := uniqueKey(t)
	if _, err := s.Claim(patient(t), abandoned, "dead", "", "", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // its lease passes
	if c, err := s.Claim(patient(t), abandoned, "taker", "", "", time.Minute); err != nil || c.State != ports.TakenOver {
		t.Fatalf("takeover: %+v, %v", c, err)
	}
	if v, ok := MustGet(t, onReplica, cfg.Key(abandoned)); !ok || !replica.MustAOFHold(t, v) {
		t.Fatalf("takeover acknowledged, but the replica's AOF lacks it (on the replica: %q, %v)", v, ok)
	}
}

// TestWaitAOF_ReplicaWithoutAOF: the replica has every write but no
// append-only file, so WAIT counts it and WAITAOF never does. With
// IDEMPOTENCY_WAIT_AOF a claim and a record fail with ErrNotReplicated
// within their budget, the claim given back; with plain WAIT both succeed.
func TestWaitAOF_ReplicaWithoutAOF(t *testing.T) {
	primary := redistest.MustStartWaitAOF(t)
	replica, _ := redistest.MustStartReplica(t, primary, "--appendonly", "no")
	onPrimary, onReplica := primary.MustClient(t, 0), replica.MustClient(t, 0)
	const budget = time.Second
	cfg := redis.Config{URL: primary.URL(), Timeout: budget, MinReplicas: 1, WaitAOF: true, CompactPrefix: "wn:"}
	s := MustStore(t, cfg)
	call := func(what string, f func(ctx context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(testCtx(t), budget)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if took := time.Since(start); took > budget+margin {
			t.Errorf("%s took %v, want at most %v", what, took, budget+margin)
		}
		return err
	}

	k := uniqueKey(t)
	err := call("Claim", func(ctx context.Context) error { _, err := s.Claim(ctx, k, "tok", "", "", time.Minute); return err })
	if !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("Claim with the replica's AOF off: %v, want ErrNotReplicated", err)
	}
	if v, ok := MustGet(t, onPrimary, cfg.Key(k)); ok {
		t.Errorf("key after a claim that fell short holds %q, want it released", v)
	}

	r := uniqueKey(t)
	err = call("Record", func(ctx context.Context) error {
		return s.Record(ctx, r, ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
	})
	if !errors.Is(err, redis.ErrNotReplicated) {
		t.Fatalf("Record with the replica's AOF off: %v, want ErrNotReplicated", err)
	}
	// The record did reach the replica's memory: what was missing is its
	// AOF, which only WAITAOF asks for.
	wait.For(t, 10*time.Second, "the record on the replica", func() error {
		if _, ok := MustGet(t, onReplica, cfg.Key(r)); !ok {
			return errors.New("absent")
		}
		return nil
	})

	cfg.WaitAOF, cfg.CompactPrefix = false, "ww:"
	w := MustStore(t, cfg)
	if err := call("Record with WAIT", func(ctx context.Context) error {
		return w.Record(ctx, uniqueKey(t), ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
	}); err != nil {
		t.Fatalf("Record with WAIT, the replica in sync: %v", err)
	}
}

// TestWaitAOF_PromptWithFsyncAlways: a replica that fsyncs every write
// (appendfsync always) acknowledges it to WAITAOF as soon as it has it, so
// a healthy rig's records each succeed well within a 1 s budget. (A
// replica tells the primary what it fsynced when the primary asks, which a
// WAITAOF that blocks does at once, before the replica has fsynced the
// write, and otherwise once a second: the store asks again once the write
// is there.)
func TestWaitAOF_PromptWithFsyncAlways(t *testing.T) {
	primary := redistest.MustStartWaitAOF(t)
	replica, _ := redistest.MustStartReplica(t, primary, "--appendfsync", "always")
	const budget = time.Second
	s := MustStore(t, redis.Config{URL: primary.URL(), Timeout: budget, MinReplicas: 1, WaitAOF: true})
	// The replica's first write to its AOF waits for the rewrite that
	// follows its initial sync: not what is tested.
	wait.For(t, 30*time.Second, "a first acknowledged record", func() error {
		return s.Record(testCtx(t), uniqueKey(t), ports.Receipt{ProviderID: "SM0", SentAt: time.Now()}, time.Hour)
	})
	onReplica := replica.MustClient(t, 0)
	for i := range 10 {
		ctx, cancel := context.WithTimeout(testCtx(t), budget)
		k := uniqueKey(t)
		start := time.Now()
		err := s.Record(ctx, k, ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour)
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("record %d, the replica in sync and fsyncing every write: %v after %v", i, err, took)
		}
		if v, ok := MustGet(t, onReplica, (redis.Config{}).Key(k)); !ok || !replica.MustAOFHold(t, v) {
			t.Fatalf("record %d acknowledged, but the replica's AOF lacks it", i)
		}
	}
}
