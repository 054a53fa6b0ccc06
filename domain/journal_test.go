package domain_test

import (
	"errors"
	"testing"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// TestService_Journal: what the journal keeps for a delivery's retries and
// for replays, as Handle shows it.
func TestService_Journal(t *testing.T) {
	// A store down long enough for more owed records than the ledger holds:
	// the debt of the record's SMS is dropped, but the record's own retry
	// still skips it, as it skips what it delivered whatever the store says.
	t.Run("LedgerFullStillSkipsTheRecordsOwnDelivery", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) { c.LedgerSize = 2 })
		w.storeDown()
		w.email.FailFunc = failFirst(1, errors.New("451 4.3.0 try again later"))
		rec := record(event("e1", "sms", "email"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Retryable {
			t.Fatalf("attempt 1: %v, want retryable", err)
		}
		for _, id := range []string{"e2", "e3"} {
			if err := w.attempt(t, record(event(id, "sms"))); err != nil {
				t.Fatal(err)
			}
		}
		if owed, evicted := w.svc.Owed(); owed != 2 || evicted != 1 {
			t.Fatalf("owed %d, evicted %d; want 2 and 1 (e1's SMS dropped)", owed, evicted)
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if n := len(w.sms.Sent()); n != 3 {
			t.Fatalf("provider got %d SMS, want 3: e1's retry sent its SMS again", n)
		}
		if n := len(w.logs.Events(t, "notification_delivered_earlier")); n != 1 {
			t.Fatalf("%d notification_delivered_earlier lines, want 1", n)
		}
	})

	// A record finished leaves nothing of its deliveries: a replay of it
	// asks the store, which holds its record.
	t.Run("FinishedRecordLeavesItToTheStore", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		rec := record(event("e1", "sms"))
		if err := w.attempt(t, rec); err != nil {
			t.Fatal(err)
		}
		if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatal(err)
		}
		dups := w.logs.Events(t, "duplicate_suppressed")
		if len(dups) != 1 || dups[0]["recorded"] != nil {
			t.Fatalf("duplicate_suppressed lines %v, want one from the store's record", dups)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("provider got %d SMS, want 1", n)
		}
	})

	// Attempts without a DeliveryID share nothing: the second is a replay,
	// judged by the store.
	t.Run("NoDeliveryIDSharesNothing", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.email.FailFunc = failFirst(1, errors.New("451 4.3.0 try again later"))
		rec := record(event("e1", "sms", "email"))
		rec.DeliveryID = 0
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Retryable {
			t.Fatalf("attempt 1: %v, want retryable", err)
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if n := len(w.logs.Events(t, "notification_delivered_earlier")); n != 0 {
			t.Fatalf("%d notification_delivered_earlier lines, want none", n)
		}
		if w.outcomes[ports.OutcomeDuplicate] != 1 || len(w.sms.Sent()) != 1 {
			t.Fatalf("outcomes %v, %d SMS; want the SMS a duplicate, sent once", w.outcomes, len(w.sms.Sent()))
		}
	})
}
