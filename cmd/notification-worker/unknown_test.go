package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// TestMain_UnknownOutcomesReachTwilioOnce sends 8 SMS whose answers never
// arrive: Twilio took 4 of them and answered after the send timeout, and
// dropped the other 4 without taking them. Each must reach the double
// exactly once: the 4 taken are found in its Messages list and recorded,
// the 4 dropped are sent again.
func TestMain_UnknownOutcomesReachTwilioOnce(t *testing.T) {
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"SEND_TIMEOUT":      "1s",
		"TWILIO_LIST_LAG":   "300ms",
		"RECONCILE_TIMEOUT": "30s",
	})
	evs, _ := sampleEvents(8)
	for i := range evs {
		evs[i].Channels = []string{"sms"}
		f := double.Fault{To: evs[i].Recipient.Phone, Count: 1}
		if i < 4 {
			f.Accept, f.Delay = true, double.Duration(3*time.Second) // taken, answered too late
		} else {
			f.Drop = true // taken off the wire, never accepted
		}
		p.twilio.Fail(f)
	}
	MustPublish(t, p.brokers, p.topic, eventMessages(evs)...)
	waitFor(t, "8 SMS sent", func() (bool, string) {
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
		if n := perPhone[ev.Recipient.Phone]; n != 1 {
			t.Errorf("SMS %d (%s): the double accepted %d, want exactly 1", i, map[bool]string{true: "answered late", false: "dropped"}[i < 4], n)
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
}
