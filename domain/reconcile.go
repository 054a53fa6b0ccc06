package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/harborlight/notification-worker/ports"
)

// UnknownPolicy says what to do with a send whose outcome nobody can tell:
// its provider cannot be asked (SMTP), or could not tell for
// Config.ReconcileFor.
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
// and moves n on: ended delivered (the send recorded) when the provider has
// it; claiming afresh when it has not, or when nobody can tell and the
// policy resends; kept unknown (in the journal, for the next attempt) while
// the provider cannot tell yet; failedPermanent when nobody can tell and
// the policy dead-letters.
func (s *Service) reconcile(ctx context.Context, n *notification) {
	m, log, w := n.m, n.log, n.unknown
	key, since := m.IdempotencyKey, w.Since
	n.pending, n.reconciled = false, true
	r, err := s.askProvider(ctx, m, w)
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
	if !errors.Is(err, errNoReconciler) && s.cfg.Now().Sub(w.First) < s.cfg.ReconcileFor {
		// Ask again on the record's next attempt, holding the claim.
		s.journal.setUnknown(key, n.delivery, w)
		n.state = stateUnknown
		if n.ours {
			n.state = stateStillUnknown // reported when the send ended unknown
		}
		n.err = ports.MarkUnavailable(fmt.Errorf("reconcile %s: %w", key, err))
		return
	}
	s.journal.forgetUnknown(key, n.delivery)
	if s.cfg.UnknownPolicy == PolicyDeadLetter {
		s.release(ctx, log, key, w.Token)
		log.Error("unknown_outcome_dead_lettered", slog.String("policy", string(s.cfg.UnknownPolicy)), slog.String("error", err.Error()))
		n.state = stateFailedPermanent
		n.err = ports.MarkPermanent(fmt.Errorf("send %s: outcome unknown, and %v", key, err))
		return
	}
	log.Warn("unknown_outcome_resent", slog.Bool("resent", true), slog.Time("since", since), slog.String("error", err.Error()))
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

// askProvider calls the channel's Reconciler for w's window and text,
// bounded by the send timeout. A window without an end (a claim written
// without a lease) ends now.
func (s *Service) askProvider(ctx context.Context, m ports.Message, w unknownSend) (ports.Reconciliation, error) {
	rc := s.cfg.Reconcilers[m.Channel]
	if rc == nil {
		return ports.Reconciliation{}, errNoReconciler
	}
	until := w.Until
	if until.IsZero() {
		until = s.cfg.Now()
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	return rc.Reconcile(rctx, m, ports.Window{Since: w.Since, Until: until, Sent: sentText(m, w.Digest)})
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
