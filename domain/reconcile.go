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

// reconcile asks m's provider whether the send w, under m's key and the
// claim w.Token, went out in w's window. ours says whether that send was
// this record's own (else another worker's, whose claim was taken over).
// When send is true, the caller sends m; else it returns outcome and err.
func (s *Service) reconcile(ctx context.Context, log *slog.Logger, m ports.Message, done *ports.Deliveries, w ports.Unknown, ours bool) (outcome ports.Outcome, err error, send bool) {
	key, since := m.IdempotencyKey, w.Since
	r, err := s.askProvider(ctx, m, w)
	switch {
	case err == nil && r.Delivered:
		s.cfg.Reconciled(m.Channel, ports.ReconciledDelivered)
		log.Info("reconciled_delivered", slog.String("provider_id", r.Receipt.ProviderID), slog.Time("since", since))
		s.delivered(ctx, log, m, done, r.Receipt)
		if ours {
			return ports.OutcomeSent, nil, false
		}
		return ports.OutcomeDuplicate, nil, false
	case err == nil:
		s.cfg.Reconciled(m.Channel, ports.ReconciledNotDelivered)
		log.Info("reconciled_not_delivered", slog.Time("since", since))
		done.ForgetUnknown(key)
		return "", nil, true
	}
	s.cfg.Reconciled(m.Channel, ports.ReconcileCannotTell)
	if !errors.Is(err, errNoReconciler) && s.cfg.Now().Sub(w.First) < s.cfg.ReconcileFor {
		// Ask again on the record's next attempt, holding the claim.
		done.SetUnknown(key, w)
		outcome := ports.OutcomeUnknown
		if ours {
			outcome = stillUnknown // reported when the send ended unknown
		}
		return outcome, ports.MarkUnavailable(fmt.Errorf("reconcile %s: %w", key, err)), false
	}
	done.ForgetUnknown(key)
	if s.cfg.UnknownPolicy == PolicyDeadLetter {
		s.release(ctx, log, key, w.Token)
		log.Error("unknown_outcome_dead_lettered", slog.String("policy", string(s.cfg.UnknownPolicy)), slog.String("error", err.Error()))
		return ports.OutcomeFailedPermanent, ports.MarkPermanent(fmt.Errorf("send %s: outcome unknown, and %v", key, err)), false
	}
	log.Warn("unknown_outcome_resent", slog.Bool("resent", true), slog.Time("since", since), slog.String("error", err.Error()))
	return "", nil, true
}

// askProvider calls the channel's Reconciler for w's window and text,
// bounded by the send timeout. A window without an end (a claim written
// without a lease) ends now.
func (s *Service) askProvider(ctx context.Context, m ports.Message, w ports.Unknown) (ports.Reconciliation, error) {
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
