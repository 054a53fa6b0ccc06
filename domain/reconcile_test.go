package domain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// lateProvider is a provider that accepts the first unknownSends messages
// (or drops them, when drop is set) and then answers as a timeout does:
// the outcome is unknown to the sender. It answers Reconcile from what it
// accepted, as Twilio's Messages list does, or with cannotTell; with a
// lag, a message it does not find is "cannot tell" until lag after the
// window, on the clock now.
type lateProvider struct {
	unknownSends int32
	drop         bool
	cannotTell   atomic.Bool
	lag          time.Duration
	now          func() time.Time

	mu       sync.Mutex
	sends    atomic.Int32
	accepted []ports.Message
	asked    int
	windows  []ports.Window // every window asked about
}

func (p *lateProvider) Send(_ context.Context, m ports.Message) (ports.Receipt, error) {
	n := p.sends.Add(1)
	if n <= p.unknownSends && p.drop {
		return ports.Receipt{}, fmt.Errorf("connection reset after the request was written: %w", ports.ErrOutcomeUnknown)
	}
	p.mu.Lock()
	p.accepted = append(p.accepted, m)
	id := fmt.Sprintf("SM%03d", len(p.accepted))
	p.mu.Unlock()
	if n <= p.unknownSends {
		return ports.Receipt{}, fmt.Errorf("no answer within the send timeout: %w", ports.ErrOutcomeUnknown)
	}
	return ports.Receipt{ProviderID: id}, nil
}

// Sender and Lag make it a ports.Reconciler whose list shows what it
// accepted at once.
func (p *lateProvider) Sender() string     { return "from:+15550001111" }
func (p *lateProvider) Lag() time.Duration { return p.lag }

func (p *lateProvider) Reconcile(_ context.Context, m ports.Message, w ports.Window) (ports.Reconciliation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	p.windows = append(p.windows, w)
	if p.cannotTell.Load() {
		return ports.Reconciliation{}, errors.New("messages list answered 503")
	}
	r := listed(p.accepted, m, w)
	if !r.Delivered && p.lag > 0 && p.now().Sub(w.Until) < p.lag {
		return r, errors.New("the list may not show the window yet")
	}
	return r, nil
}

// listed answers a reconciliation as a provider's list of accepted
// messages does: delivered, with the id the provider gave it (SM001 for
// the first), when accepted holds a message to m's recipient whose text w
// says was m's; else not delivered.
func listed(accepted []ports.Message, m ports.Message, w ports.Window) ports.Reconciliation {
	for i, a := range accepted {
		if a.To == m.To && w.Sent(a.Text) {
			return ports.Reconciliation{Delivered: true, Receipt: ports.Receipt{ProviderID: fmt.Sprintf("SM%03d", i+1)}}
		}
	}
	return ports.Reconciliation{}
}

func (p *lateProvider) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.accepted)
}

// withLateSMS puts p behind the SMS channel, as notifier and reconciler.
func withLateSMS(p *lateProvider) func(*domain.Config) {
	return func(c *domain.Config) {
		c.Notifiers[ports.ChannelSMS] = p
		c.Reconcilers = map[ports.Channel]ports.Reconciler{ports.ChannelSMS: p}
	}
}

func TestService_UnknownOutcomes(t *testing.T) {
	t.Run("AcceptedButUnansweredIsReconciledNotResent", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1}
		w := newWorld(t, domain.FailOpen, withLateSMS(p))
		rec := record(event("e1", "sms"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Paced {
			t.Fatalf("attempt 1: %v, want paced (outcome unknown, asked next attempt)", err)
		}
		if s := w.claimState(t, "sms:e1"); s != ports.InFlight {
			t.Fatalf("key %v after an unknown outcome, want our claim kept", s)
		}
		if n := len(w.logs.Events(t, "send_outcome_unknown")); n != 1 {
			t.Fatalf("%d send_outcome_unknown lines, want 1", n)
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if n := p.Accepted(); n != 1 {
			t.Fatalf("provider accepted %d messages, want 1", n)
		}
		if s := w.claimState(t, "sms:e1"); s != ports.AlreadySent {
			t.Fatalf("key %v after reconciling, want already_sent", s)
		}
		if n := len(w.logs.Events(t, "reconciled_delivered")); n != 1 {
			t.Fatalf("%d reconciled_delivered lines, want 1", n)
		}
		if w.outcomes[ports.OutcomeUnknown] != 1 || w.outcomes[ports.OutcomeSent] != 1 {
			t.Fatalf("outcomes %v, want one unknown, then one sent", w.outcomes)
		}
	})

	t.Run("DroppedIsReconciledAndSentOnce", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1, drop: true}
		w := newWorld(t, domain.FailOpen, withLateSMS(p))
		rec := record(event("e1", "sms"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Paced {
			t.Fatalf("attempt 1: %v, want paced", err)
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if n := p.Accepted(); n != 1 {
			t.Fatalf("provider accepted %d messages, want 1", n)
		}
		if n := len(w.logs.Events(t, "reconciled_not_delivered")); n != 1 {
			t.Fatalf("%d reconciled_not_delivered lines, want 1", n)
		}
		if s := w.claimState(t, "sms:e1"); s != ports.AlreadySent {
			t.Fatalf("key %v, want already_sent", s)
		}
	})

	t.Run("CannotTellWaitsThenPolicyResends", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1, drop: true}
		p.cannotTell.Store(true)
		w := newWorld(t, domain.FailOpen, withLateSMS(p), func(c *domain.Config) { c.ReconcileFor = 300 * time.Millisecond })
		rec := record(event("e1", "sms"))
		start := time.Now()
		var err error
		for err = w.attempt(t, rec); ports.KindOf(err) == ports.Paced; err = w.attempt(t, rec) {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("still waiting after 5s: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("last attempt: %v", err)
		}
		if time.Since(start) < 300*time.Millisecond {
			t.Fatalf("resent after %v, before ReconcileFor (300ms)", time.Since(start))
		}
		if n := p.Accepted(); n != 1 {
			t.Fatalf("provider accepted %d messages, want 1 (the resend)", n)
		}
		if got := w.logs.Events(t, "unknown_outcome_resent"); len(got) != 1 || got[0]["resent"] != true {
			t.Fatalf("unknown_outcome_resent lines %v, want one with resent=true", got)
		}
	})

	t.Run("CannotTellPolicyDeadLetter", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1}
		p.cannotTell.Store(true)
		w := newWorld(t, domain.FailOpen, withLateSMS(p), func(c *domain.Config) {
			c.ReconcileFor = time.Nanosecond
			c.UnknownPolicy = domain.PolicyDeadLetter
		})
		rec := record(event("e1", "sms"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Paced {
			t.Fatalf("attempt 1: %v, want paced", err)
		}
		err := w.attempt(t, rec)
		if ports.KindOf(err) != ports.Permanent || !strings.Contains(err.Error(), "outcome unknown") {
			t.Fatalf("attempt 2: %v, want a permanent 'outcome unknown' error", err)
		}
		if n := p.Accepted(); n != 1 {
			t.Fatalf("provider accepted %d messages, want only the first", n)
		}
	})

	t.Run("ChannelWithoutReconcilerFollowsPolicyAtOnce", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1}
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) { c.Notifiers[ports.ChannelEmail] = p })
		rec := record(event("e1", "email"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Paced {
			t.Fatalf("attempt 1: %v, want paced", err)
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if n := p.Accepted(); n != 2 {
			t.Fatalf("provider accepted %d emails, want 2: SMTP cannot be asked, and the policy resends", n)
		}
	})

	t.Run("AbandonedClaimReconciledBeforeSending", func(t *testing.T) {
		for _, tc := range []struct {
			name      string
			delivered bool
			wantSends int
		}{{"Delivered", true, 0}, {"NotDelivered", false, 1}} {
			t.Run(tc.name, func(t *testing.T) {
				p := &lateProvider{}
				now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
				var clock atomic.Int64
				clock.Store(now.UnixNano())
				clk := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
				store := memory.New(clk)
				w := newWorld(t, domain.FailOpen, withLateSMS(p), func(c *domain.Config) {
					c.Now = clk
					c.Store = store
				})
				// A worker that died mid-send left its claim.
				if _, err := store.Claim(context.Background(), "sms:e1", "dead-worker", "", "", 2*time.Second); err != nil {
					t.Fatal(err)
				}
				if tc.delivered {
					_, _ = p.Send(context.Background(), mustRenderSMS(t, "e1"))
				}
				sendsBefore := p.sends.Load()
				clock.Add(int64(3 * time.Second)) // past its lease
				if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
					t.Fatalf("Handle: %v", err)
				}
				if got := int(p.sends.Load() - sendsBefore); got != tc.wantSends {
					t.Fatalf("%d sends after taking the claim over, want %d", got, tc.wantSends)
				}
				if p.asked != 1 {
					t.Fatalf("provider asked %d times, want 1", p.asked)
				}
				if c, _ := store.Claim(context.Background(), "sms:e1", "probe", "", "", time.Second); c.State != ports.AlreadySent {
					t.Fatalf("key %v, want already_sent", c.State)
				}
			})
		}
	})
}

// TestService_TakeoverReconcilesTheHistory: a claim taken over twice is
// reconciled against its first send, in the text that send used, whatever
// the message renders to now: a template reworded since, or a recipient's
// name the producer corrected.
func TestService_TakeoverReconcilesTheHistory(t *testing.T) {
	for _, tc := range []struct {
		name string
		sent func(ports.Message) string // the text the first send used
		now  string                     // the event as handled now
	}{
		{"TemplateReworded", func(m ports.Message) string { return "Harborlight (old wording): " + m.Text }, event("e1", "sms")},
		{"NameCorrected", func(m ports.Message) string { return m.Text }, strings.Replace(event("e1", "sms"), `"name":"Ada"`, `"name":"Ada Lovelace"`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &lateProvider{}
			t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			var clock atomic.Int64
			clock.Store(t0.UnixNano())
			clk := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
			store := memory.New(clk)
			w := newWorld(t, domain.FailOpen, withLateSMS(p), func(c *domain.Config) {
				c.Now = clk
				c.Store = store
			})
			ctx := context.Background()
			// A claimed it to send its text, which the provider took, and
			// died; B took A's claim over and died too.
			sent := mustRenderSMS(t, "e1")
			sent.Text = tc.sent(sent)
			if _, err := store.Claim(ctx, "sms:e1", "worker-a", domain.TextDigest(sent.Text), "", 2*time.Second); err != nil {
				t.Fatal(err)
			}
			_, _ = p.Send(ctx, sent)
			clock.Add(int64(3 * time.Second))
			if c, err := store.Claim(ctx, "sms:e1", "worker-b", "dgstB", "", 2*time.Second); err != nil || c.State != ports.TakenOver {
				t.Fatalf("B's takeover: %v, %v", c.State, err)
			}
			clock.Add(int64(3 * time.Second))
			sendsBefore := p.sends.Load()

			if err := w.attempt(t, record(tc.now)); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if got := p.sends.Load() - sendsBefore; got != 0 {
				t.Errorf("%d sends after taking B's claim over, want none: A's send went out", got)
			}
			if len(p.windows) != 1 || !p.windows[0].Since.Equal(t0) {
				t.Fatalf("windows asked about: %+v, want one from A's claim at %v", p.windows, t0)
			}
			if n := len(w.logs.Events(t, "reconciled_delivered")); n != 1 {
				t.Errorf("%d reconciled_delivered lines, want 1", n)
			}
		})
	}
}

// mustRenderSMS is the SMS the world's event(id, "sms") renders to.
func mustRenderSMS(t *testing.T, id string) ports.Message {
	t.Helper()
	ev, err := domain.Decode([]byte(event(id, "sms")))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := domain.LoadTemplates(nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tpl.Render(ev, ports.ChannelSMS)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestService_EventIDConflict(t *testing.T) {
	other := strings.Replace(event("e1", "sms"), "+31201234567", "+31207654321", 1)

	t.Run("ReusedForAnotherRecipientIsDeadLetteredUnsent", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		if err := w.handle(t, event("e1", "sms")); err != nil {
			t.Fatal(err)
		}
		err := w.handle(t, other)
		if ports.KindOf(err) != ports.Permanent || !strings.Contains(err.Error(), "event_id reused with a different payload") {
			t.Fatalf("Handle: %v, want a permanent conflict", err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("sent %d SMS, want 1", n)
		}
		got := w.logs.Events(t, "event_id_conflict")
		if len(got) != 1 || strings.Contains(fmt.Sprint(got[0]), "7654321") {
			t.Fatalf("event_id_conflict lines %v, want one, with the address masked", got)
		}
		if w.outcomes[ports.OutcomeConflict] != 1 {
			t.Fatalf("outcomes %v, want one conflict", w.outcomes)
		}
	})

	t.Run("IdenticalReplayIsADuplicate", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		for range 2 {
			if err := w.handle(t, event("e1", "sms")); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(w.logs.Events(t, "duplicate_suppressed")); n != 1 {
			t.Fatalf("%d duplicate_suppressed lines, want 1", n)
		}
	})

	t.Run("RecordWithoutFingerprintIsHonoured", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		if err := w.store.Store.Record(context.Background(), "sms:e1", ports.Receipt{ProviderID: "SM-old"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := w.handle(t, other); err != nil {
			t.Fatalf("Handle over a record without fingerprint: %v", err)
		}
		if n := len(w.sms.Sent()); n != 0 {
			t.Fatalf("sent %d SMS over an old record, want 0", n)
		}
	})

	// A store that keeps the first ports.FingerprintKept characters of
	// the fingerprint (the compact Redis format) tells the same apart
	// from another payload on those.
	t.Run("RecordKeepingAFingerprintPrefix", func(t *testing.T) {
		ev, err := domain.Decode([]byte(event("e1", "sms")))
		if err != nil {
			t.Fatal(err)
		}
		kept := domain.Fingerprint(ev, ports.ChannelSMS)[:ports.FingerprintKept]
		for name, tc := range map[string]struct {
			value        string
			wantConflict bool
		}{"SamePayload": {event("e1", "sms"), false}, "OtherPayload": {other, true}} {
			t.Run(name, func(t *testing.T) {
				w := newWorld(t, domain.FailOpen)
				if err := w.store.Store.Record(context.Background(), "sms:e1", ports.Receipt{SentAt: time.Now(), Fingerprint: kept}, time.Hour); err != nil {
					t.Fatal(err)
				}
				err := w.handle(t, tc.value)
				if conflict := ports.KindOf(err) == ports.Permanent; conflict != tc.wantConflict || !conflict && err != nil {
					t.Fatalf("Handle: %v, want conflict %v", err, tc.wantConflict)
				}
				if n := len(w.sms.Sent()); n != 0 {
					t.Fatalf("sent %d SMS over a record, want 0", n)
				}
			})
		}
	})

	t.Run("ConflictWithTheLedger", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.storeDown()
		if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatal(err)
		}
		if err := w.attempt(t, record(other)); ports.KindOf(err) != ports.Permanent {
			t.Fatalf("Handle: %v, want a permanent conflict", err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("sent %d SMS, want 1", n)
		}
	})
}

// TestService_AskOnSchedule: a send of unknown outcome is asked about at
// once, then once when the provider's list of its window is final (lag
// after it), then, if that could not tell, once more at ReconcileFor after
// it; between asks the record waits as Paced, due again at the next ask,
// and an attempt before it asks nothing.
func TestService_AskOnSchedule(t *testing.T) {
	const lag = time.Minute
	// scheduled is a world on a memory store and a clock the test moves
	// (p.now), the SMS behind p, which lists with the lag.
	scheduled := func(t *testing.T, p *lateProvider, opts ...func(*domain.Config)) (*world, func(time.Duration)) {
		var clock atomic.Int64
		clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
		p.lag, p.now = lag, func() time.Time { return time.Unix(0, clock.Load()).UTC() }
		w := newWorld(t, domain.FailOpen, append([]func(*domain.Config){withLateSMS(p), func(c *domain.Config) {
			c.Now = p.now
			c.Store.(*storetest.Fake).Store = memory.New(p.now)
		}}, opts...)...)
		return w, func(d time.Duration) { clock.Add(int64(d)) }
	}
	// waits checks that err has the record wait as Paced, due in due.
	waits := func(t *testing.T, which string, err error, due time.Duration) {
		t.Helper()
		if ports.KindOf(err) != ports.Paced || ports.PacedFor(err) != due {
			t.Fatalf("%s: %v (%v, due in %v), want paced, due in %v", which, err, ports.KindOf(err), ports.PacedFor(err), due)
		}
	}
	asked := func(p *lateProvider) int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.asked
	}

	t.Run("NotAcceptedAskedAtOnceThenWhenFinalThenResent", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1, drop: true}
		w, advance := scheduled(t, p)
		rec := record(event("e1", "sms"))
		waits(t, "the send", w.attempt(t, rec), 0)
		waits(t, "the ask at once", w.attempt(t, rec), lag)
		advance(lag / 2)
		for i := range 3 {
			waits(t, fmt.Sprintf("attempt %d before the list is final", i+3), w.attempt(t, rec), lag/2)
		}
		if n := asked(p); n != 1 {
			t.Fatalf("asked %d times before the list is final, want once", n)
		}
		advance(lag / 2)
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("the ask when final: %v", err)
		}
		if n, got := asked(p), p.Accepted(); n != 2 || got != 1 {
			t.Fatalf("asked %d times, %d accepted; want 2 asks and the resend accepted", n, got)
		}
		if w.outcomes[ports.OutcomeUnknown] != 1 || w.outcomes[ports.OutcomeSent] != 1 || len(w.outcomes) != 2 {
			t.Fatalf("outcomes %v, want one unknown, then one sent", w.outcomes)
		}
	})

	t.Run("AcceptedFoundAtOnce", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1}
		w, _ := scheduled(t, p)
		rec := record(event("e1", "sms"))
		waits(t, "the send", w.attempt(t, rec), 0)
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("the ask at once: %v", err)
		}
		if n, got := asked(p), p.Accepted(); n != 1 || got != 1 {
			t.Fatalf("asked %d times, %d accepted; want 1 and 1", n, got)
		}
	})

	t.Run("ListFailingAskedThreeTimesThenThePolicy", func(t *testing.T) {
		p := &lateProvider{unknownSends: 1, drop: true}
		p.cannotTell.Store(true)
		w, advance := scheduled(t, p, func(c *domain.Config) { c.ReconcileFor = 2 * lag })
		rec := record(event("e1", "sms"))
		waits(t, "the send", w.attempt(t, rec), 0)
		waits(t, "the ask at once", w.attempt(t, rec), lag)
		advance(lag)
		waits(t, "the ask when final", w.attempt(t, rec), lag)
		waits(t, "an attempt before the last ask", w.attempt(t, rec), lag)
		advance(lag)
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("the last ask, then the policy: %v", err)
		}
		if n, got := asked(p), p.Accepted(); n != 3 || got != 1 {
			t.Fatalf("asked %d times, %d accepted; want 3 asks, then the resend", n, got)
		}
		if n := len(w.logs.Events(t, "unknown_outcome_resent")); n != 1 {
			t.Fatalf("%d unknown_outcome_resent lines, want 1", n)
		}
	})

	t.Run("TakeoversKeepTheWindow", func(t *testing.T) {
		// A worker died sending, and every attempt after comes with a new
		// delivery once the claim before it is abandoned: each takes the
		// claim over. The window stays the first claim's, and the send is
		// resolved once the list of that window is final.
		p := &lateProvider{}
		w, advance := scheduled(t, p)
		t0 := p.now()
		if _, err := w.store.Claim(context.Background(), "sms:e1", "dead-worker", domain.TextDigest(mustRenderSMS(t, "e1").Text), "from:+15550001111", 2*time.Second); err != nil {
			t.Fatal(err)
		}
		var err error
		for i := 0; ; i++ {
			advance(3 * time.Second) // past the lease before
			if err = w.attempt(t, record(event("e1", "sms"))); err == nil {
				break
			}
			if ports.KindOf(err) != ports.Paced || i == 100 {
				t.Fatalf("takeover %d, %v after the first claim: %v, want paced", i+1, p.now().Sub(t0), err)
			}
		}
		if took := p.now().Sub(t0); took > 2*time.Second+lag+3*time.Second {
			t.Fatalf("resolved %v after the first claim, want within its lease, the lag and one more lease", took)
		}
		if n, got := asked(p), p.Accepted(); n != 2 || got != 1 {
			t.Fatalf("asked %d times, %d accepted; want 2 asks (at once, when final), then one send", n, got)
		}
		for _, win := range p.windows {
			if !win.Since.Equal(t0) || !win.Until.Equal(t0.Add(2*time.Second)) || win.Sender != "from:+15550001111" {
				t.Fatalf("windows asked about: %+v, want each the first claim's lease [%v, +2s] and sender", p.windows, t0)
			}
		}
	})
}
