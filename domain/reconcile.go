package domain

import (
	"context"
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

// nextAsk returns when the provider is next asked about w, a send of
// unknown outcome, given its lag (ports.Reconciler.Lag), or false once
// nobody can tell. Every time is fixed by w's window, so the schedule
// holds however often the record is delivered again and whoever takes the
// claim over:
//
//   - at once, when nobody asked yet: an accepted message usually shows;
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
	case w.Asked.IsZero():
		return w.Asked, true
	case w.Asked.Before(final):
		return final, true
	case w.Asked.Before(last):
		return last, true
	}
	return time.Time{}, false
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
