package domain_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// optedOut fails every send as a provider does for a recipient who opted
// out, counting the calls.
func optedOut(calls *atomic.Int32) func(ports.Message) error {
	return func(ports.Message) error {
		calls.Add(1)
		return ports.MarkPermanent(fmt.Errorf("provider: code 21610: %w", ports.ErrRecipientOptedOut))
	}
}

func TestService_RecipientOptedOut(t *testing.T) {
	t.Run("RecordedAndReplaysSuppressed", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		var calls atomic.Int32
		w.sms.FailFunc = optedOut(&calls)
		// The email still goes out: opting out of SMS says nothing of email.
		if err := w.handle(t, event("e1", "sms", "email")); err != nil {
			t.Fatalf("Handle: %v, want nil", err)
		}
		if n := len(w.email.Sent()); n != 1 {
			t.Fatalf("sent %d emails, want 1", n)
		}
		c, err := w.store.Store.Claim(context.Background(), "sms:e1", "probe", "", "", time.Second)
		if err != nil || c.State != ports.AlreadySent || c.Receipt.ProviderID != "opted-out" || c.Receipt.Fingerprint == "" {
			t.Fatalf("store holds %+v (%v), want a sent record with provider id opted-out and a fingerprint", c, err)
		}
		if err := w.handle(t, event("e1", "sms", "email")); err != nil {
			t.Fatal(err)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("the provider was asked %d times, want 1", n)
		}
		if w.outcomes[ports.OutcomeOptedOut] != 1 || w.outcomes[ports.OutcomeDuplicate] != 2 {
			t.Fatalf("outcomes %v, want one opted out, then two duplicates", w.outcomes)
		}
	})

	// With the store down (fail open) the opt-out is owed like a send: a
	// replay this worker handles is suppressed from its ledger, and the
	// record is written once the store answers.
	t.Run("StoreDownKeptInTheLedger", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		var calls atomic.Int32
		w.sms.FailFunc = optedOut(&calls)
		up := w.storeDown()
		for range 2 {
			if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
				t.Fatal(err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("the provider was asked %d times with the store down, want 1", n)
		}
		up()
		deadline := time.Now().Add(5 * time.Second)
		for owed, _ := w.svc.Owed(); owed != 0; owed, _ = w.svc.Owed() {
			if time.Now().After(deadline) {
				t.Fatalf("ledger still owes %d records 5s after the store answered", owed)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if s := w.claimState(t, "sms:e1"); s != ports.AlreadySent {
			t.Fatalf("sms:e1 is %v after the drain, want already_sent", s)
		}
	})
}
