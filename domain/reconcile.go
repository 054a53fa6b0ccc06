package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// UnknownPolicy says what to do with a send whose outcome nobody can tell:
// its provider cannot be asked (SMTP), or could not tell by its last ask,
// Config.ReconcileFor after the send.
type UnknownPolicy string

const (
	// PolicyResend sends it again, logged with resent=true: a rare
	// duplicate beats a lost notification, as with the store's fail-open
	// mode (ADR-0006). An email goes out again under the same Message-ID.
	PolicyResend UnknownPolicy = "resend"
	// PolicyDeadLetter gives it up to the dead letter topic, for an
	// operator to decide.
	PolicyDeadLetter UnknownPolicy = "dead_letter"
)

// errNoReconciler is the answer of a channel whose provider cannot be asked.
var errNoReconciler = errors.New("the channel's provider cannot be asked what it accepted")

// reconcile asks the provider whether n.unknown, the send that may have
// gone out under n's key and the claim n holds, went out in its window,
// when its next ask is due (see nextAsk), and moves n on: ended delivered
// (the send recorded) when the provider has it; claiming afresh when it
// has not, or when nobody can tell and the policy resends; kept unknown,
// waiting for its next ask, while that is not due or the provider cannot
// tell yet; failedPermanent when nobody can tell and the policy
// dead-letters.
func (s *Service) reconcile(ctx context.Context, n *notification) {
	m, log := n.m, n.log
	key, since := m.IdempotencyKey, n.unknown.Since
	n.pending, n.reconciled = false, true
	rc := s.cfg.Reconcilers[m.Channel]
	if rc == nil {
		s.nobodyCanTell(ctx, n, errNoReconciler)
		return
	}
	now := s.cfg.Now()
	switch at, ok := s.nextAsk(n.unknown, rc.Lag()); {
	case !ok:
		s.nobodyCanTell(ctx, n, fmt.Errorf("not told by %v after the send", s.cfg.ReconcileFor))
		return
	case at.After(now):
		s.await(n, at, fmt.Errorf("asked next at %v, once the provider's list may show the send", at.Format(time.RFC3339Nano)))
		return
	}
	r, err := s.askProvider(ctx, rc, m, n.unknown)
	n.unknown.Asked = now
	switch {
	case err == nil && r.Delivered:
		s.cfg.Reconciled(m.Channel, ports.ReconciledDelivered)
		log.Info("reconciled_delivered", slog.String("provider_id", r.Receipt.ProviderID), slog.Time("since", since))
		s.recordDelivery(ctx, n, r.Receipt)
		n.state = stateDuplicate
		if n.ours {
			n.state = stateSent
		}
		return
	case err == nil:
		s.cfg.Reconciled(m.Channel, ports.ReconciledNotDelivered)
		log.Info("reconciled_not_delivered", slog.Time("since", since))
		s.journal.forgetUnknown(key, n.delivery)
		s.claimAfresh(ctx, n)
		return
	}
	s.cfg.Reconciled(m.Channel, ports.ReconcileCannotTell)
	if at, ok := s.nextAsk(n.unknown, rc.Lag()); ok {
		s.await(n, at, err)
		return
	}
	s.nobodyCanTell(ctx, n, err)
}

// nextAsk returns when the provider is next asked about w, a send of
// unknown outcome, given its lag (ports.Reconciler.Lag), or false once
// nobody can tell. Every time is fixed by w's window, so the schedule
// holds however often the record is delivered again and whoever takes the
// claim over:
//
//   - at once, when nobody asked yet (w.AtOnce): an accepted message
//     usually shows;
//   - once the provider's listing of the window is final, lag after it
//     ended: a message not found then was not accepted;
//   - should that ask not tell (the provider's list failed), once more
//     when ReconcileFor has passed since the window ended;
//   - then never: nobody can tell, and the policy applies.
//
// A send is asked about at most three times by one delivery, and by any
// number of deliveries taking its claim over in turn, at most three times
// while the provider answers: once at once by the delivery that made it,
// once at once by the first taker, once when the listing is final.
func (s *Service) nextAsk(w unknownSend, lag time.Duration) (time.Time, bool) {
	final := w.Until.Add(lag)
	last := w.Until.Add(max(s.cfg.ReconcileFor, lag))
	switch {
	case w.Asked.IsZero() && w.AtOnce:
		return w.Asked, true
	case w.Asked.Before(final):
		return final, true
	case w.Asked.Before(last):
		return last, true
	}
	return time.Time{}, false
}

// await ends n as a send of unknown outcome waiting for its next ask, at,
// for why: the claim is kept (the send's own, or the one that took it
// over), what is known of the send is entered in the journal for the
// record's next attempt, and the record waits as Paced, due again at at:
// it spends no retry budget, fires no outage alert, and holds no handler
// while it waits. A send found unknown in this attempt is reported
// unknown; one an earlier attempt left is not reported again.
func (s *Service) await(n *notification, at time.Time, why error) {
	s.journal.setUnknown(n.m.IdempotencyKey, n.delivery, n.unknown)
	n.state = stateUnknown
	if n.resumed {
		n.state = stateStillUnknown
	}
	n.err = ports.MarkPacedFor(fmt.Errorf("reconcile %s: %w", n.m.IdempotencyKey, why), at.Sub(s.cfg.Now()))
}

// nobodyCanTell applies the policy to n's send of unknown outcome, which
// nobody can tell (err says why): it is resent under a fresh claim, or
// given up to the dead letter topic.
func (s *Service) nobodyCanTell(ctx context.Context, n *notification, err error) {
	log, key := n.log, n.m.IdempotencyKey
	s.journal.forgetUnknown(key, n.delivery)
	if s.cfg.UnknownPolicy == PolicyDeadLetter {
		s.release(ctx, log, key, n.unknown.Token)
		log.Error("unknown_outcome_dead_lettered", slog.String("policy", string(s.cfg.UnknownPolicy)), slog.String("error", err.Error()))
		n.state = stateFailedPermanent
		n.err = ports.MarkPermanent(fmt.Errorf("send %s: outcome unknown, and %v", key, err))
		return
	}
	log.Warn("unknown_outcome_resent", slog.Bool("resent", true), slog.Time("since", n.unknown.Since), slog.String("error", err.Error()))
	s.claimAfresh(ctx, n)
}

// claimAfresh gives back the claim a reconciliation held (a send under it
// did not go out, or is given up on) and moves n on to claim the key under
// a new token, with a full lease of its own.
func (s *Service) claimAfresh(ctx context.Context, n *notification) {
	if n.held {
		s.release(ctx, n.log, n.m.IdempotencyKey, n.token)
	}
	n.token, n.held = newToken(), false
	n.state = stateClaiming
}

// askProvider calls rc, the channel's Reconciler, for w's window, sender
// and text, bounded by the send timeout. A window without an end (a claim
// written without a lease) ends now.
func (s *Service) askProvider(ctx context.Context, rc ports.Reconciler, m ports.Message, w unknownSend) (ports.Reconciliation, error) {
	until := w.Until
	if until.IsZero() {
		until = s.cfg.Now()
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	return rc.Reconcile(rctx, m, ports.Window{Since: w.Since, Until: until, Sender: w.Sender, Sent: sentText(m, w.Digest)})
}

// sentText is the rule a listed text must pass to be the send whose text
// digests to digest: its digest matches, whatever m renders to now. A send
// whose digest is unknown (a claim written before claims kept one) is
// matched on m's text, the best guess left.
func sentText(m ports.Message, digest string) func(string) bool {
	if digest == "" {
		return func(text string) bool { return text == m.Text }
	}
	return func(text string) bool { return TextDigest(text) == digest }
}
