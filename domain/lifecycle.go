package domain

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/harborlight/notification-worker/ports"
)

// state is where one notification is in its lifecycle, and, once final,
// how it ended: the domain's one vocabulary of steps and outcomes. The
// store's answer stays a ports.ClaimState; what is reported is a
// ports.Outcome, derived from the final state (see outcome).
//
// The transitions, each made by one method of Service:
//
//	new          begin      delivered by this same delivery      earlier
//	                        record owed for another delivery     duplicate | conflict
//	                        otherwise (an unknown send this
//	                          delivery left: under its token)    claiming
//	claiming     claim      Claimed                              held
//	                        store down, failing open (also when
//	                          it fails on the abandoned claim this
//	                          attempt reconciled)                unchecked
//	                        Claimed or unchecked, with an
//	                          unknown send to reconcile          reconciling
//	                        TakenOver (even unvouched by a store
//	                          failing), or our own InFlight claim reconciling
//	                          (after a reconciliation)           failedRetryable
//	                        AlreadySent                          duplicate | conflict
//	                        InFlight, record owed by us          duplicate | conflict
//	                        store down failing closed, another
//	                          worker's claim outlasting the wait,
//	                          ctx done                           failedRetryable
//	reconciling  reconcile  the provider has it                  sent (our send) | duplicate (another's)
//	                        it has not, or nobody can tell and
//	                          the policy resends                 claiming (a fresh claim)
//	                        not asked now (its next ask is not
//	                          due), or cannot tell yet           unknown (found in this attempt) |
//	                                                             stillUnknown (resumed from the journal)
//	                        nobody can tell, policy dead letter  failedPermanent
//	held,        send       no turn of the sender's pace within
//	unchecked                 the wait (Config.Paces), claim
//	                          given back                         throttled
//	                        accepted                             sent
//	                        recipient opted out                  optedOut
//	                        outcome unknown                      unknown
//	                        refused for the sender's pace
//	                          (ErrRateLimited): sender paused,
//	                          claim given back                   throttled
//	                        refused                              failedRetryable | failedPermanent
//
// sent, optedOut and a reconciled delivery record the send (recordDelivery):
// written to the store, or owed in the journal when the store cannot take it.
type state int

const (
	stateNew         state = iota
	stateClaiming          // claim the key under n.token
	stateReconciling       // ask the provider whether n.unknown went out
	stateHeld              // we hold the key: send, then record or release
	stateUnchecked         // the store could not answer, failing open: send, then try to record

	// The final states.
	stateEarlier         // delivered by an earlier attempt at the same delivery: not reported again
	stateSent            // delivered, by this attempt's send or its own send reconciled
	stateOptedOut        // refused by the provider for the recipient's choice; recorded as sent
	stateDuplicate       // delivered before, by another delivery or another worker
	stateConflict        // the key was sent for another message: dead-letter
	stateUnknown         // the send's outcome is unknown: the claim is kept, and the record waits (Paced) for its next ask
	stateStillUnknown    // the outcome reported unknown by an earlier attempt is still unknown: waiting as unknown; not reported
	stateThrottled       // not sent, for the sender's pace: the record waits (Paced; Unavailable when the limiter cannot answer); not reported
	stateFailedRetryable // not sent; another attempt may succeed
	stateFailedPermanent // not sent, and never will be
)

// final reports whether st ends the lifecycle.
func (st state) final() bool { return st >= stateEarlier }

// outcome is the ports.Outcome reported for a final state; false for a
// state that reports nothing (earlier and stillUnknown were reported by an
// earlier attempt).
func (st state) outcome() (ports.Outcome, bool) {
	switch st {
	case stateSent:
		return ports.OutcomeSent, true
	case stateOptedOut:
		return ports.OutcomeOptedOut, true
	case stateDuplicate:
		return ports.OutcomeDuplicate, true
	case stateConflict:
		return ports.OutcomeConflict, true
	case stateUnknown:
		return ports.OutcomeUnknown, true
	case stateFailedRetryable:
		return ports.OutcomeFailedRetryable, true
	case stateFailedPermanent:
		return ports.OutcomeFailedPermanent, true
	}
	return "", false
}

// notification is one notification of a record on its way through one
// attempt: everything the transitions need and decide.
type notification struct {
	m        ports.Message
	log      noteLog
	delivery uint64 // the record's DeliveryID: what this attempt shares with the others
	state    state

	token string // the claim this attempt holds, or claims with
	// held: the store granted the claim under token (Claimed or
	// TakenOver), which the attempt releases when it does not send.
	held bool
	// unknown is a send that may have gone out under the key; pending
	// says it waits to be reconciled, ours that it was this delivery's
	// own (else made under a claim taken over), resumed that an earlier
	// attempt left it in the journal (and reported it).
	unknown                unknownSend
	pending, ours, resumed bool
	reconciled             bool // a reconciliation ran: the claim now made is a fresh one
	// counted says CloseBy counted n's send, under way then, as lost
	// (guarded by Service.tally).
	counted bool
	// taken is the lease of the abandoned claim whose send this attempt
	// reconciles (or reconciled), as the store reported it (takenOver).
	taken ports.Lease

	// err says why the notification did not end delivered: set in the
	// states conflict, unknown, stillUnknown, throttled and the failed
	// ones.
	err error
}

// deliver runs n through its transitions until it reaches a final state.
func (s *Service) deliver(ctx context.Context, n *notification) {
	for !n.state.final() {
		switch n.state {
		case stateNew:
			s.begin(ctx, n)
		case stateClaiming:
			s.claim(ctx, n)
		case stateReconciling:
			s.reconcile(ctx, n)
		case stateHeld, stateUnchecked:
			s.send(ctx, n)
		default:
			panic(fmt.Sprintf("domain: notification in unknown state %d", n.state))
		}
	}
}

// fail ends n as failedRetryable with err.
func (n *notification) fail(err error) {
	n.state, n.err = stateFailedRetryable, err
}

// begin consults the journal: a delivery the same delivery made earlier is
// skipped silently (its owed record written if it can be), one whose
// record is owed is a duplicate, and an unknown send this delivery left is
// claimed under its kept token and reconciled.
func (s *Service) begin(ctx context.Context, n *notification) {
	k := s.journal.lookup(n.m.IdempotencyKey, n.delivery)
	switch {
	case k.earlier:
		if k.isOwed {
			s.payOwed(ctx, n.log, k.owed)
		}
		n.log.Debug("notification_delivered_earlier")
		n.state = stateEarlier
	case k.isOwed:
		s.fromJournal(ctx, n, k.owed)
	case k.hasUnknown:
		// Claim with the token of the send whose outcome is unknown: its
		// claim, which that attempt kept, is then found to be ours.
		n.token, n.unknown, n.pending, n.ours, n.resumed = k.unknown.Token, k.unknown, true, k.unknown.Ours, true
		n.state = stateClaiming
	default:
		n.token = newToken()
		n.state = stateClaiming
	}
}

// fromJournal ends n as a duplicate of the delivery whose record o is owed
// (and tries to write that record), or as a conflict when that delivery was
// another message.
func (s *Service) fromJournal(ctx context.Context, n *notification, o owed) {
	if conflicting(o.receipt, n.m) {
		s.conflict(n, o.receipt)
		return
	}
	n.log.Info("duplicate_suppressed",
		slog.String("provider_id", o.receipt.ProviderID),
		slog.Time("sent_at", o.receipt.SentAt),
		slog.Bool("recorded", false))
	s.payOwed(ctx, n.log, o)
	n.state = stateDuplicate
}

// conflicting reports whether r records a message other than m under m's
// key. A record without a fingerprint (written before fingerprints) never
// conflicts; one that kept only the first characters of its fingerprint
// (see ports.FingerprintKept) is compared on those.
func conflicting(r ports.Receipt, m ports.Message) bool {
	return r.Fingerprint != "" && m.Fingerprint != "" && !strings.HasPrefix(m.Fingerprint, r.Fingerprint)
}

// conflict ends n on an event_id that was sent for another message:
// nothing is sent, and the record goes to the dead letter topic for the
// producer's owners to look at.
func (s *Service) conflict(n *notification, sent ports.Receipt) {
	n.log.Error("event_id_conflict",
		slog.String("to", n.m.ToMasked),
		slog.String("fingerprint", n.m.Fingerprint),
		slog.String("sent_fingerprint", sent.Fingerprint),
		slog.String("sent_provider_id", sent.ProviderID),
		slog.Time("sent_at", sent.SentAt))
	n.state = stateConflict
	n.err = ports.MarkPermanent(fmt.Errorf("%s: event_id reused with a different payload", n.m.IdempotencyKey))
}

// claim takes the key under n.token, or finds it sent, or waits while
// another worker holds it, and moves n on by what the store answered.
func (s *Service) claim(ctx context.Context, n *notification) {
	m, log := n.m, n.log
	key, digest, sender := m.IdempotencyKey, TextDigest(m.Text), s.sender(m.Channel)
	deadline := s.cfg.Now().Add(s.cfg.ClaimTTL + s.cfg.ClaimWaitMax)
	wait := s.cfg.ClaimWaitMax / 16
	sawInFlight := false
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		c, err := s.cfg.Store.Claim(cctx, key, n.token, digest, sender, s.cfg.ClaimTTL)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			n.fail(ctx.Err())
			return
		case err != nil && sawInFlight:
			// We know another worker is sending this one: failing open now
			// would send it a second time. A store that cannot answer is
			// just one more look that told us nothing; keep waiting.
			c.State = ports.InFlight
		case err != nil && s.cfg.FailureMode == FailClosed:
			n.fail(ports.MarkUnavailable(fmt.Errorf("claim %s: %w", key, err)))
			return
		case err != nil && c.State == ports.TakenOver && !(n.reconciled && sameLease(c.Lease, n.taken)):
			// The store found an abandoned claim, and took it over or
			// tried to, but cannot vouch for the outcome. Failing open
			// must not send blind: that claim's send may have gone out.
			// Reconcile it first, as for a takeover; what follows claims
			// afresh, and fails open then: a store still failing on the
			// very claim this attempt reconciled is a store error like
			// any other (the case below).
			s.logLimited(ctx, s.unavailable, log, slog.LevelWarn, "idempotency_check_unavailable",
				slog.String("error", err.Error()))
			log.Info("claim_taken_over", slog.Time("abandoned_since", c.Lease.Start), slog.Time("first_claimed", c.Lease.First))
			s.takenOver(n, c.Lease)
			return
		case err != nil:
			s.logLimited(ctx, s.unavailable, log, slog.LevelWarn, "idempotency_check_unavailable",
				slog.String("error", err.Error()))
			n.held = false
			n.state = stateUnchecked
			if n.pending {
				n.state = stateReconciling
			}
			return
		}
		switch c.State {
		case ports.Claimed:
			n.held = true
			n.state = stateHeld
			if n.pending {
				n.state = stateReconciling
			}
			return
		case ports.AlreadySent:
			if conflicting(c.Receipt, m) {
				s.conflict(n, c.Receipt)
				return
			}
			log.Info("duplicate_suppressed",
				slog.String("provider_id", c.Receipt.ProviderID),
				slog.Time("sent_at", c.Receipt.SentAt))
			n.state = stateDuplicate
			return
		case ports.TakenOver:
			if c.Lease.Token != n.token {
				log.Info("claim_taken_over", slog.Time("abandoned_since", c.Lease.Start), slog.Time("first_claimed", c.Lease.First))
			}
			s.takenOver(n, c.Lease)
			return
		case ports.InFlight:
			if c.Lease.Token == n.token {
				// Our own claim, kept by an earlier attempt whose send
				// ended unknown.
				s.takenOver(n, c.Lease)
				return
			}
			if o, ok := s.journal.owedRecord(key); ok {
				// This process delivered it and could not record it: the
				// pending claim is ours, delivered, and nothing to wait on.
				s.fromJournal(ctx, n, o)
				return
			}
			// Another worker is sending it right now (a rebalance overlap).
			// Sending too would duplicate; skipping would lose it if that
			// send fails. Wait for its record, for its claim to go, or for
			// its lease to pass (then the next look takes it over).
			sawInFlight = true
			if !c.Lease.Until.IsZero() {
				if until := c.Lease.Until.Add(s.cfg.ClaimWaitMax); until.After(deadline) {
					deadline = until
				}
			}
		default:
			n.fail(fmt.Errorf("claim %s: store answered an unknown state %v", key, c.State))
			return
		}
		left := deadline.Sub(s.cfg.Now())
		if left <= 0 {
			n.fail(fmt.Errorf("claim %s: held by another worker for longer than the claim TTL %v", key, s.cfg.ClaimTTL))
			return
		}
		log.Debug("claim_in_flight_wait", slog.Duration("wait", min(wait, left)))
		if !ports.Sleep(ctx.Done(), min(wait, left)) {
			n.fail(ctx.Err())
			return
		}
		wait = min(2*wait, s.cfg.ClaimWaitMax)
	}
}

// takenOver moves n on once it holds a claim whose send may have gone out:
// another worker's, taken over (its history, l, names the one send made
// under it, the window it may have reached the provider in, its text and
// its sender), or its own kept one. It reconciles that send, unless a
// reconciliation already ran in this attempt: then the claim was made and
// abandoned by another worker in the moment between our release and our
// claim, and the next attempt reconciles it.
//
// The window is the history's, the same for every taker however many
// takeovers came before. The provider is asked about it at once unless l
// is itself a takeover: its taker found the send unknown before, and may
// have asked (see nextAsk).
func (s *Service) takenOver(n *notification, l ports.Lease) {
	n.held = true
	if n.reconciled {
		n.fail(fmt.Errorf("claim %s: abandoned by another worker while reconciling", n.m.IdempotencyKey))
		return
	}
	n.taken = l
	if !n.pending {
		since := cmp.Or(l.First, l.Start)
		n.unknown = unknownSend{Token: n.token, Since: since, Until: cmp.Or(l.FirstUntil, l.Until),
			Digest: l.Digest, Sender: l.Sender, AtOnce: l.Start.Equal(since)}
		n.pending, n.ours = true, false
	}
	n.state = stateReconciling
}

// sender is whom the channel ch sends from, as its Reconciler names it;
// empty for a channel that cannot be asked.
func (s *Service) sender(ch ports.Channel) string {
	if rc := s.cfg.Reconcilers[ch]; rc != nil {
		return rc.Sender()
	}
	return ""
}

// send calls the channel's notifier, holding the claim (held) or unchecked,
// and moves n on by its answer: recorded on delivery, the claim released
// on a refusal, kept (in the journal) when the outcome is unknown.
func (s *Service) send(ctx context.Context, n *notification) {
	m, log := n.m, n.log
	checked := n.state == stateHeld
	if !s.pace(ctx, n) {
		return
	}
	s.sending(n)
	defer s.sendEnded(n)
	start := s.cfg.Now()
	receipt, err := s.callNotifier(ctx, n)
	switch {
	case errors.Is(err, ports.ErrRateLimited) && !errors.Is(err, ports.ErrOutcomeUnknown) && ports.KindOf(err) != ports.Permanent:
		s.rateLimited(ctx, n, err)
	case errors.Is(err, ports.ErrOutcomeUnknown):
		// The provider may have it: keep the claim, and ask it on the
		// next attempt, which comes at once, rather than send again now.
		s.journal.setUnknown(m.IdempotencyKey, n.delivery, unknownSend{Token: n.token, Since: start, Until: s.cfg.Now(),
			Digest: TextDigest(m.Text), Sender: s.sender(m.Channel), Ours: true, AtOnce: true})
		log.Warn("send_outcome_unknown",
			slog.String("to", m.ToMasked),
			slog.String("error", err.Error()))
		n.state = stateUnknown
		n.err = ports.MarkPaced(fmt.Errorf("send %s: %w", m.IdempotencyKey, err))
	case errors.Is(err, ports.ErrRecipientOptedOut):
		// The customer's choice, not a failure: record it as sent, so a
		// replay is a duplicate and the provider is not asked again.
		if receipt.ProviderID == "" {
			receipt.ProviderID = ports.ProviderIDOptedOut
		}
		s.recordDelivery(ctx, n, receipt)
		log.Info("recipient_opted_out",
			slog.String("to", m.ToMasked),
			slog.String("provider_id", receipt.ProviderID),
			slog.String("error", err.Error()))
		n.state = stateOptedOut
	case err != nil:
		if n.held {
			s.release(ctx, log, m.IdempotencyKey, n.token)
		}
		n.state, n.err = stateFailedRetryable, fmt.Errorf("send %s: %w", m.IdempotencyKey, err)
		level := slog.LevelWarn
		if ports.KindOf(err) == ports.Permanent {
			n.state, level = stateFailedPermanent, slog.LevelError
		}
		outcome, _ := n.state.outcome()
		log.Log(ctx, level, "notification_failed",
			slog.String("to", m.ToMasked),
			slog.String("outcome", string(outcome)),
			slog.String("error", err.Error()))
	default:
		s.recordDelivery(ctx, n, receipt)
		log.Info("notification_sent",
			slog.String("to", m.ToMasked),
			slog.String("provider_id", receipt.ProviderID),
			slog.Bool("idempotency_checked", checked))
		n.state = stateSent
	}
}

// callNotifier calls the channel's notifier, bounded by the send timeout.
// Should the notifier panic, it gives a held claim back before letting the
// panic go on to the event source (which recovers and dead-letters the
// record): otherwise the pending claim would hold off every replay of the
// record until it is taken over.
func (s *Service) callNotifier(ctx context.Context, n *notification) (ports.Receipt, error) {
	sendCtx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			if n.held {
				s.release(ctx, n.log, n.m.IdempotencyKey, n.token)
			}
			panic(r)
		}
	}()
	return s.cfg.Notifiers[n.m.Channel].Send(sendCtx, n.m)
}

// recordDelivery writes the sent record of n's delivery r, and enters it in
// the journal: delivered by n's delivery, its record owed when the store
// did not take it (then the drain writes it later). The record is written
// even if ctx was cancelled meanwhile, or a replay would send it again.
func (s *Service) recordDelivery(ctx context.Context, n *notification, r ports.Receipt) {
	if r.SentAt.IsZero() {
		r.SentAt = s.cfg.Now()
	}
	r.Fingerprint = n.m.Fingerprint
	err := s.record(ctx, n.m.IdempotencyKey, r, s.cfg.TTL)
	s.enter(n, r, err != nil)
	if err != nil {
		s.logLimited(ctx, s.recordFail, n.log, slog.LevelWarn, "idempotency_record_failed",
			slog.String("error", err.Error()))
	}
	s.drainSoon()
}

// sending notes n's send as under way, for CloseBy's count.
func (s *Service) sending(n *notification) {
	s.tally.Lock()
	s.tally.sending[n] = struct{}{}
	s.tally.Unlock()
}

// sendEnded notes that n's send is no longer under way (its delivery, if
// any, was entered).
func (s *Service) sendEnded(n *notification) {
	s.tally.Lock()
	delete(s.tally.sending, n)
	s.tally.Unlock()
}

// enter enters n's delivery r in the journal, its record owed when owed,
// in one step with CloseBy's count: a record owed after that count, by a
// send the count did not include, is lost as it is entered (nothing writes
// owed records after CloseBy), and reported lost at once.
func (s *Service) enter(n *notification, r ports.Receipt, owed bool) {
	s.tally.Lock()
	s.journal.deliver(n.m.IdempotencyKey, n.delivery, r, owed)
	delete(s.tally.sending, n)
	late := owed && s.tally.done && !n.counted
	s.tally.Unlock()
	if late {
		s.reportLost(1, 0, "a send that ended after the shutdown's final attempt at the owed records left its record owed; a replay of it is sent again unless the store holds its record")
	}
}

// release gives the key back after a failed send, so a retry or a replay
// can send it. It runs even when ctx is cancelled. A failed release is
// harmless: the claim expires after the claim TTL.
func (s *Service) release(ctx context.Context, log noteLog, key, token string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	if err := s.cfg.Store.Release(rctx, key, token); err != nil {
		log.Warn("idempotency_release_failed", slog.String("error", err.Error()),
			slog.Duration("expires_in", s.cfg.ClaimTTL))
	}
}

// sameLease reports whether a and b are the lease of one claim.
func sameLease(a, b ports.Lease) bool {
	return a.Token == b.Token && a.Start.Equal(b.Start) && a.Until.Equal(b.Until)
}

// newToken returns a token unique to one delivery attempt, so a claim is
// released only by the attempt that made it.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
