//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// TestCrashMidSend kills a worker (SIGKILL: no shutdown, no commit) while
// sends are in flight, then starts a new worker in the same group (issue 4,
// scenario 6). Nothing may be lost; a notification may go out twice only
// if it was in flight at the kill, so duplicates are bounded by the claims
// pending at that moment, which MAX_IN_FLIGHT bounds in turn; and the
// claims the dead worker left expire after IDEMPOTENCY_CLAIM_TTL.
func TestCrashMidSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{})

	const (
		maxInFlight = 8
		claimTTL    = 5 * time.Second
		events      = 48
		sentAtKill  = 12 // notifications sent before the kill
	)
	env := map[string]string{
		"MAX_IN_FLIGHT":         strconv.Itoa(maxInFlight),
		"IDEMPOTENCY_CLAIM_TTL": claimTTL.String(),
		// Below the claim TTL, as the config requires: a claim must outlive
		// the send it guards.
		"SEND_TIMEOUT": "3s",
	}
	// Slow sends, so that at any moment MAX_IN_FLIGHT of them are in the
	// provider's hands: the kill then always lands mid-send.
	if err := rig.Twilio.Fail(ctx, double.Fault{Delay: double.Duration(700 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	first := rig.StartWorker(env)

	evs, phones := faultSMSEvents("k", events)
	rig.Publish(ctx, evs...) // each its own shipment: nothing waits on key order
	if _, err := first.WaitLog("notification_sent", sentAtKill, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := first.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()

	// The dead worker's state, frozen: a pending claim is a notification it
	// had claimed and not recorded as sent, i.e. in flight.
	atKill := rig.Values(ctx)
	var pending []string
	sentRecords := 0
	for k, v := range atKill {
		switch {
		case strings.HasPrefix(v, "pending:"):
			pending = append(pending, k)
			ttl, ok, err := rig.Redis.PTTL(ctx, k)
			if err == nil && ok && (ttl <= 0 || ttl > claimTTL) {
				t.Errorf("pending claim %s has PTTL %v, want within (0, %v]", k, ttl, claimTTL)
			}
		case strings.HasPrefix(v, "sent:"):
			sentRecords++
		}
	}
	smsAtKill := len(faultMessages(ctx, t, rig))
	t.Logf("at the kill: %d claims pending (MAX_IN_FLIGHT %d), %d sent records, %d SMS accepted by the double",
		len(pending), maxInFlight, sentRecords, smsAtKill)
	if len(pending) == 0 {
		t.Fatal("no claim was pending at the kill: no send was in flight, so the scenario proved nothing")
	}
	if len(pending) > maxInFlight {
		t.Fatalf("%d claims pending at the kill, more than MAX_IN_FLIGHT %d", len(pending), maxInFlight)
	}

	// The restart: a new worker in the same group, as a deployment would
	// start one. It must not send what the dead worker may still have in
	// the provider's hands until that claim is gone.
	second := integration.StartWorkerProcess(t, rig.WorkerEnv(env))

	// The abandoned claims expire after the claim TTL (or the new worker,
	// having waited them out, turned them into sent records).
	margin := 3 * time.Second
	faultWait(t, time.Until(killedAt.Add(claimTTL+margin)), "the dead worker's claims to expire", func() (bool, string) {
		var still []string
		for _, k := range pending {
			if v, ok, err := rig.Redis.Get(ctx, k); err != nil || (ok && strings.HasPrefix(v, "pending:")) {
				still = append(still, k)
			}
		}
		return len(still) == 0, fmt.Sprintf("still pending %v after %v", still, time.Since(killedAt).Round(time.Millisecond))
	})
	t.Logf("every claim pending at the kill was gone or sent %v after it", time.Since(killedAt).Round(time.Millisecond))

	if err := second.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Nothing lost: every notification reached the provider at least once.
	rig.WaitSMS(ctx, phones, 60*time.Second)
	rig.WaitCommitted(ctx, 30*time.Second)
	got := rig.SMSCount(ctx)

	// Any duplicate must be one of the notifications in flight at the kill.
	wasPending := map[string]bool{}
	for _, k := range pending {
		wasPending[k] = true
	}
	duplicates := 0
	for i, e := range evs {
		n := got[phones[i]]
		if n <= 1 {
			continue
		}
		duplicates += n - 1
		if key := rig.Key("sms", e.ID); !wasPending[key] {
			t.Errorf("event %s was sent %d times, yet it was not in flight at the kill (key %s held %q)", e.ID, n, key, atKill[key])
		}
	}
	t.Logf("after the restart: %d SMS for %d notifications, %d duplicates; bound: %d in flight at the kill, MAX_IN_FLIGHT %d; new worker suppressed %d replays",
		len(faultMessages(ctx, t, rig)), events, duplicates, len(pending), maxInFlight, second.Count("duplicate_suppressed"))
	if duplicates > len(pending) {
		t.Errorf("%d duplicates, more than the %d notifications in flight at the kill", duplicates, len(pending))
	}

	values := rig.Values(ctx)
	for _, e := range evs {
		if v := values[rig.Key("sms", e.ID)]; !strings.HasPrefix(v, "sent:") {
			t.Errorf("key of %s holds %q after the restart, want a sent record", e.ID, v)
		}
	}
	rig.AssertNoDeadLetters(ctx, time.Second)
}

// faultMessages returns the SMS the double accepted.
func faultMessages(ctx context.Context, t *testing.T, rig *faultRig) []double.Message {
	t.Helper()
	msgs, err := rig.Twilio.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}
