package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// TestRateLimit_SendsAtTheProvidersPace runs a backlog of SMS through a
// worker whose SMS_RATE_LIMIT is below the pace the Twilio double enforces
// per sender: the double never has to refuse a send (429), every event is
// sent exactly once, and none is dead-lettered. Without the limit the
// backlog goes at the double as fast as MAX_IN_FLIGHT allows, and the
// double refuses most of it.
func TestRateLimit_SendsAtTheProvidersPace(t *testing.T) {
	const events = 30
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"SMS_RATE_LIMIT": "8",
		"SMS_RATE_BURST": "1",
		"MAX_IN_FLIGHT":  "16",
	})
	p.twilio.LimitRate(double.RateLimit{PerSecond: 10, Burst: 2})

	ev, _ := sampleEvents(events)
	for i := range ev {
		ev[i].Channels = []string{"sms"}
		ev[i].ShipmentID = fmt.Sprintf("SHP-RATE-%03d", i) // every one its own key: all may go at once
	}
	start := time.Now()
	MustPublish(t, p.brokers, p.topic, eventMessages(ev)...)
	waitFor(t, "every SMS sent", func() (bool, string) {
		got := sumOf(scrape(t, p.m), "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
		return got == events, fmt.Sprintf("SMS counted sent: %v of %d", got, events)
	})
	took := time.Since(start)

	if n := p.twilio.RateLimited(); n != 0 {
		t.Errorf("the double refused %d sends for its pace (429), want 0: the worker went faster than SMS_RATE_LIMIT", n)
	}
	msgs := p.twilio.Messages()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.To]++
	}
	for _, e := range ev {
		if seen[e.Recipient.Phone] != 1 {
			t.Errorf("SMS to %s accepted %d times, want 1", e.Recipient.Phone, seen[e.Recipient.Phone])
		}
	}
	if len(msgs) != events {
		t.Errorf("the double accepted %d SMS, want %d", len(msgs), events)
	}
	s := scrape(t, p.m)
	if dl := sumOf(s, "notification_worker_records_dead_lettered_total{"); dl != 0 {
		t.Errorf("%v records dead-lettered, want 0", dl)
	}
	// At 8/s, burst 1: the last of 30 goes no sooner than 29 Intervals
	// after the first.
	if least := 29 * time.Second / 8; took < least {
		t.Errorf("%d SMS took %v, less than %v: not paced", events, took, least)
	}
	if got := sumOf(s, "notification_worker_rate_limit_wait_seconds_count{", `channel="sms"`); got != events {
		t.Errorf("the wait histogram counted %v turns, want %d", got, events)
	}
	t.Logf("%d SMS in %v; double refused %d", events, took, p.twilio.RateLimited())
}
