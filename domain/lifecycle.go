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
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// state is where one notification is in its lifecycle, and, once final,
// how it ended (reported as a ports.Outcome, see outcomes). Each step is a
// method of Service returning the next state, which only deliver assigns:
//
//	new          begin      delivered by this delivery before    earlier
//	                        its record owed by us                duplicate | conflict
//	                        otherwise                            claiming (an unknown send left: its claim)
//	claiming,    claim      Claimed                              held | reconciling (an unknown send left)
//	reclaiming              store down, failing open             unchecked | reconciling (an unknown send left)
//	                        TakenOver (vouched or not by a store
//	                          failing), our own InFlight claim   reconciling | failedRetryable (reclaiming)
//	                        the store failing on the abandoned
//	                          claim just reconciled (reclaiming) unchecked
//	                        AlreadySent, InFlight owed by us     duplicate | conflict
//	                        store down failing closed, another
//	                          worker's claim past the wait, ctx  failedRetryable
//	reconciling  reconcile  the provider has it                  sent (our send) | duplicate (another's)
//	                        it has not; nobody can tell, resend  reclaiming (the claim given back)
//	                        next ask not due; cannot tell yet    unknown | stillUnknown (reported before)
//	                        nobody can tell, dead letter         failedPermanent
//	held,        send       no turn of the sender's pace, or
//	unchecked                 refused for it (ErrRateLimited)    throttled (the claim given back)
//	                        accepted | recipient opted out       sent | optedOut
//	                        outcome unknown                      unknown (the claim kept)
//	                        refused                              failedRetryable | failedPermanent
//
// A delivery (sent, optedOut, reconciled) is recorded in the store, or
// owed in the ledger when the store cannot take it (recordDelivery).
type state int

const (
	stateNew         state = iota
	stateClaiming          // claim the key under n.token
	stateReconciling       // holding n.unknown's claim, ask the provider whether it went out
	stateReclaiming        // n.unknown reconciled, its claim given back: claim afresh under n.token
	stateHeld              // we hold the key: send, then record or release
	stateUnchecked         // the store could not answer, failing open: send, then try to record

	// The final states.
	stateEarlier         // delivered by an earlier attempt at the same delivery: not reported again
	stateSent            // delivered, by this attempt's send or its own send reconciled
	stateOptedOut        // refused by the provider for the recipient's choice; recorded as sent
	stateDuplicate       // delivered before, by another delivery or another worker
	stateConflict        // the key was sent for another message: dead-letter
	stateUnknown         // the send's outcome is unknown: the claim kept, the record waits (Paced) for its next ask
	stateStillUnknown    // as unknown, reported unknown by an earlier attempt: not reported again
	stateThrottled       // not sent, for the sender's pace: the record waits (Paced or Unavailable); not reported
	stateFailedRetryable // not sent; another attempt may succeed
	stateFailedPermanent // not sent, and never will be
)

// final reports whether st ends the lifecycle.
func (st state) final() bool { return st >= stateEarlier }

// outcomes is the ports.Outcome each final state reports: none for
// earlier, stillUnknown and throttled.
var outcomes = [...]ports.Outcome{
	stateSent: ports.OutcomeSent, stateOptedOut: ports.OutcomeOptedOut, stateDuplicate: ports.OutcomeDuplicate,
	stateConflict: ports.OutcomeConflict, stateUnknown: ports.OutcomeUnknown,
	stateFailedRetryable: ports.OutcomeFailedRetryable, stateFailedPermanent: ports.OutcomeFailedPermanent,
}

// notification is one notification of a record on its way through one
// attempt: what the steps share.
type notification struct {
	m        ports.Message
	log      noteLog
	delivery uint64 // the record's DeliveryID: what this attempt shares with the others
	state    state
	token    string       // the claim this attempt holds, or claims with
	unknown  *unknownSend // the send that may have gone out under the key: the one reconciled
	err      error        // why it did not end delivered (conflict, unknown, throttled, failed...)
}

// deliver runs n through its steps until it reaches a final state.
func (s *Service) deliver(ctx context.Context, n *notification) {
	for !n.state.final() {
		switch n.state {
		case stateNew:
			n.state = s.begin(ctx, n)
		case stateClaiming, stateReclaiming:
			n.state = s.claim(ctx, n)
		case stateReconciling:
			n.state = s.reconcile(ctx, n)
		case stateHeld, stateUnchecked:
			n.state = s.send(ctx, n)
		default:
			panic(fmt.Sprintf("domain: notification in unknown state %d", n.state))
		}
	}
}

// end sets n's error and returns st; fail ends n failedRetryable.
func (n *notification) end(st state, err error) state {
	n.err = err
	return st
}

func (n *notification) fail(err error) state { return n.end(stateFailedRetryable, err) }

// begin consults the ledger. An owed record is written if it can be; an
// unknown send this delivery left is claimed under its kept token, so that
// its claim is found to be ours.
func (s *Service) begin(ctx context.Context, n *notification) state {
	k := s.ledger.lookup(n.m.IdempotencyKey, n.delivery)
	switch {
	case k.earlier:
		if k.owed != nil {
			s.recordFailed(ctx, n.log, s.writeOwed(ctx, *k.owed))
		}
		n.log.Debug("notification_delivered_earlier")
		return stateEarlier
	case k.owed != nil:
		return s.owedDuplicate(ctx, n, *k.owed)
	case k.unknown != nil:
		n.token, n.unknown = k.unknown.Token, k.unknown
	default:
		n.token = newToken()
	}
	return stateClaiming
}

// owedDuplicate ends n on the record o the ledger owes for its key (see
// sentBefore), writing o if it can.
func (s *Service) owedDuplicate(ctx context.Context, n *notification, o owedRecord) state {
	st := s.sentBefore(n, o.receipt, slog.Bool("recorded", false))
	if st == stateDuplicate {
		s.recordFailed(ctx, n.log, s.writeOwed(ctx, o))
	}
	return st
}

// conflicting reports whether r records a message other than m under m's
// key. A record without a fingerprint (written before fingerprints) never
// conflicts; one that kept only the first characters of its fingerprint
// (see ports.FingerprintKept) is compared on those.
func conflicting(r ports.Receipt, m ports.Message) bool {
	return r.Fingerprint != "" && m.Fingerprint != "" && !strings.HasPrefix(m.Fingerprint, r.Fingerprint)
}

// sentBefore ends n on its key found delivered with r: a duplicate, or a
// conflict when r was another message (the event_id reused), which the
// dead letter topic keeps for the producer's owners to look at.
func (s *Service) sentBefore(n *notification, r ports.Receipt, attrs ...slog.Attr) state {
	if conflicting(r, n.m) {
		n.log.Error("event_id_conflict",
			slog.String("to", n.m.ToMasked),
			slog.String("fingerprint", n.m.Fingerprint),
			slog.String("sent_fingerprint", r.Fingerprint),
			slog.String("sent_provider_id", r.ProviderID),
			slog.Time("sent_at", r.SentAt))
		return n.end(stateConflict, ports.MarkPermanent(fmt.Errorf("%s: event_id reused with a different payload", n.m.IdempotencyKey)))
	}
	n.log.Info("duplicate_suppressed", append([]slog.Attr{slog.String("provider_id", r.ProviderID), slog.Time("sent_at", r.SentAt)}, attrs...)...)
	return stateDuplicate
}

// claim takes the key under n.token, or finds it sent, or waits while
// another worker holds it: for its record, its release, or its lease to
// pass (then the next look takes it over).
func (s *Service) claim(ctx context.Context, n *notification) state {
	key, digest, sender := n.m.IdempotencyKey, TextDigest(n.m.Text), s.sender(n.m.Channel)
	deadline := s.cfg.Now().Add(s.cfg.ClaimTTL + s.cfg.ClaimWaitMax)
	for wait, sawInFlight := s.cfg.ClaimWaitMax/16, false; ; wait = min(2*wait, s.cfg.ClaimWaitMax) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		c, err := s.cfg.Store.Claim(cctx, key, n.token, digest, sender, s.cfg.ClaimTTL)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return n.fail(ctx.Err())
		case err != nil && sawInFlight:
			// We know another worker is sending this one: failing open now
			// would send it a second time. A store that cannot answer is
			// just one more look that told us nothing; keep waiting.
			c = ports.Claim{State: ports.InFlight}
		case err != nil:
			return s.claimFailed(ctx, n, c, err)
		case c.State == ports.Claimed && n.state == stateClaiming && n.unknown != nil:
			return stateReconciling
		case c.State == ports.Claimed:
			return stateHeld
		case c.State == ports.AlreadySent:
			return s.sentBefore(n, c.Receipt)
		case c.State == ports.TakenOver || c.State == ports.InFlight && c.Lease.Token == n.token:
			return s.takenOver(n, c.Lease) // InFlight: our own claim, kept by an earlier attempt
		case c.State != ports.InFlight:
			return n.fail(fmt.Errorf("claim %s: store answered an unknown state %v", key, c.State))
		}
		if o := s.ledger.lookup(key, 0).owed; o != nil {
			// This process delivered it and could not record it: the
			// pending claim is ours, delivered, and nothing to wait on.
			return s.owedDuplicate(ctx, n, *o)
		}
		// Another worker is sending it (a rebalance overlap): sending too
		// would duplicate; skipping would lose it if that send fails.
		sawInFlight = true
		if until := c.Lease.Until.Add(s.cfg.ClaimWaitMax); until.After(deadline) {
			deadline = until
		}
		left := deadline.Sub(s.cfg.Now())
		if left <= 0 {
			return n.fail(fmt.Errorf("claim %s: held by another worker for longer than the claim TTL %v", key, s.cfg.ClaimTTL))
		}
		n.log.Debug("claim_in_flight_wait", slog.Duration("wait", min(wait, left)))
		if !ports.Sleep(ctx.Done(), min(wait, left)) {
			return n.fail(ctx.Err())
		}
	}
}

// claimFailed moves n on when the store could not answer its claim (c,
// err). Failing open, a send that may have gone out under the key is
// reconciled first: one left by this delivery, or the abandoned claim's
// the store found but cannot vouch for; a store still failing on the very
// claim just reconciled is then a store error like any other.
func (s *Service) claimFailed(ctx context.Context, n *notification, c ports.Claim, err error) state {
	if s.cfg.FailureMode == FailClosed {
		return n.fail(ports.MarkUnavailable(fmt.Errorf("claim %s: %w", n.m.IdempotencyKey, err)))
	}
	s.logLimited(ctx, n.log, slog.LevelWarn, "idempotency_check_unavailable",
		slog.String("error", err.Error()))
	switch {
	case c.State == ports.TakenOver && !(n.state == stateReclaiming && sameHistory(c.Lease, *n.unknown)):
		return s.takenOver(n, c.Lease)
	case n.state == stateClaiming && n.unknown != nil:
		return stateReconciling
	}
	return stateUnchecked
}

// takenOver moves n on holding a claim whose send may have gone out: its
// own kept one (n.unknown), or another worker's, whose history, l, names
// that send's window (the same for every taker), text and sender. When
// reclaiming, another worker claimed and abandoned the key between our
// release and our claim: the next attempt reconciles that.
func (s *Service) takenOver(n *notification, l ports.Lease) state {
	if l.Token != n.token {
		n.log.Info("claim_taken_over", slog.Time("abandoned_since", l.Start), slog.Time("first_claimed", l.First))
	}
	if n.state == stateReclaiming {
		return n.fail(fmt.Errorf("claim %s: abandoned by another worker while reconciling", n.m.IdempotencyKey))
	}
	if n.unknown == nil {
		n.unknown = &unknownSend{Token: n.token, Since: cmp.Or(l.First, l.Start), Until: cmp.Or(l.FirstUntil, l.Until),
			Digest: l.Digest, Sender: l.Sender}
		if !l.Start.Equal(n.unknown.Since) {
			n.unknown.Asked = n.unknown.Since // l is a takeover: its taker may have asked
		}
	}
	return stateReconciling
}

// sameHistory reports whether l's history is the window of u.
func sameHistory(l ports.Lease, u unknownSend) bool {
	return cmp.Or(l.First, l.Start).Equal(u.Since) && cmp.Or(l.FirstUntil, l.Until).Equal(u.Until)
}

// reconcile asks the provider whether n.unknown went out, when its next
// ask is due (see nextAsk), and moves n on by the answer (see state).
func (s *Service) reconcile(ctx context.Context, n *notification) state {
	u, ch := n.unknown, n.m.Channel
	rc := s.cfg.Reconcilers[ch]
	if rc == nil {
		return s.nobodyCanTell(ctx, n, errors.New("the channel's provider cannot be asked what it accepted"))
	}
	now := s.cfg.Now()
	switch at, ok := s.nextAsk(*u, rc.Lag()); {
	case !ok:
		return s.nobodyCanTell(ctx, n, fmt.Errorf("not told by %v after the send", s.cfg.ReconcileFor))
	case at.After(now):
		return s.await(n, at, fmt.Errorf("asked next at %v, once the provider's list may show the send", at.Format(time.RFC3339Nano)))
	}
	r, err := s.askProvider(ctx, rc, n.m, *u)
	u.Asked = now
	switch {
	case err == nil && r.Delivered:
		s.cfg.Reconciled(ch, ports.ReconciledDelivered)
		n.log.Info("reconciled_delivered", slog.String("provider_id", r.Receipt.ProviderID), slog.Time("since", u.Since))
		s.recordDelivery(ctx, n, r.Receipt, false)
		if u.Ours {
			return stateSent
		}
		return stateDuplicate
	case err == nil:
		s.cfg.Reconciled(ch, ports.ReconciledNotDelivered)
		n.log.Info("reconciled_not_delivered", slog.Time("since", u.Since))
		s.ledger.forget(n.m.IdempotencyKey, n.delivery)
		return s.claimAfresh(ctx, n)
	}
	s.cfg.Reconciled(ch, ports.ReconcileCannotTell)
	if at, ok := s.nextAsk(*u, rc.Lag()); ok {
		return s.await(n, at, err)
	}
	return s.nobodyCanTell(ctx, n, err)
}

// await ends n waiting for n.unknown's next ask, at, for why: the claim
// kept, n.unknown in the ledger for the next attempt, the record Paced due
// at at (no retry budget spent, no outage alert, no handler held).
func (s *Service) await(n *notification, at time.Time, why error) state {
	st := stateUnknown
	if n.unknown.Reported {
		st = stateStillUnknown
	}
	s.ledger.setUnknown(n.m.IdempotencyKey, n.delivery, *n.unknown)
	return n.end(st, ports.MarkPacedFor(fmt.Errorf("reconcile %s: %w", n.m.IdempotencyKey, why), at.Sub(s.cfg.Now())))
}

// nobodyCanTell applies the policy to n.unknown, whose outcome nobody can
// tell (err says why): resent under a fresh claim, or dead-lettered.
func (s *Service) nobodyCanTell(ctx context.Context, n *notification, err error) state {
	key := n.m.IdempotencyKey
	s.ledger.forget(key, n.delivery)
	if s.cfg.UnknownPolicy == PolicyDeadLetter {
		s.giveBack(ctx, n)
		n.log.Error("unknown_outcome_dead_lettered", slog.String("policy", string(s.cfg.UnknownPolicy)), slog.String("error", err.Error()))
		return n.end(stateFailedPermanent, ports.MarkPermanent(fmt.Errorf("send %s: outcome unknown, and %v", key, err)))
	}
	n.log.Warn("unknown_outcome_resent", slog.Bool("resent", true), slog.Time("since", n.unknown.Since), slog.String("error", err.Error()))
	return s.claimAfresh(ctx, n)
}

// claimAfresh gives back the claim a reconciliation held, to claim the key
// under a new token, with a full lease and history of its own.
func (s *Service) claimAfresh(ctx context.Context, n *notification) state {
	s.giveBack(ctx, n)
	n.token = newToken()
	return stateReclaiming
}

// sender is whom the channel ch sends from, as its Reconciler names it;
// empty for a channel that cannot be asked.
func (s *Service) sender(ch ports.Channel) string {
	if rc := s.cfg.Reconcilers[ch]; rc != nil {
		return rc.Sender()
	}
	return ""
}

// send takes the turn of n's sender, calls the channel's notifier, and
// records what it delivered.
func (s *Service) send(ctx context.Context, n *notification) state {
	if st := s.pace(ctx, n); st == stateThrottled {
		return st
	}
	start := s.cfg.Now()
	s.ledger.startSend()
	receipt, err := s.callNotifier(ctx, n)
	counted := s.ledger.endSend()
	m := n.m
	switch {
	case err == nil:
		s.recordDelivery(ctx, n, receipt, counted)
		n.log.Info("notification_sent",
			slog.String("to", m.ToMasked),
			slog.String("provider_id", receipt.ProviderID),
			slog.Bool("idempotency_checked", n.state == stateHeld))
		return stateSent
	case errors.Is(err, ports.ErrRecipientOptedOut):
		// The customer's choice, not a failure: record it as sent, so a
		// replay is a duplicate and the provider is not asked again.
		receipt.ProviderID = cmp.Or(receipt.ProviderID, ports.ProviderIDOptedOut)
		s.recordDelivery(ctx, n, receipt, counted)
		n.log.Info("recipient_opted_out",
			slog.String("to", m.ToMasked),
			slog.String("provider_id", receipt.ProviderID),
			slog.String("error", err.Error()))
		return stateOptedOut
	}
	return s.notSent(ctx, n, start, err)
}

// notSent moves n on after a send, started at start, that did not deliver
// (err). One of unknown outcome keeps its claim, and the provider is asked
// on the next attempt, which comes at once, rather than sent again now.
func (s *Service) notSent(ctx context.Context, n *notification, start time.Time, err error) state {
	m := n.m
	switch {
	case errors.Is(err, ports.ErrRateLimited) && !errors.Is(err, ports.ErrOutcomeUnknown) && ports.KindOf(err) != ports.Permanent:
		return s.rateLimited(ctx, n, err)
	case errors.Is(err, ports.ErrOutcomeUnknown):
		n.log.Warn("send_outcome_unknown", slog.String("to", m.ToMasked), slog.String("error", err.Error()))
		now := s.cfg.Now()
		n.unknown = &unknownSend{Token: n.token, Since: start, Until: now,
			Digest: TextDigest(m.Text), Sender: s.sender(m.Channel), Ours: true}
		return s.await(n, now, err)
	}
	s.giveBack(ctx, n)
	st, level := stateFailedRetryable, slog.LevelWarn
	if ports.KindOf(err) == ports.Permanent {
		st, level = stateFailedPermanent, slog.LevelError
	}
	n.log.Log(ctx, level, "notification_failed",
		slog.String("to", m.ToMasked),
		slog.String("outcome", string(outcomes[st])),
		slog.String("error", err.Error()))
	return n.end(st, fmt.Errorf("send %s: %w", m.IdempotencyKey, err))
}

// callNotifier calls the channel's notifier, bounded by the send timeout.
// Should it panic, the claim is given back before the panic goes on to the
// event source: else it would hold off every replay until taken over.
func (s *Service) callNotifier(ctx context.Context, n *notification) (ports.Receipt, error) {
	sendCtx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			s.ledger.endSend()
			s.giveBack(ctx, n)
			panic(r)
		}
	}()
	return s.cfg.Notifiers[n.m.Channel].Send(sendCtx, n.m)
}

// pace takes n's turn at its channel's Pace, waiting up to rateWaitMax,
// and returns n's state when n may send, else throttled: Paced without a
// turn, Unavailable when the limiter cannot answer (a dependency is down,
// not a pace kept).
func (s *Service) pace(ctx context.Context, n *notification) state {
	p, ok := s.cfg.Paces[n.m.Channel]
	if !ok {
		return n.state
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	r, err := s.cfg.RateLimiter.Take(tctx, p.Sender, p.Limit, s.rateWait)
	cancel()
	switch {
	case err != nil:
		return s.throttle(ctx, n, ports.Unavailable, fmt.Errorf("rate limit of %s: %w", p.Sender, err), 0)
	case !r.OK:
		n.log.Debug("rate_limit_no_turn", slog.String("sender", p.Sender), slog.Duration("next_turn_in", r.Wait))
		return s.throttle(ctx, n, ports.Paced, fmt.Errorf("rate limited: no turn of sender %s within %v (next in %v)", p.Sender, s.rateWait, r.Wait), r.Wait)
	}
	s.cfg.RateWaited(n.m.Channel, r.Wait)
	if r.Wait > 0 && !ports.Sleep(ctx.Done(), r.Wait) {
		// The turn is lost: a reservation left unused only slows the
		// sender.
		return s.throttle(ctx, n, ports.Paced, ctx.Err(), 0)
	}
	return n.state
}

// rateLimited throttles n, whose send the provider refused for its
// sender's pace (ports.ErrRateLimited), pausing the sender for every record
// by the wait the provider asked (when the channel has a Pace).
func (s *Service) rateLimited(ctx context.Context, n *notification, err error) state {
	after, _ := ports.RetryAfter(err)
	s.cfg.RateLimited(n.m.Channel)
	attrs := []slog.Attr{slog.String("to", n.m.ToMasked), slog.Duration("retry_after", after), slog.String("error", err.Error())}
	if p, ok := s.cfg.Paces[n.m.Channel]; ok {
		attrs = append(attrs, slog.String("sender", p.Sender))
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		if perr := s.cfg.RateLimiter.Pause(pctx, p.Sender, p.Limit, after); perr != nil {
			attrs = append(attrs, slog.String("pause_error", perr.Error()))
		}
		cancel()
	}
	s.logLimited(ctx, n.log, slog.LevelWarn, "notification_rate_limited", attrs...)
	return s.throttle(ctx, n, ports.Paced, err, after)
}

// throttle ends n, which did not send, throttled with err: its claim given
// back, the record waiting as kind (retryable once ctx is done: the source
// is stopping). It first waits for the sender's next turn, wait, at most
// rateWaitMax: the source retries a Paced record without a backoff, and a
// backlog must not claim and release again and again.
func (s *Service) throttle(ctx context.Context, n *notification, kind ports.Kind, err error, wait time.Duration) state {
	s.giveBack(ctx, n)
	err = fmt.Errorf("send %s: %w", n.m.IdempotencyKey, err)
	if ctx.Err() != nil {
		return n.end(stateThrottled, err)
	}
	if wait = min(wait, s.rateWait); wait > 0 {
		ports.Sleep(ctx.Done(), wait)
	}
	return n.end(stateThrottled, mark[kind](err))
}

// giveBack releases n's claim (only one under n.token), even when ctx is
// cancelled, so that a retry or a replay can send. A failure is harmless
// (the claim expires); it is logged unless n is unchecked: the store did
// not answer that claim, which may have landed all the same.
func (s *Service) giveBack(ctx context.Context, n *notification) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	if err := s.cfg.Store.Release(rctx, n.m.IdempotencyKey, n.token); err != nil && n.state != stateUnchecked {
		n.log.Warn("idempotency_release_failed", slog.String("error", err.Error()),
			slog.Duration("expires_in", s.cfg.ClaimTTL))
	}
}

// recordDelivery writes the sent record of n's delivery r, even if ctx was
// cancelled, and enters it in the ledger, owed when the store did not take
// it; owed after CloseBy, and not counted by it (counted), it is lost now.
func (s *Service) recordDelivery(ctx context.Context, n *notification, r ports.Receipt, counted bool) {
	if r.SentAt.IsZero() {
		r.SentAt = s.cfg.Now()
	}
	r.Fingerprint = n.m.Fingerprint
	err := s.record(ctx, n.m.IdempotencyKey, r, s.cfg.TTL)
	if s.ledger.delivered(n.m.IdempotencyKey, n.delivery, r, err != nil) && !counted {
		s.reportLost(1, 0, "a send that ended after the shutdown's final attempt at the owed records left its record owed; a replay of it is sent again unless the store holds its record")
	}
	s.recordFailed(ctx, n.log, err)
}

// recordFailed logs err, a sent record the store did not take (owed: the
// drain writes it later); nothing for a nil err.
func (s *Service) recordFailed(ctx context.Context, log noteLog, err error) {
	if err != nil {
		s.logLimited(ctx, log, slog.LevelWarn, "idempotency_record_failed", slog.String("error", err.Error()))
	}
}

// record writes the sent record of key, living ttl, with the store timeout,
// even when ctx is cancelled: the send it records has happened.
func (s *Service) record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	return s.cfg.Store.Record(rctx, key, r, ttl)
}

// writeOwed writes o, a record the ledger owes, with what is left of its
// TTL since the send, and marks it written once the store took it (or its
// TTL has passed).
func (s *Service) writeOwed(ctx context.Context, o owedRecord) error {
	if ttl := s.cfg.TTL - s.cfg.Now().Sub(o.receipt.SentAt); ttl > 0 {
		if err := s.record(ctx, o.key, o.receipt, min(ttl, s.cfg.TTL)); err != nil {
			return err
		}
	}
	s.ledger.written(o)
	return nil
}

// newToken returns a token unique to one delivery attempt, so a claim is
// released only by the attempt that made it.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// UnknownPolicy says what to do with a send whose outcome nobody can tell:
// its provider cannot be asked (SMTP), or could not tell by its last ask,
// Config.ReconcileFor after the send.
type UnknownPolicy string

const (
	// PolicyResend sends it again (resent=true): a rare duplicate beats a
	// lost notification, as failing open does (ADR-0006). An email goes
	// out again under the same Message-ID.
	PolicyResend UnknownPolicy = "resend"
	// PolicyDeadLetter gives it up to the dead letter topic.
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

// askProvider asks rc, the channel's Reconciler, about w, bounded by the
// send timeout. A listed text is w's when its digest is w's, whatever m
// renders to now; without a digest (a claim written before claims kept
// one), when it is m's text, the best guess left. A window without an end
// (a claim written without a lease) ends now.
func (s *Service) askProvider(ctx context.Context, rc ports.Reconciler, m ports.Message, w unknownSend) (ports.Reconciliation, error) {
	win := ports.Window{Since: w.Since, Until: cmp.Or(w.Until, s.cfg.Now()), Sender: w.Sender,
		Sent: func(text string) bool { return TextDigest(text) == w.Digest }}
	if w.Digest == "" {
		win.Sent = func(text string) bool { return text == m.Text }
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	return rc.Reconcile(rctx, m, win)
}
