package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// TestMain_SenderChangeAsksAboutTheSenderUsed: A's send times out though
// Twilio took it, and A is stopped; B, deployed with another sender (a new
// From number, or a messaging service), takes the claim over. B must ask
// Twilio's list about the sender A's send used, find it, and send nothing.
// Through a chain (B with another number cannot tell and is stopped too; C
// with a messaging service takes B's claim over) the sender is still A's.
func TestMain_SenderChangeAsksAboutTheSenderUsed(t *testing.T) {
	const service = "MG0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name          string
		from, service string
	}{
		{"SameSender", rigFrom, ""},
		{"NewFromNumber", "+15550003333", ""},
		{"ToAMessagingService", "", service},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startTakeoverRig(t)
			ev := oneSMSEvent()
			r.sendUnknownThenStop(t, ev)

			r.listDown.Store(false)
			r.from, r.service = tc.from, tc.service
			outB, _ := r.worker(t, nil)
			waitLogged(t, "B", outB, "claim_taken_over")
			wait.For(t, waitWithin, "B reconciles or sends", func() (bool, string) {
				return len(outB.Events(t, "reconciled_delivered"))+len(outB.Events(t, "notification_sent")) > 0, tailOf(outB.String())
			})
			if n := r.smsTo(ev.Recipient.Phone); n != 1 {
				t.Errorf("the double accepted %d SMS for the event, want 1 (B must ask about A's sender %s)", n, rigFrom)
			}
		})
	}

	t.Run("ThroughATakeoverByAnotherSender", func(t *testing.T) {
		r := startTakeoverRig(t)
		ev := oneSMSEvent()
		r.sendUnknownThenStop(t, ev)

		before := r.listed.Load()
		r.from = "+15550003333"
		outB, stopB := r.worker(t, nil)
		waitLogged(t, "B", outB, "claim_taken_over")
		wait.For(t, waitWithin, "B asks the list and gets 503", func() (bool, string) {
			return r.listed.Load() > before, tailOf(outB.String())
		})
		stopB()

		r.listDown.Store(false)
		r.from, r.service = "", service
		outC, _ := r.worker(t, nil)
		waitLogged(t, "C", outC, "claim_taken_over")
		wait.For(t, waitWithin, "C reconciles or sends", func() (bool, string) {
			return len(outC.Events(t, "reconciled_delivered"))+len(outC.Events(t, "notification_sent")) > 0, tailOf(outC.String())
		})
		if n := r.smsTo(ev.Recipient.Phone); n != 1 {
			t.Errorf("the double accepted %d SMS for the event, want 1 (C must ask about A's sender %s)", n, rigFrom)
		}
	})
}

// TestMain_ShutdownWhileWaitingForTheNextAsk: A's send is answered 503
// before Twilio took it; A asks the list at once, which cannot tell yet
// (TWILIO_LIST_LAG 2s), and is stopped while its record waits for the
// next ask. B takes A's claim over and must send the SMS once, no sooner
// than the list of A's window is final, having asked at most three times
// in all.
func TestMain_ShutdownWhileWaitingForTheNextAsk(t *testing.T) {
	r := startTakeoverRig(t)
	r.listLag = 2 * time.Second
	ev := oneSMSEvent()
	phone := ev.Recipient.Phone
	r.twilio.Fail(double.Fault{To: phone, Count: 1, Status: http.StatusServiceUnavailable})
	outA, stopA := r.worker(t, nil)
	published := time.Now()
	MustPublish(t, r.brokers, r.topic, eventMessages([]sampleEvent{ev})...)
	waitLogged(t, "A", outA, "send_outcome_unknown")
	wait.For(t, waitWithin, "A asks the list at once", func() (bool, string) {
		return r.twilio.ListRequests("") > 0, tailOf(outA.String())
	})
	stopA()
	if n := r.smsTo(phone); n != 0 {
		t.Fatalf("the double took %d SMS before B, want none", n)
	}

	outB, _ := r.worker(t, nil)
	wait.For(t, waitWithin, "B sends", func() (bool, string) {
		return len(outB.Events(t, "notification_sent")) > 0, tailOf(outB.String())
	})
	msgs := r.twilio.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the double accepted %d SMS, want 1", len(msgs))
	}
	if early := msgs[0].Created.Sub(published); early < r.listLag {
		t.Errorf("resent %v after the record was published, before the list of the first send's window was final (lag %v)", early, r.listLag)
	}
	if n := r.twilio.ListRequests(""); n > 3 {
		t.Errorf("%d list requests for one unknown send, want at most 3", n)
	}
}

// domainPeers is what workers made of the domain service and the real
// adapters share, with no event source: the takeover rig's redis-server
// and Twilio double (whose Messages list the test can make answer 503).
// Each worker it makes is a new process: its own service (and journal),
// store client and Twilio adapter. Driving Handle by hand, a test chooses
// which delivery each attempt belongs to.
type domainPeers struct {
	*takeoverRig

	mu       sync.Mutex
	outcomes map[ports.Outcome]int // every worker's SMS outcomes
}

// peersClaimTTL is the workers' claim lease: it outlives a send of 1s and
// two store calls of 200ms.
const peersClaimTTL = 2 * time.Second

func startDomainPeers(t *testing.T) *domainPeers {
	t.Helper()
	p := &domainPeers{takeoverRig: startTakeoverRig(t), outcomes: map[ports.Outcome]int{}}
	p.listLag = 2 * time.Second
	return p
}

// worker returns a new worker's service.
func (p *domainPeers) worker(t *testing.T) *domain.Service {
	t.Helper()
	sms, err := twilio.New(twilio.Config{
		AccountSID: rigSID, AuthToken: rigToken, From: p.from, APIURL: p.api.URL,
		Timeout: time.Second, ListLag: p.listLag, ClockSkew: rigSkew,
	})
	if err != nil {
		t.Fatal(err)
	}
	store, err := redis.New(redis.Config{URL: p.redis.URL(), KeyPrefix: p.prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	svc, err := domain.NewService(domain.Config{
		Store:        store,
		Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelSMS: sms},
		Reconcilers:  map[ports.Channel]ports.Reconciler{ports.ChannelSMS: sms},
		ClaimTTL:     peersClaimTTL,
		StoreTimeout: 200 * time.Millisecond,
		SendTimeout:  time.Second,
		ClaimWaitMax: 50 * time.Millisecond,
		ReconcileFor: 30 * time.Second,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Observer: ports.ObserverFunc(func(_ ports.Channel, o ports.Outcome) {
			p.mu.Lock()
			p.outcomes[o]++
			p.mu.Unlock()
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

// attempt runs one attempt of rec on svc.
func (p *domainPeers) attempt(t *testing.T, svc *domain.Service, rec ports.Record) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return svc.Handle(ctx, rec)
}

func (p *domainPeers) outcome(o ports.Outcome) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.outcomes[o]
}

// newDelivery is ev delivered afresh: a record whose attempts share
// nothing with any earlier delivery's.
func newDelivery(ev sampleEvent) ports.Record {
	return ports.Record{Topic: "shipment-events", Value: ev.json(), DeliveryID: ports.NewDeliveryID()}
}

// TestDomain_ReconciliationEndsWhateverHappensToDeliveries: A's send to
// Twilio ends unknown, and every attempt after it comes with a new
// delivery to a new worker (a rebalance per attempt), which takes the
// claim before over once its lease has passed. The window stays A's, so
// reconciliation ends once Twilio's list of it is final: sent once when
// Twilio had not taken it (and not before the list was final), recorded
// as a duplicate when it had; at most 3 list requests either way.
func TestDomain_ReconciliationEndsWhateverHappensToDeliveries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault double.Fault
		want  ports.Outcome // the outcome that ends it
	}{
		{"NotTaken", double.Fault{Count: 1, Status: http.StatusServiceUnavailable}, ports.OutcomeSent},
		{"Taken", double.Fault{Count: 1, Status: http.StatusServiceUnavailable, Accept: true}, ports.OutcomeDuplicate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startDomainPeers(t)
			ev := oneSMSEvent()
			p.twilio.Fail(tc.fault)
			start := time.Now()
			var kinds []ports.Kind // how each attempt left the record waiting
			if err := p.attempt(t, p.worker(t), newDelivery(ev)); err == nil {
				t.Fatal("A's send: no error, want an unknown outcome")
			} else {
				kinds = append(kinds, ports.KindOf(err))
			}
			// The bound is generous: what it catches is an end that never
			// comes, as when each takeover moved the window to its own
			// lease.
			const bound = 45 * time.Second
			for {
				err := p.attempt(t, p.worker(t), newDelivery(ev))
				if err == nil {
					break
				}
				kinds = append(kinds, ports.KindOf(err))
				if time.Since(start) > bound {
					t.Fatalf("not resolved after %d takeovers, %v after A's send: %v", len(kinds)-1, time.Since(start).Round(time.Millisecond), err)
				}
			}
			for i, k := range kinds {
				if k != ports.Paced {
					t.Errorf("attempt %d left the record waiting as %v, want paced (no retry spent, no outage alert)", i+1, k)
				}
			}
			takeovers := len(kinds) - 1
			msgs := p.twilio.Messages()
			if len(msgs) != 1 {
				t.Fatalf("the double accepted %d SMS, want 1", len(msgs))
			}
			if tc.want == ports.OutcomeSent && msgs[0].Created.Sub(start) < p.listLag {
				t.Errorf("resent %v after A's send, before Twilio's list of its window was final (lag %v)", msgs[0].Created.Sub(start), p.listLag)
			}
			if n := p.twilio.ListRequests(""); n > 3 {
				t.Errorf("%d list requests over %d takeovers, want at most 3", n, takeovers)
			}
			if p.outcome(tc.want) != 1 || p.outcome(ports.OutcomeSent)+p.outcome(ports.OutcomeDuplicate) != 1 {
				t.Errorf("outcomes %v, want it ended once, %s", p.outcomes, tc.want)
			}
		})
	}

	t.Run("TakenOverAndResolvedLaterIsADuplicate", func(t *testing.T) {
		// B takes A's claim over while the list answers 503, cannot tell,
		// and learns on a later attempt of the same delivery that Twilio
		// had A's send: A sent it, B did not.
		p := startDomainPeers(t)
		ev := oneSMSEvent()
		p.twilio.Fail(double.Fault{Count: 1, Status: http.StatusServiceUnavailable, Accept: true})
		p.listDown.Store(true)
		if err := p.attempt(t, p.worker(t), newDelivery(ev)); err == nil {
			t.Fatal("A's send: no error, want an unknown outcome")
		}
		b, rec := p.worker(t), newDelivery(ev)
		if err := p.attempt(t, b, rec); err == nil {
			t.Fatal("B's takeover with the list down: no error, want it waiting")
		}
		p.listDown.Store(false)
		deadline := time.Now().Add(45 * time.Second)
		for {
			err := p.attempt(t, b, rec)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B's later attempt: %v, want it resolved", err)
			}
			time.Sleep(100 * time.Millisecond) // until it is due again
		}
		if n := len(p.twilio.Messages()); n != 1 {
			t.Fatalf("the double accepted %d SMS, want 1", n)
		}
		if p.outcome(ports.OutcomeDuplicate) != 1 || p.outcome(ports.OutcomeSent) != 0 {
			t.Errorf("outcomes %v, want one duplicate and nothing sent: B sent nothing", p.outcomes)
		}
	})
}
