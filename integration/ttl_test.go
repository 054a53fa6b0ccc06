//go:build integration

package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/internal/wait"
)

// TestIdempotencyTTL is scenario 7: the sent record lives for
// IDEMPOTENCY_TTL, no more and no less. Right after a send the raw key's
// PTTL is the configured TTL (not the claim TTL, not forever). Once it
// expired, a replay of the same event is older than MAX_EVENT_AGE (whose
// default is IDEMPOTENCY_TTL) and is skipped as stale, not sent again: the
// window ADR-0006 first accepted after the key is gone is closed.
func TestIdempotencyTTL(t *testing.T) {
	t.Parallel()
	// A TTL well above the claim TTL, so a record written with the claim's
	// lifetime (or none) cannot pass for it. The claim TTL must exceed the
	// send timeout, two store timeouts and the clock skew allowance (config
	// validation): 2s over a send timeout of 1s, ample for the double.
	const (
		// Also the default MAX_EVENT_AGE: the first send must come within
		// it of the event's occurred_at, group join included.
		ttl      = 6 * time.Second
		claimTTL = 2 * time.Second
		// The PTTL is read within milliseconds of the record's SET; the
		// margin covers a slow, loaded machine.
		margin = 500 * time.Millisecond
	)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p := startPeerStack(t, "ttl")
	env := map[string]string{
		"IDEMPOTENCY_TTL":       ttl.String(),
		"IDEMPOTENCY_CLAIM_TTL": claimTTL.String(),
		"SEND_TIMEOUT":          "1s",
	}
	evs := makeEvents(p.RunID, 0, 1, 1) // event 0: SMS only
	ev := evs[0]
	key := storeKey(p.KeyPrefix, "sms", ev.EventID)

	first := p.startWorker(t, integration.StartWorkerProcess, "first", env)
	p.publish(ctx, t, evs)

	// Watch the raw key, every wait.Every, until it turns from the claim into the
	// sent record, then read its PTTL at once: the read must follow the
	// record's SET closely.
	var val string
	var pttl time.Duration
	recordSeen := wait.For(t, 30*time.Second, "a sent record under "+key, func() bool {
		v, ok, err := p.Redis.Get(ctx, key)
		if err != nil || !ok || !isSentRecord(v) {
			return false
		}
		val = v
		pttl, _, err = p.Redis.PTTL(ctx, key)
		return err == nil
	})
	t.Logf("%s = %q, PTTL %v right after the send", key, val, pttl)

	t.Run("PTTLIsTheConfiguredTTL", func(t *testing.T) {
		if pttl <= ttl-margin || pttl > ttl {
			t.Errorf("PTTL %v right after the send, want in (%v, %v]: IDEMPOTENCY_TTL, not the claim TTL %v", pttl, ttl-margin, ttl, claimTTL)
		}
	})

	p.waitDelivered(ctx, t, evs, 30*time.Second)
	// Stop and rewind while the record counts down, so the replay can start
	// the moment it expires.
	stopWorker(ctx, t, first, "first")
	p.rewindGroup(ctx, t)

	gone := wait.For(t, ttl+10*time.Second, key+" to expire", func() bool {
		_, exists, err := p.Redis.PTTL(ctx, key)
		return err == nil && !exists
	})
	t.Run("RecordLivesForTheTTL", func(t *testing.T) {
		// Polled every few milliseconds, so gone-recordSeen is the key's
		// lifetime give or take the poll: it must not vanish early.
		if lived := gone.Sub(recordSeen); lived < ttl-margin {
			t.Errorf("the sent record was gone %v after it appeared, want about %v", lived, ttl)
		}
	})

	second := p.startWorker(t, integration.StartWorkerProcess, "second (replay after expiry)", env)
	p.waitCommittedToEnd(ctx, t, 30*time.Second)
	stopWorker(ctx, t, second, "second")

	t.Run("ReplayAfterExpiryIsSkippedAsStale", func(t *testing.T) {
		sms, err := p.Twilio.Messages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(sms) != 1 || sms[0].To != ev.Phone {
			t.Fatalf("double holds %+v; want the one SMS to %s of the first send, none from the replay", sms, ev.Phone)
		}
		if n := second.Count("stale_event_skipped"); n != 1 {
			t.Errorf("the replay after expiry logged stale_event_skipped %d times, want 1", n)
		}
		if n := second.Count("notification_sent"); n != 0 {
			t.Errorf("the replay after expiry logged notification_sent %d times, want 0", n)
		}
		// Skipped before any claim: the key stays gone.
		if v, ok, err := p.Redis.Get(ctx, key); err != nil || ok {
			t.Errorf("%s = %q (exists %v, error %v), want no key: a stale event claims nothing", key, v, ok, err)
		}
	})
}
