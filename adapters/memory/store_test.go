package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, keep time.Duration) ports.IdempotencyStore {
			return memory.NewWithConfig(memory.Config{KeepAbandoned: keep})
		},
	})
}

// TestStoreHonoursTheTTLsItIsGiven: on the store's clock, a sent record
// lives exactly the ttl Record is given, and an abandoned claim exactly its
// lease plus the KeepAbandoned the store was built with (IDEMPOTENCY_TTL in
// the worker), not a default of its own.
func TestStoreHonoursTheTTLsItIsGiven(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	type clock struct{ now time.Time }

	t.Run("RecordLivesItsTTL", func(t *testing.T) {
		clk := &clock{now: t0}
		s := memory.NewWithConfig(memory.Config{Now: func() time.Time { return clk.now }, KeepAbandoned: time.Hour})
		const ttl = 3 * time.Hour
		if err := s.Record(ctx, "k", ports.Receipt{ProviderID: "SM1", SentAt: t0}, ttl); err != nil {
			t.Fatal(err)
		}
		clk.now = t0.Add(ttl - time.Millisecond)
		if got := storetest.MustClaim(t, s, ctx, "k", "tok-a", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("claim just before the record's ttl: %v, want already_sent", got.State)
		}
		clk.now = t0.Add(ttl)
		if got := storetest.MustClaim(t, s, ctx, "k", "tok-b", time.Minute); got.State != ports.Claimed {
			t.Fatalf("claim at the record's ttl: %v, want claimed", got.State)
		}
	})

	for _, keep := range []time.Duration{time.Hour, 72 * time.Hour} {
		t.Run("AbandonedClaimLivesLeasePlusKeep/"+keep.String(), func(t *testing.T) {
			clk := &clock{now: t0}
			s := memory.NewWithConfig(memory.Config{Now: func() time.Time { return clk.now }, KeepAbandoned: keep})
			const lease = time.Minute
			storetest.MustClaim(t, s, ctx, "k", "tok-a", lease)
			clk.now = t0.Add(lease + keep - time.Millisecond)
			if got := storetest.MustClaim(t, s, ctx, "k", "tok-b", lease); got.State != ports.TakenOver || got.Lease.Token != "tok-a" {
				t.Fatalf("claim just before lease+keep: %+v, want tok-a's claim taken over", got)
			}
			// tok-b's claim now lives its own lease plus keep.
			clk.now = clk.now.Add(lease + keep)
			if got := storetest.MustClaim(t, s, ctx, "k", "tok-c", lease); got.State != ports.Claimed {
				t.Fatalf("claim at tok-b's lease+keep: %+v, want claimed", got)
			}
		})
	}
}
