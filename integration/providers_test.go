//go:build integration

package integration_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// TestProviderFailures makes each provider fail, temporarily and for good,
// under one running worker (issue 4, scenario 4). A temporary failure is
// retried and the notification sent once; a permanent one is dead-lettered
// once, with its reason, and the records after it on the same partition
// still go out. The subtests share the worker and run in order; each uses
// its own shipment, so it asserts on its own records only.
func TestProviderFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{SMTP: true})
	const retryMaxAttempts = "5"
	w := rig.StartWorker(map[string]string{"RETRY_MAX_ATTEMPTS": retryMaxAttempts})

	t.Run("TwilioTooManyRequestsIsRetriedAndSentOnce", func(t *testing.T) {
		// 429: Twilio did not process the request, a definite "not sent"
		// (a 5xx is an unknown outcome, reconciled instead: see
		// docs/reconciliation.md).
		ev := faultEvent{ID: "evt-twilio-429", Shipment: "SHP-twilio-429", Phone: faultPhone("t", 1), Channels: []string{"sms"}}
		if err := rig.Twilio.Fail(ctx, double.Fault{To: ev.Phone, Status: 429, Count: 3}); err != nil {
			t.Fatal(err)
		}
		rig.Publish(ctx, ev)
		rig.WaitSentRecord(ctx, rig.Key("sms", ev.ID), 20*time.Second)

		if n := rig.SMSCount(ctx)[ev.Phone]; n != 1 {
			t.Fatalf("SMS accepted for %s: %d, want 1", ev.Phone, n)
		}
		attempts, err := rig.Twilio.Attempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var statuses []int
		for _, a := range attempts {
			if a.To == ev.Phone {
				statuses = append(statuses, a.Status)
			}
		}
		if want := []int{429, 429, 429, 201}; !slices.Equal(statuses, want) {
			t.Fatalf("attempts at the double for %s answered %v, want %v", ev.Phone, statuses, want)
		}
		faultNotDeadLettered(ctx, t, rig, w, ev.Shipment)
	})

	t.Run("SMTPTemporaryFailureIsRetriedAndSentOnce", func(t *testing.T) {
		ev := faultEvent{ID: "evt-smtp-451", Shipment: "SHP-smtp-451", Email: "retry@example.com", Channels: []string{"email"}}
		rig.SMTP.FailTemporarily(ev.Email, 2)
		rig.Publish(ctx, ev)
		rig.WaitSentRecord(ctx, rig.Key("email", ev.ID), 20*time.Second)

		if n := rig.SMTP.Delivered(ev.Email); n != 1 {
			t.Fatalf("messages delivered to %s: %d, want 1", ev.Email, n)
		}
		// Two answered 451, the third accepted: retried, not re-sent.
		if n := rig.SMTP.Attempts(ev.Email); n != 3 {
			t.Fatalf("RCPT TO %s seen %d times, want 3", ev.Email, n)
		}
		faultNotDeadLettered(ctx, t, rig, w, ev.Shipment)
	})

	t.Run("TwilioInvalidNumberIsDeadLetteredAndPartitionMovesOn", func(t *testing.T) {
		const shipment = "SHP-twilio-21211"
		bad := faultEvent{ID: "evt-twilio-21211", Shipment: shipment, Phone: faultPhone("t", 2), Channels: []string{"sms"}}
		if err := rig.Twilio.Fail(ctx, double.Fault{To: bad.Phone, Status: 400, Code: 21211}); err != nil {
			t.Fatal(err)
		}
		// Same shipment, so same partition and behind the bad one in order.
		next := []faultEvent{
			{ID: "evt-twilio-21211-next-1", Shipment: shipment, Phone: faultPhone("t", 3), Channels: []string{"sms"}},
			{ID: "evt-twilio-21211-next-2", Shipment: shipment, Phone: faultPhone("t", 4), Channels: []string{"sms"}},
		}
		recs := rig.Publish(ctx, append([]faultEvent{bad}, next...)...)
		rig.WaitSMS(ctx, []string{next[0].Phone, next[1].Phone}, 20*time.Second)

		dl := faultDeadLetteredOnce(ctx, t, rig, w, recs[0], "permanent")
		if reason := faultHeader(dl, "dlq.reason"); !strings.Contains(reason, "21211") {
			t.Errorf("dlq.reason %q does not name Twilio's code 21211", reason)
		}
		attempts, err := rig.Twilio.Attempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range attempts {
			if a.To == bad.Phone {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the invalid number was tried %d times, want 1: a permanent failure is not retried", n)
		}
		if got := rig.SMSCount(ctx); got[bad.Phone] != 0 || got[next[0].Phone] != 1 || got[next[1].Phone] != 1 {
			t.Errorf("SMS by recipient %v: want none to the invalid number and one to each next one", got)
		}
		if _, ok, _ := rig.Redis.Get(ctx, rig.Key("sms", bad.ID)); ok {
			t.Errorf("the dead-lettered notification left a key in Redis: its claim was not released")
		}
	})

	t.Run("SMTPRejectedAddressIsDeadLetteredAndPartitionMovesOn", func(t *testing.T) {
		const shipment = "SHP-smtp-550"
		bad := faultEvent{ID: "evt-smtp-550", Shipment: shipment, Email: "nobody@example.com", Channels: []string{"email"}}
		rig.SMTP.Reject(bad.Email)
		next := []faultEvent{
			{ID: "evt-smtp-550-next-1", Shipment: shipment, Email: "next1@example.com", Channels: []string{"email"}},
			{ID: "evt-smtp-550-next-2", Shipment: shipment, Email: "next2@example.com", Channels: []string{"email"}},
		}
		recs := rig.Publish(ctx, append([]faultEvent{bad}, next...)...)
		for _, e := range next {
			rig.WaitSentRecord(ctx, rig.Key("email", e.ID), 20*time.Second)
		}

		dl := faultDeadLetteredOnce(ctx, t, rig, w, recs[0], "permanent")
		if reason := faultHeader(dl, "dlq.reason"); !strings.Contains(reason, "550") {
			t.Errorf("dlq.reason %q does not name the SMTP reply 550", reason)
		}
		if n := rig.SMTP.Attempts(bad.Email); n != 1 {
			t.Errorf("the rejected address was tried %d times, want 1: a permanent failure is not retried", n)
		}
		for _, e := range next {
			if n := rig.SMTP.Delivered(e.Email); n != 1 {
				t.Errorf("messages delivered to %s: %d, want 1", e.Email, n)
			}
		}
	})

	t.Run("TwilioTooManyRequestsBeyondRetryBudgetWaits", func(t *testing.T) {
		// More 429s than RETRY_MAX_ATTEMPTS: backpressure, not a failure of
		// the message. The record waits (spending no retries), keeps its
		// place before the next record of its shipment, and is sent once.
		const shipment = "SHP-twilio-429-long"
		ev := faultEvent{ID: "evt-twilio-429-long", Shipment: shipment, Phone: faultPhone("t", 7), Channels: []string{"sms"}}
		next := faultEvent{ID: "evt-twilio-429-long-next", Shipment: shipment, Phone: faultPhone("t", 8), Channels: []string{"sms"}}
		budget, _ := strconv.Atoi(retryMaxAttempts)
		if err := rig.Twilio.Fail(ctx, double.Fault{To: ev.Phone, Status: 429, Count: budget + 2}); err != nil {
			t.Fatal(err)
		}
		rig.Publish(ctx, ev, next)
		rig.WaitSentRecord(ctx, rig.Key("sms", next.ID), 90*time.Second)

		attempts, err := rig.Twilio.Attempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var statuses []int
		order := map[string]int{}
		for i, a := range attempts {
			if a.To == ev.Phone {
				statuses = append(statuses, a.Status)
			}
			if a.Status == 201 {
				order[a.To] = i
			}
		}
		if len(statuses) != budget+3 || statuses[len(statuses)-1] != 201 {
			t.Fatalf("attempts for %s answered %v, want %d 429s and then 201", ev.Phone, statuses, budget+2)
		}
		if order[ev.Phone] > order[next.Phone] {
			t.Errorf("the next record of the shipment was sent before the rate-limited one: key order lost")
		}
		if got := rig.SMSCount(ctx); got[ev.Phone] != 1 || got[next.Phone] != 1 {
			t.Errorf("SMS by recipient %v: want one to each", got)
		}
		faultNotDeadLettered(ctx, t, rig, w, shipment)
	})

	t.Run("TwilioOutageBeyondRetryBudgetIsDeadLettered", func(t *testing.T) {
		const shipment = "SHP-twilio-exhausted"
		bad := faultEvent{ID: "evt-twilio-exhausted", Shipment: shipment, Phone: faultPhone("t", 5), Channels: []string{"sms"}}
		// 408 for good, for this number only: a retryable failure, so the
		// retry budget runs out. (A 429 is backpressure and spends no
		// retries: see TwilioTooManyRequestsBeyondRetryBudgetWaits.)
		if err := rig.Twilio.Fail(ctx, double.Fault{To: bad.Phone, Status: 408}); err != nil {
			t.Fatal(err)
		}
		next := faultEvent{ID: "evt-twilio-exhausted-next", Shipment: shipment, Phone: faultPhone("t", 6), Channels: []string{"sms"}}
		recs := rig.Publish(ctx, bad, next)
		rig.WaitSMS(ctx, []string{next.Phone}, 30*time.Second)

		dl := faultDeadLetteredOnce(ctx, t, rig, w, recs[0], "retryable")
		if reason := faultHeader(dl, "dlq.reason"); !strings.Contains(reason, "retries exhausted after "+retryMaxAttempts) {
			t.Errorf("dlq.reason %q does not say the %s attempts ran out", reason, retryMaxAttempts)
		}
		attempts, err := rig.Twilio.Attempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range attempts {
			if a.To == bad.Phone {
				n++
			}
		}
		if strconv.Itoa(n) != retryMaxAttempts {
			t.Errorf("the failing number was tried %d times, want RETRY_MAX_ATTEMPTS=%s", n, retryMaxAttempts)
		}
	})

	t.Run("OffsetsCommittedPastEveryRecord", func(t *testing.T) {
		rig.WaitCommitted(ctx, 15*time.Second)
	})
}

// faultDeadLetteredOnce checks rec reached the dead letter topic exactly
// once, with its key, value, kind and origin, and returns the dead letter.
func faultDeadLetteredOnce(ctx context.Context, t *testing.T, rig *faultRig, w *integration.Worker, rec *kgo.Record, kind string) *kgo.Record {
	t.Helper()
	if _, err := w.WaitLog("event_dead_lettered", 1, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	var found []*kgo.Record
	for _, dl := range rig.DeadLetters(ctx, w.Count("event_dead_lettered")) {
		if faultHeader(dl, "dlq.original.partition") == strconv.Itoa(int(rec.Partition)) &&
			faultHeader(dl, "dlq.original.offset") == strconv.FormatInt(rec.Offset, 10) {
			found = append(found, dl)
		}
	}
	if len(found) != 1 {
		t.Fatalf("dead letters for %s/%d@%d: %d, want exactly 1", rec.Topic, rec.Partition, rec.Offset, len(found))
	}
	dl := found[0]
	if string(dl.Key) != string(rec.Key) || string(dl.Value) != string(rec.Value) {
		t.Errorf("dead letter key %q value %q, want the original %q %q", dl.Key, dl.Value, rec.Key, rec.Value)
	}
	if got := faultHeader(dl, "dlq.original.topic"); got != rec.Topic {
		t.Errorf("dlq.original.topic %q, want %q", got, rec.Topic)
	}
	if got := faultHeader(dl, "dlq.kind"); got != kind {
		t.Errorf("dlq.kind %q, want %q", got, kind)
	}
	if faultHeader(dl, "dlq.reason") == "" {
		t.Error("dead letter without a dlq.reason")
	}
	t.Logf("dead letter of %s/%d@%d: kind %s, reason %q", rec.Topic, rec.Partition, rec.Offset, faultHeader(dl, "dlq.kind"), faultHeader(dl, "dlq.reason"))
	return dl
}

// faultNotDeadLettered checks no record of shipment was dead-lettered.
func faultNotDeadLettered(ctx context.Context, t *testing.T, rig *faultRig, w *integration.Worker, shipment string) {
	t.Helper()
	for _, dl := range rig.DeadLetters(ctx, w.Count("event_dead_lettered")) {
		if string(dl.Key) == shipment {
			t.Fatalf("shipment %s was dead-lettered: %s", shipment, faultHeader(dl, "dlq.reason"))
		}
	}
}
