package breaker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// flakyClaims is the memory store whose Claim fails while failing is set:
// a latency spike that trips the breaker on other records.
func flakyClaims(failing *atomic.Bool) *storetest.Fake {
	f := &storetest.Fake{Store: memory.New(nil)}
	f.ClaimFunc = func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
		if failing.Load() {
			return ports.Claim{}, errDown
		}
		return f.Store.Claim(ctx, key, token, digest, sender, ttl)
	}
	return f
}

// A claim is a promise to record the send or give the key back. The circuit
// opening while the send is in flight must not break that promise, or the
// key stays pending and a replay after the claim TTL sends again.
func TestOpenCircuitLetsClaimsSettle(t *testing.T) {
	ctx := context.Background()
	for _, settle := range []struct {
		name  string
		do    func(b *breaker.Breaker, key string) error
		state ports.ClaimState // what the key holds afterwards
	}{
		{"Record", func(b *breaker.Breaker, key string) error {
			return b.Record(ctx, key, ports.Receipt{ProviderID: "SM1"}, time.Hour)
		}, ports.AlreadySent},
		{"Release", func(b *breaker.Breaker, key string) error { return b.Release(ctx, key, "ours") }, ports.Claimed},
	} {
		t.Run(settle.name, func(t *testing.T) {
			var failing atomic.Bool
			store := flakyClaims(&failing)
			b := MustBreaker(t, store, breaker.Config{Failures: 2, Cooldown: time.Hour, Probe: never})
			if c, err := b.Claim(ctx, "sms:e1", "ours", "", "", time.Minute); err != nil || c.State != ports.Claimed {
				t.Fatalf("Claim: %+v, %v", c, err)
			}
			failing.Store(true)
			for _, k := range []string{"sms:e2", "sms:e3"} {
				_, _ = b.Claim(ctx, k, "other", "", "", time.Minute)
			}
			if b.State() != breaker.StateOpen {
				t.Fatalf("state %q, want open", b.State())
			}

			if err := settle.do(b, "sms:e1"); err != nil {
				t.Fatalf("%s of our claimed key while open: %v", settle.name, err)
			}
			got, _ := store.Store.Claim(ctx, "sms:e1", "probe", "", "", time.Minute)
			if got.State != settle.state {
				t.Fatalf("key holds %v after the %s, want %v", got.State, settle.name, settle.state)
			}
			// Settled once: the next write to that key, and any write to a
			// key never claimed through the breaker, fail fast as before.
			for _, k := range []string{"sms:e1", "sms:e2"} {
				if err := settle.do(b, k); !errors.Is(err, breaker.ErrOpen) {
					t.Fatalf("%s of %s while open: %v, want ErrOpen", settle.name, k, err)
				}
			}
		})
	}
}
