package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// TestWithRedis_ReplicaLag: with IDEMPOTENCY_MIN_REPLICAS, a primary that
// answers but whose replica does not acknowledge fails every claim, and the
// breaker counts those failures and opens (ADR-0006: no replica, no
// durable answer); once the replica catches up, the probe closes it and
// claims succeed, each on the replica when it returns.
func TestWithRedis_ReplicaLag(t *testing.T) {
	primary := redistest.MustStart(t)
	replica, link := redistest.MustStartReplica(t, primary)
	onReplica := replica.MustClient(t, 0)
	// The store timeout is generous: it bounds the WAIT of the claim made
	// before the lag, which a healthy replica must acknowledge within it
	// whatever the machine's load; no assertion here is about its length.
	cfg := redis.Config{URL: primary.URL(), Format: redis.Readable, KeyPrefix: "lag:", Timeout: 2 * time.Second, MinReplicas: 1}
	mustAcknowledge(t, primary)
	store, err := redis.New(cfg)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(store.Close)
	// A cooldown long enough that the state read right after the third
	// failure still sees the circuit open, whatever the machine's load.
	b := MustBreaker(t, store, breaker.Config{Failures: 3, Cooldown: 2 * time.Second, Probe: store.Ping})
	ctx := context.Background()
	if _, err := b.Claim(ctx, "before", "tok", "", "", time.Minute); err != nil {
		t.Fatalf("Claim before the lag: %v", err)
	}

	link.Hold()
	for i := range 3 {
		if _, err := b.Claim(ctx, fmt.Sprint("lagging-", i), "tok", "", "", time.Minute); !errors.Is(err, redis.ErrNotReplicated) {
			t.Fatalf("Claim %d while the replica lags: %v, want ErrNotReplicated", i, err)
		}
	}
	if got := b.State(); got != breaker.StateOpen {
		t.Fatalf("breaker %s after 3 claims short of their replica, want %s", got, breaker.StateOpen)
	}

	link.Release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := b.Claim(ctx, "after", "tok", "", "", time.Minute)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no claim succeeded within 10s of the replica catching up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v, err := onReplica.Do(ctx, onReplica.B().Get().Key(cfg.Key("after")).Build()).ToString(); err != nil {
		t.Fatalf("the claim that succeeded is not on the replica: %q, %v", v, err)
	}
}

// mustAcknowledge waits until primary's replica acknowledges a write (WAIT
// 1 answers 1): in sync is not yet acknowledging promptly on a busy machine.
func mustAcknowledge(tb testing.TB, primary *redistest.Server) {
	tb.Helper()
	c := primary.MustClient(tb, 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := c.Do(ctx, c.B().Wait().Numreplicas(1).Timeout(1000).Build()).AsInt64()
		cancel()
		if err == nil && n >= 1 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the replica acknowledged no write within 30s: %d, %v", n, err)
		}
	}
}
