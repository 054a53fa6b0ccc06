package domain_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// TestService_Ledger: what the ledger keeps for a delivery's retries and
// for replays, as Handle shows it.
func TestService_Ledger(t *testing.T) {
	// A store down long enough for more owed records than the ledger
	// holds, records on SMS and email whose emails fail on their first
	// attempt, attempted in turn as a source handling them at once does:
	// each record's retries skip its SMS, at every size, and the records
	// the full ledger refused go out once the store has taken the owed
	// ones.
	for _, size := range []int{1, 2} {
		t.Run(fmt.Sprintf("LedgerOf%dRetriesNeverResend", size), func(t *testing.T) {
			w := newWorld(t, domain.FailOpen, func(c *domain.Config) { c.LedgerSize = size })
			up := w.storeDown()
			var mu sync.Mutex
			tried := map[string]bool{}
			w.email.FailFunc = func(m ports.Message) error {
				mu.Lock()
				defer mu.Unlock()
				if !tried[m.IdempotencyKey] {
					tried[m.IdempotencyKey] = true
					return errors.New("451 4.3.0 try again later")
				}
				return nil
			}
			var recs []ports.Record
			for i := range 5 {
				recs = append(recs, record(event(fmt.Sprintf("e%d", i), "sms", "email")))
			}
			done := map[int]bool{}
			for round := 1; len(done) < len(recs); round++ {
				if round > 10 {
					t.Fatalf("%d records finished after 10 rounds", len(done))
				}
				if round == 3 {
					up()
					w.waitOwed(t, 0)
				}
				for i, rec := range recs {
					if done[i] {
						continue
					}
					err := w.attempt(t, rec)
					if k := ports.KindOf(err); err != nil && k != ports.Retryable && k != ports.Unavailable {
						t.Fatalf("round %d, e%d: %v", round, i, err)
					}
					if err == nil {
						done[i] = true
					}
				}
			}
			perKey := map[string]int{}
			for _, m := range w.sms.Sent() {
				perKey[m.IdempotencyKey]++
			}
			if len(perKey) != len(recs) || len(w.sms.Sent()) != len(recs) {
				t.Fatalf("provider got %d SMS, by key %v; want one for each of %d records", len(w.sms.Sent()), perKey, len(recs))
			}
			if _, refused := w.svc.Owed(); refused == 0 {
				t.Fatal("no record was refused with the ledger full")
			}
		})
	}

	// A record its source gives up unfinished (its retries spent, its
	// partition revoked, a notifier's panic dead-lettered) leaves nothing
	// once the source ends its delivery.
	t.Run("EndedDeliveryLeavesNothing", func(t *testing.T) {
		for name, fail := range map[string]func(ports.Message) error{
			"Retryable": func(ports.Message) error { return errors.New("451 4.3.0 try again later") },
			"Panic":     func(ports.Message) error { panic("notifier bug") },
		} {
			t.Run(name, func(t *testing.T) {
				w := newWorld(t, domain.FailOpen)
				w.email.FailFunc = fail
				ended := make(chan struct{})
				ctx := ports.WithDelivery(context.Background(), ports.Delivery{Ended: ended})
				func() {
					defer func() { _ = recover() }()
					_ = w.svc.Handle(ctx, record(event("e1", "sms", "email")))
				}()
				if n := w.svc.LedgerEntries(); n != 1 {
					t.Fatalf("ledger holds %d entries while the delivery may retry, want its SMS", n)
				}
				close(ended)
				deadline := time.Now().Add(5 * time.Second)
				for w.svc.LedgerEntries() != 0 {
					if time.Now().After(deadline) {
						t.Fatalf("ledger holds %d entries 5s after the delivery ended", w.svc.LedgerEntries())
					}
					time.Sleep(time.Millisecond)
				}
			})
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

// waitOwed waits until w's ledger owes n records.
func (w *world) waitOwed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for owed, _ := w.svc.Owed(); owed != n; owed, _ = w.svc.Owed() {
		if time.Now().After(deadline) {
			t.Fatalf("ledger owes %d records after 5s, want %d", owed, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
