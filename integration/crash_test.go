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
// sends are in flight, then starts a new worker in the same group. The dead
// worker's claims outlive their lease; the new worker takes each over and
// asks Twilio before sending. So: no SMS lost and none sent twice; an email
// in flight at the kill (SMTP cannot be asked) is sent again at most once,
// under the same Message-ID.
func TestCrashMidSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{SMTP: true})

	const (
		maxInFlight = 8
		claimTTL    = 5 * time.Second
		events      = 48
		sentAtKill  = 30 // notifications sent before the kill
	)
	env := map[string]string{
		"MAX_IN_FLIGHT":         strconv.Itoa(maxInFlight),
		"IDEMPOTENCY_CLAIM_TTL": claimTTL.String(),
		// Below the claim TTL, as the config requires: a claim must outlive
		// the send it guards.
		"SEND_TIMEOUT":      "3s",
		"TWILIO_LIST_LAG":   "1s",
		"RECONCILE_TIMEOUT": "30s",
	}
	// Twilio takes each message the moment it arrives and answers 300 ms
	// later: the kill lands between acceptances and their answers.
	if err := rig.Twilio.Fail(ctx, double.Fault{Delay: double.Duration(300 * time.Millisecond), Accept: true}); err != nil {
		t.Fatal(err)
	}
	// The SMTP server likewise takes each email, and replies 300 ms later on
	// average: the records' sends drift apart, and the kill finds some in
	// each channel.
	rig.SMTP.AnswerLate(300 * time.Millisecond)
	first := rig.StartWorker(env)

	evs, phones := faultSMSEvents("k", events)
	emails := make([]string, events)
	for i := range evs {
		emails[i] = fmt.Sprintf("crash-%03d@harborlight.test", i)
		evs[i].Email, evs[i].Channels = emails[i], []string{"sms", "email"}
	}
	rig.Publish(ctx, evs...) // each its own shipment: nothing waits on key order
	if _, err := first.WaitLog("notification_sent", sentAtKill, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := first.Kill(ctx); err != nil {
		t.Fatal(err)
	}

	// The dead worker's state, frozen: a pending claim is a notification it
	// had claimed and not recorded as sent, i.e. in flight. It must outlive
	// its lease, to be found.
	atKill := rig.Values(ctx)
	pendingEmail := map[string]bool{}
	for _, e := range evs {
		if strings.HasPrefix(atKill[rig.Key("email", e.ID)], "pending:") {
			pendingEmail[e.ID] = true
		}
	}
	pending := 0
	for k, v := range atKill {
		if !strings.HasPrefix(v, "pending:") {
			continue
		}
		pending++
		if ttl, ok, err := rig.Redis.PTTL(ctx, k); err == nil && ok && ttl <= claimTTL {
			t.Errorf("pending claim %s has PTTL %v: it would expire with its lease (%v) and be forgotten", k, ttl, claimTTL)
		}
	}
	t.Logf("at the kill: %d claims pending (MAX_IN_FLIGHT %d), %d of them email; %d SMS accepted by the double",
		pending, maxInFlight, len(pendingEmail), len(faultMessages(ctx, t, rig)))
	if pending == 0 {
		t.Fatal("no claim was pending at the kill: no send was in flight, so the scenario proved nothing")
	}

	// The restart: a new worker in the same group, as a deployment would
	// start one.
	second := integration.StartWorkerProcess(t, rig.WorkerEnv(env))
	if err := second.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Nothing lost: every notification reached its provider.
	rig.WaitSMS(ctx, phones, 90*time.Second)
	faultWait(t, 90*time.Second, "an email to every recipient", func() (bool, string) {
		missing := 0
		for _, e := range emails {
			if rig.SMTP.Delivered(e) == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d recipients without an email", missing, len(emails))
	})
	rig.WaitCommitted(ctx, 60*time.Second)

	got := rig.SMSCount(ctx)
	for i, p := range phones {
		if got[p] != 1 {
			t.Errorf("event %s: %d SMS at the double, want exactly 1", evs[i].ID, got[p])
		}
	}
	resent := 0
	for i, e := range emails {
		ids := rig.SMTP.MessageIDs(e)
		switch {
		case len(ids) > 2:
			t.Errorf("event %s: %d emails, want at most 2", evs[i].ID, len(ids))
		case len(ids) == 2 && !pendingEmail[evs[i].ID]:
			t.Errorf("event %s: sent twice, yet its email was not in flight at the kill", evs[i].ID)
		case len(ids) == 2 && ids[0] != ids[1]:
			t.Errorf("event %s: resent under Message-ID %s, first sent under %s", evs[i].ID, ids[1], ids[0])
		case len(ids) == 2:
			resent++
		}
	}
	t.Logf("after the restart: %d SMS for %d notifications (0 duplicates allowed); %d emails resent under their Message-ID (bound: %d in flight); new worker: %d claims taken over, %d reconciled delivered, %d not delivered, %d resent by policy, %d replays suppressed",
		len(faultMessages(ctx, t, rig)), events, resent, len(pendingEmail), second.Count("claim_taken_over"),
		second.Count("reconciled_delivered"), second.Count("reconciled_not_delivered"), second.Count("unknown_outcome_resent"),
		second.Count("duplicate_suppressed"))

	values := rig.Values(ctx)
	for _, e := range evs {
		for _, ch := range []string{"sms", "email"} {
			if v := values[rig.Key(ch, e.ID)]; !isSentRecord(v) {
				t.Errorf("%s key of %s holds %q after the restart, want a sent record", ch, e.ID, v)
			}
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
