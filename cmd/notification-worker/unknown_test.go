package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/wait"
)

// TestMain_UnknownOutcomesReachTwilioOnce sends 8 SMS whose outcome is
// unknown: Twilio answered 503 after taking 2 of them and before taking 2
// more, took 2 and answered after the send timeout, and dropped 2 without
// taking them. Each must reach the double exactly once: the 4 taken are
// found in its Messages list and recorded, the 4 others sent again once
// the list is final. Each is asked about on schedule, at most 3 list
// requests, while its record waits without spending a retry: none is
// retried as retryable or unavailable (no outage alert) and none
// dead-lettered.
func TestMain_UnknownOutcomesReachTwilioOnce(t *testing.T) {
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"SEND_TIMEOUT":      "1s",
		"TWILIO_LIST_LAG":   "2s",
		"RECONCILE_TIMEOUT": "30s",
	})
	evs, _ := sampleEvents(8)
	what := []string{"503 after taking it", "taken, answered late", "503 before taking it", "dropped"}
	for i := range evs {
		evs[i].Channels = []string{"sms"}
		f := double.Fault{To: evs[i].Recipient.Phone, Count: 1}
		switch i % 4 {
		case 0:
			f.Accept, f.Status = true, http.StatusServiceUnavailable
		case 1:
			f.Accept, f.Delay = true, double.Duration(3*time.Second) // taken, answered too late
		case 2:
			f.Status = http.StatusServiceUnavailable
		case 3:
			f.Drop = true // taken off the wire, never accepted
		}
		p.twilio.Fail(f)
	}
	MustPublish(t, p.brokers, p.topic, eventMessages(evs)...)
	wait.For(t, waitWithin, "8 SMS sent", func() (bool, string) {
		s := scrape(t, p.m)
		sent := sumOf(s, "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
		return sent == 8, fmt.Sprintf("sent %v, unknown %v, reconciliations %v", sent,
			sumOf(s, "notification_worker_outcome_unknown_total{"), sumOf(s, "notification_worker_reconciliations_total{"))
	})
	perPhone := map[string]int{}
	for _, m := range p.twilio.Messages() {
		perPhone[m.To]++
	}
	for i, ev := range evs {
		phone := ev.Recipient.Phone
		if n := perPhone[phone]; n != 1 {
			t.Errorf("SMS %d (%s): the double accepted %d, want exactly 1", i, what[i%4], n)
		}
		if n := p.twilio.ListRequests(phone); n < 1 || n > 3 {
			t.Errorf("SMS %d (%s): %d list requests, want 1 to 3", i, what[i%4], n)
		}
	}
	s := scrape(t, p.m)
	if got := sumOf(s, "notification_worker_outcome_unknown_total{", `channel="sms"`); got != 8 {
		t.Errorf("outcome_unknown_total = %v, want 8", got)
	}
	if got := sumOf(s, "notification_worker_reconciliations_total{", `result="delivered"`); got != 4 {
		t.Errorf("reconciliations delivered = %v, want 4", got)
	}
	if got := sumOf(s, "notification_worker_reconciliations_total{", `result="not_delivered"`); got != 4 {
		t.Errorf("reconciliations not delivered = %v, want 4", got)
	}
	for _, kind := range []string{"retryable", "unavailable"} {
		if got := sumOf(s, "notification_worker_retries_total{", `kind="`+kind+`"`); got != 0 {
			t.Errorf("retries of kind %s: %v, want 0 (a send of unknown outcome waits as paced)", kind, got)
		}
	}
	if got := sumOf(s, "notification_worker_retries_total{", `kind="paced"`); got == 0 {
		t.Errorf("no paced retries: the records whose sends were unknown did not wait as paced")
	}
	if got := sumOf(s, "notification_worker_records_dead_lettered_total{"); got != 0 {
		t.Errorf("%v records dead-lettered, want none", got)
	}
}
