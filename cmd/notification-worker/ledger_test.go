package main

import (
	"fmt"
	"strconv"
	"testing"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
)

// ledgerEvents returns n events on SMS and email, each on a shipment of its
// own, so the worker handles them all at once.
func ledgerEvents(n int) []sampleEvent {
	ev, _ := sampleEvents(n)
	for i := range ev {
		ev[i].Channels = []string{"sms", "email"}
		ev[i].ShipmentID = fmt.Sprintf("%s-%d", ev[i].ShipmentID, i)
	}
	return ev
}

// smsPerRecipient counts the SMS the Twilio double accepted, by number.
func (p *retryPeers) smsPerRecipient() map[string]int {
	n := map[string]int{}
	for _, m := range p.twilio.Messages() {
		n[m.To]++
	}
	return n
}

// waitEmailsSent waits until the worker counted n emails sent (every record's
// last attempt has run, and no later attempt can send anything), saying what
// the peers got meanwhile.
func (p *retryPeers) waitEmailsSent(t *testing.T, n int) {
	t.Helper()
	wait.For(t, waitWithin, fmt.Sprintf("%d emails sent", n), func() (bool, string) {
		got := sumOf(scrape(t, p.m), "notification_worker_notifications_total{", `channel="email"`, `outcome="sent"`)
		return got == float64(n), fmt.Sprintf("emails counted sent: %v; Twilio double accepted %d SMS", got, len(p.twilio.Messages()))
	})
}

// TestMain_LedgerFull runs the worker with a ledger of one and two owed
// records against a killed redis-server, on records whose emails the SMTP
// server refuses at first: a delivery's retries never send its SMS again,
// however many records the store could not take, and a record that finds
// the ledger full waits, unsent, until the store takes the owed ones.
func TestMain_LedgerFull(t *testing.T) {
	for _, size := range []int{1, 2} {
		t.Run("Size"+strconv.Itoa(size)+"RetriesNeverResend", func(t *testing.T) {
			t.Parallel()
			const records, refused = 5, 10
			p := startRetryPeers(t, smtptest.Script{DataReply: func(n int) error {
				if n <= refused {
					return smtpReply(451, gosmtp.EnhancedCode{4, 3, 0}, "try again later")
				}
				return nil
			}}, nil, map[string]string{"IDEMPOTENCY_LEDGER_SIZE": strconv.Itoa(size)})
			p.redis.Kill(t)
			events := ledgerEvents(records)
			MustPublish(t, p.brokers, p.topic, eventMessages(events)...)
			// Every email refused: the records taken meanwhile were retried.
			wait.For(t, waitWithin, "the SMTP server's refusals", func() (bool, string) {
				_, mails := p.smtp.Counts()
				return mails > refused, fmt.Sprintf("%d messages offered", mails)
			})
			p.redis.Restart(t)
			p.waitEmailsSent(t, records)
			for _, ev := range events {
				if n := p.smsPerRecipient()[ev.Recipient.Phone]; n != 1 {
					t.Errorf("%s got %d SMS, want 1", ev.Recipient.Phone, n)
				}
			}
			p.wantAtPeers(t, records, records)
		})
	}

	t.Run("Size1RefusedRecordSendsNothing", func(t *testing.T) {
		t.Parallel()
		p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{"IDEMPOTENCY_LEDGER_SIZE": "1"})
		logs := p.m.Stdout.(*logtest.Buffer)
		p.redis.Kill(t)
		events := ledgerEvents(2)
		MustPublish(t, p.brokers, p.topic, eventMessages(events[:1])...)
		p.waitEmailsSent(t, 1)
		MustPublish(t, p.brokers, p.topic, eventMessages(events[1:])...)
		// Refused more often than its retries allow: a wait, not a failure.
		const budget = 12 // RETRY_MAX_ATTEMPTS' default
		wait.For(t, waitWithin, "the second record refused past its retry budget", func() (bool, string) {
			refusals := sumOf(scrape(t, p.m), "notification_worker_ledger_refusals_total")
			logged := false
			for _, l := range logs.Events(t, "ledger_full") {
				logged = logged || l["event_id"] == events[1].EventID
			}
			return refusals > budget && logged, fmt.Sprintf("ledger_refusals_total %v, ledger_full logged for it: %v", refusals, logged)
		})
		if n := p.smsPerRecipient()[events[1].Recipient.Phone]; n != 0 {
			t.Fatalf("the refused record's SMS went out %d times while the ledger was full", n)
		}
		p.redis.Restart(t)
		p.waitEmailsSent(t, 2)
		p.wantAtPeers(t, 2, 2)
		s := scrape(t, p.m)
		if dead := sumOf(s, "notification_worker_records_dead_lettered_total"); dead != 0 {
			t.Errorf("%v records dead-lettered, want none", dead)
		}
		if waits := sumOf(s, "notification_worker_retries_total{", `kind="unavailable"`); waits <= budget {
			t.Errorf("%v retries counted unavailable, want the refusals", waits)
		}
	})
}
