package domain

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Service is "send unless already sent". It implements ports.Handler and is
// safe for concurrent use.
//
// Besides the store, it remembers what it delivered in two places, so that
// its own retries never send a notification twice: the record's
// ports.Deliveries (every delivery, for the attempts at that record) and the
// ledger (deliveries whose sent record the store has not confirmed, for any
// record this process handles, bounded by Config.LedgerSize and Config.TTL).
// Owed records are written from the ledger when the store answers again.
type Service struct {
	cfg         Config
	ledger      *ledger
	draining    atomic.Bool    // a drain goroutine runs
	drains      sync.WaitGroup // the drain goroutine, for Close
	closed      chan struct{}  // closed by Close
	closeOnce   sync.Once
	unavailable *rateLimited
	recordFail  *rateLimited
}

var _ ports.Handler = (*Service)(nil)

// NewService checks cfg and returns a Service.
func NewService(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if cfg.Templates == nil {
		t, err := LoadTemplates("")
		if err != nil {
			return nil, err
		}
		cfg.Templates = t
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Service{
		cfg:         cfg,
		ledger:      newLedger(cfg.LedgerSize, cfg.TTL, cfg.Now),
		closed:      make(chan struct{}),
		unavailable: &rateLimited{every: cfg.LogEvery, now: cfg.Now},
		recordFail:  &rateLimited{every: cfg.LogEvery, now: cfg.Now},
	}, nil
}

// LongestHandle bounds how long Handle takes on one record, with every
// dependency as slow as its timeout allows: per channel, a wait on another
// worker's claim (the claim TTL, then one more look), a reconciliation and
// a send (the send timeout each), and the claims, records and releases
// around them (a store timeout each; five in all). A call running longer is
// not waiting on anything the service bounds: a notifier ignoring its
// context, or a bug.
func (s *Service) LongestHandle() time.Duration {
	return time.Duration(len(ports.Channels)) * (s.cfg.ClaimTTL + s.cfg.ClaimWaitMax + 2*s.cfg.SendTimeout + 5*s.cfg.StoreTimeout)
}

// Owed returns how many deliveries the ledger holds whose sent record is
// still owed to the store, and how many were dropped from it because it was
// full (each such drop reopens the store's own duplicate window for that
// notification).
func (s *Service) Owed() (owed int, evicted int64) { return s.ledger.len(), s.ledger.evictions() }

// Handle decodes rec and delivers each of its notifications. It returns nil
// when every notification was sent, was a duplicate, or found its recipient
// opted out, and for a stale event, which it skips before any claim (see
// Config.MaxEventAge). A notification found
// in rec.Deliveries was delivered by an earlier attempt at rec: it is
// neither sent nor reported again. Otherwise the error's
// ports.Kind tells the consumer what to do: Permanent for a record that can
// never succeed (it does not decode, its type is unknown, a provider refused
// it for good, its occurred_at is more than ClockSkew in the future),
// Unavailable when the store is down in the closed mode, and
// Retryable for everything else. Retrying a record is safe: what was sent is
// skipped as a duplicate.
//
// Cancelling ctx abandons waits and sends not yet started; a send that
// succeeded is recorded even so.
func (s *Service) Handle(ctx context.Context, rec ports.Record) error {
	log := s.cfg.Logger.With(
		slog.String("topic", rec.Topic),
		slog.Int("partition", int(rec.Partition)),
		slog.Int64("offset", rec.Offset),
	)
	ev, err := Decode(rec.Value)
	if err != nil {
		return ports.MarkPermanent(err)
	}
	log = log.With(slog.String("event_id", ev.EventID), slog.String("shipment_id", ev.ShipmentID))
	if stale, err := s.stale(log, ev, rec); err != nil || stale {
		return err
	}

	// Render everything first: an event that cannot render on one channel
	// is poison as a whole, and nothing of it should go out half-formed.
	msgs := make([]ports.Message, 0, len(ev.Channels))
	for _, ch := range ev.Channels {
		if s.cfg.Notifiers[ch] == nil {
			return ports.MarkPermanent(fmt.Errorf("event %s: no notifier is configured for channel %q", ev.EventID, ch))
		}
		m, err := s.cfg.Templates.Render(ev, ch)
		if err != nil {
			return ports.MarkPermanent(fmt.Errorf("event %s: %w", ev.EventID, err))
		}
		m.Fingerprint = Fingerprint(ev, ch)
		msgs = append(msgs, m)
	}

	var failed []error
	worst := ports.Permanent
	for _, m := range msgs {
		mlog := log.With(slog.String("channel", string(m.Channel)))
		if _, ok := rec.Deliveries.Lookup(m.IdempotencyKey); ok {
			s.payIfOwed(ctx, mlog, m.IdempotencyKey)
			mlog.Debug("notification_delivered_earlier")
			continue
		}
		outcome, err := s.deliver(ctx, mlog, m, rec.Deliveries)
		if outcome != stillUnknown {
			s.cfg.Observer.Observe(m.Channel, outcome)
		}
		if err == nil {
			continue
		}
		failed = append(failed, fmt.Errorf("%s: %w", m.Channel, err))
		// One retryable channel makes the record worth retrying: the sent
		// channels are skipped then, and a permanent one fails again.
		if k := ports.KindOf(err); k != ports.Permanent && (worst == ports.Permanent || k == ports.Unavailable) {
			worst = k
		}
	}
	if len(failed) == 0 {
		return nil
	}
	err = fmt.Errorf("event %s: %w", ev.EventID, errors.Join(failed...))
	switch worst {
	case ports.Permanent:
		return ports.MarkPermanent(err)
	case ports.Unavailable:
		return ports.MarkUnavailable(err)
	}
	return err
}

// stillUnknown is deliver's outcome for a notification whose unknown
// outcome was reported by an earlier attempt and is not known yet: not
// reported again.
const stillUnknown ports.Outcome = ""

// claimResult is what the claim step decided.
type claimResult int

const (
	claimed   claimResult = iota // we hold the key: send, then record or release
	unchecked                    // the store could not answer, failing open: send, then try to record
	duplicate                    // already sent: skip
	conflict                     // already sent, but for another message: dead-letter
	reclaimed                    // we hold a claim whose send may have gone out: reconcile first
)

// deliver runs the protocol for one notification, and adds it to done once
// the provider accepted it.
func (s *Service) deliver(ctx context.Context, log *slog.Logger, m ports.Message, done *ports.Deliveries) (ports.Outcome, error) {
	key := m.IdempotencyKey
	if o, ok := s.ledger.lookup(key); ok {
		return s.fromLedger(ctx, log, m, o)
	}
	token := newToken()
	unknown, wasUnknown := done.Unknown(key)
	if wasUnknown {
		// Claim with the token of the send whose outcome is unknown: its
		// claim, which that attempt kept, is then found to be ours.
		token = unknown.Token
	}
	res, found, err := s.claim(ctx, log, m, token)
	if outcome, err, ended := s.claimEnded(log, m, res, found, err); ended {
		return outcome, err
	}
	if res == reclaimed || wasUnknown {
		// Another worker's claim, taken over: its history names the
		// earliest send under the key and the text it sent.
		w := ports.Unknown{Token: token, Since: found.Lease.First, Until: found.Lease.Until, Digest: found.Lease.Digest, First: s.cfg.Now()}
		if w.Since.IsZero() {
			w.Since = found.Lease.Start
		}
		if wasUnknown {
			w = unknown
		}
		outcome, err, send := s.reconcile(ctx, log, m, done, w, wasUnknown)
		if !send {
			return outcome, err
		}
		// Not delivered, or nobody can tell and the policy resends: send
		// under a claim of our own with a full lease.
		if res != unchecked {
			s.release(ctx, log, key, token)
		}
		token = newToken()
		res, found, err = s.claim(ctx, log, m, token)
		if outcome, err, ended := s.claimEnded(log, m, res, found, err); ended {
			return outcome, err
		}
		if res == reclaimed {
			// Another worker's claim, made and abandoned in the moment
			// between our release and our claim: reconcile it next time.
			return ports.OutcomeFailedRetryable, fmt.Errorf("claim %s: abandoned by another worker while reconciling", key)
		}
	}
	return s.sendAndRecord(ctx, log, m, done, res, token)
}

// claimEnded reports whether the claim step ended the notification without
// a send, and how: the store could not be asked and the failure mode says
// wait (err), it was sent already (duplicate), or sent for another message
// (conflict).
func (s *Service) claimEnded(log *slog.Logger, m ports.Message, res claimResult, found ports.Claim, err error) (ports.Outcome, error, bool) {
	switch {
	case err != nil:
		return ports.OutcomeFailedRetryable, err, true
	case res == duplicate:
		return ports.OutcomeDuplicate, nil, true
	case res == conflict:
		outcome, err := s.conflict(log, m, found.Receipt)
		return outcome, err, true
	}
	return "", nil, false
}

// sendAndRecord sends m, holding the claim token (res claimed) or
// unchecked, and records the send.
func (s *Service) sendAndRecord(ctx context.Context, log *slog.Logger, m ports.Message, done *ports.Deliveries, res claimResult, token string) (ports.Outcome, error) {
	start := s.cfg.Now()
	receipt, err := s.send(ctx, log, m, res, token)
	if errors.Is(err, ports.ErrOutcomeUnknown) {
		// The provider may have it: keep the claim, and reconcile on the
		// next attempt rather than send again now.
		now := s.cfg.Now()
		done.SetUnknown(m.IdempotencyKey, ports.Unknown{Token: token, Since: start, Until: now, Digest: TextDigest(m.Text), First: now})
		log.Warn("send_outcome_unknown",
			slog.String("to", ports.MaskAddress(m.Channel, m.To)),
			slog.String("error", err.Error()))
		return ports.OutcomeUnknown, ports.MarkUnavailable(fmt.Errorf("send %s: %w", m.IdempotencyKey, err))
	}
	if errors.Is(err, ports.ErrRecipientOptedOut) {
		// The customer's choice, not a failure: record it as sent, so a
		// replay is a duplicate and the provider is not asked again.
		if receipt.ProviderID == "" {
			receipt.ProviderID = optedOutID
		}
		s.delivered(ctx, log, m, done, receipt)
		log.Info("recipient_opted_out",
			slog.String("to", ports.MaskAddress(m.Channel, m.To)),
			slog.String("provider_id", receipt.ProviderID),
			slog.String("error", err.Error()))
		return ports.OutcomeOptedOut, nil
	}
	if err != nil {
		if res == claimed {
			s.release(ctx, log, m.IdempotencyKey, token)
		}
		outcome, level := ports.OutcomeFailedRetryable, slog.LevelWarn
		if ports.KindOf(err) == ports.Permanent {
			outcome, level = ports.OutcomeFailedPermanent, slog.LevelError
		}
		log.Log(ctx, level, "notification_failed",
			slog.String("to", ports.MaskAddress(m.Channel, m.To)),
			slog.String("outcome", string(outcome)),
			slog.String("error", err.Error()))
		return outcome, fmt.Errorf("send %s: %w", m.IdempotencyKey, err)
	}
	s.delivered(ctx, log, m, done, receipt)
	log.Info("notification_sent",
		slog.String("to", ports.MaskAddress(m.Channel, m.To)),
		slog.String("provider_id", receipt.ProviderID),
		slog.Bool("idempotency_checked", res == claimed))
	return ports.OutcomeSent, nil
}

// optedOutID is the ProviderID a sent record keeps for an opted-out
// recipient when the notifier's receipt names none.
const optedOutID = "opted-out"

// delivered remembers a delivery of m in done and records it. The record
// is written even if ctx was cancelled meanwhile, or a replay would send it
// again; what the store does not take, the ledger keeps until it does.
func (s *Service) delivered(ctx context.Context, log *slog.Logger, m ports.Message, done *ports.Deliveries, r ports.Receipt) {
	if r.SentAt.IsZero() {
		r.SentAt = s.cfg.Now()
	}
	r.Fingerprint = m.Fingerprint
	done.Add(m.IdempotencyKey, r)
	if err := s.record(ctx, m.IdempotencyKey, r, s.cfg.TTL); err != nil {
		s.ledger.owe(m.IdempotencyKey, r)
		s.recordFail.log(ctx, log, slog.LevelWarn, "idempotency_record_failed",
			slog.String("error", err.Error()))
	}
	s.drainSoon()
}

// send calls the channel's notifier. Should the notifier panic, it gives
// the claim back before letting the panic go on to the event source (which
// recovers and dead-letters the record): otherwise the pending claim would
// hold off every replay of the record until it is taken over.
func (s *Service) send(ctx context.Context, log *slog.Logger, m ports.Message, res claimResult, token string) (ports.Receipt, error) {
	sendCtx, cancel := context.WithTimeout(ctx, s.cfg.SendTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			if res == claimed {
				s.release(ctx, log, m.IdempotencyKey, token)
			}
			panic(r)
		}
	}()
	return s.cfg.Notifiers[m.Channel].Send(sendCtx, m)
}

// claim takes the key, or finds it sent, or waits while another worker holds
// it. found is what the store reported: the record of a duplicate or a
// conflict, the lease of a claim reclaimed. It returns an error only when
// the notification must not be sent now.
func (s *Service) claim(ctx context.Context, log *slog.Logger, m ports.Message, token string) (res claimResult, found ports.Claim, err error) {
	key, digest := m.IdempotencyKey, TextDigest(m.Text)
	deadline := s.cfg.Now().Add(s.cfg.ClaimTTL + s.cfg.ClaimWaitMax)
	wait := s.cfg.ClaimWaitMax / 16
	sawInFlight := false
	for {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
		c, err := s.cfg.Store.Claim(cctx, key, token, digest, s.cfg.ClaimTTL)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return 0, c, ctx.Err()
		case err != nil && sawInFlight:
			// We know another worker is sending this one: failing open now
			// would send it a second time. A store that cannot answer is
			// just one more look that told us nothing; keep waiting.
			c.State = ports.InFlight
		case err != nil && s.cfg.FailureMode == FailClosed:
			return 0, c, ports.MarkUnavailable(fmt.Errorf("claim %s: %w", key, err))
		case err != nil && c.State == ports.TakenOver:
			// The store took an abandoned claim over but cannot vouch
			// for it. Failing open must not send blind: that claim's
			// send may have gone out. Reconcile it first, as for a
			// takeover; what follows claims afresh, and fails open then.
			s.unavailable.log(ctx, log, slog.LevelWarn, "idempotency_check_unavailable",
				slog.String("error", err.Error()))
			log.Info("claim_taken_over", slog.Time("abandoned_since", c.Lease.Start), slog.Time("first_claimed", c.Lease.First))
			return reclaimed, c, nil
		case err != nil:
			s.unavailable.log(ctx, log, slog.LevelWarn, "idempotency_check_unavailable",
				slog.String("error", err.Error()))
			return unchecked, c, nil
		}
		switch c.State {
		case ports.Claimed:
			return claimed, c, nil
		case ports.AlreadySent:
			if conflicting(c.Receipt, m) {
				return conflict, c, nil
			}
			log.Info("duplicate_suppressed",
				slog.String("provider_id", c.Receipt.ProviderID),
				slog.Time("sent_at", c.Receipt.SentAt))
			return duplicate, c, nil
		case ports.TakenOver:
			if c.Lease.Token != token {
				log.Info("claim_taken_over", slog.Time("abandoned_since", c.Lease.Start), slog.Time("first_claimed", c.Lease.First))
			}
			return reclaimed, c, nil
		case ports.InFlight:
			if c.Lease.Token == token {
				// Our own claim, kept by an earlier attempt whose send
				// ended unknown.
				return reclaimed, c, nil
			}
			if o, ok := s.ledger.lookup(key); ok {
				// This process delivered it and could not record it: the
				// pending claim is ours, delivered, and nothing to wait on.
				res, err := s.fromLedger(ctx, log, m, o)
				if res == ports.OutcomeConflict {
					return conflict, ports.Claim{Receipt: o.receipt}, nil
				}
				return duplicate, c, err
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
			return 0, c, fmt.Errorf("claim %s: store answered an unknown state %v", key, c.State)
		}
		left := deadline.Sub(s.cfg.Now())
		if left <= 0 {
			return 0, c, fmt.Errorf("claim %s: held by another worker for longer than the claim TTL %v", key, s.cfg.ClaimTTL)
		}
		log.Debug("claim_in_flight_wait", slog.Duration("wait", min(wait, left)))
		if err := sleep(ctx, min(wait, left)); err != nil {
			return 0, c, err
		}
		wait = min(2*wait, s.cfg.ClaimWaitMax)
	}
}

// conflicting reports whether r records a message other than m under m's
// key. A record without a fingerprint (written before fingerprints) never
// conflicts; one that kept only the first characters of its fingerprint
// (see ports.FingerprintKept) is compared on those.
func conflicting(r ports.Receipt, m ports.Message) bool {
	return r.Fingerprint != "" && m.Fingerprint != "" && !strings.HasPrefix(m.Fingerprint, r.Fingerprint)
}

// conflict reports an event_id that was sent for another message: nothing
// is sent, and the record goes to the dead letter topic for the producer's
// owners to look at.
func (s *Service) conflict(log *slog.Logger, m ports.Message, sent ports.Receipt) (ports.Outcome, error) {
	log.Error("event_id_conflict",
		slog.String("to", ports.MaskAddress(m.Channel, m.To)),
		slog.String("fingerprint", m.Fingerprint),
		slog.String("sent_fingerprint", sent.Fingerprint),
		slog.String("sent_provider_id", sent.ProviderID),
		slog.Time("sent_at", sent.SentAt))
	return ports.OutcomeConflict, ports.MarkPermanent(fmt.Errorf("%s: event_id reused with a different payload", m.IdempotencyKey))
}

// fromLedger reports a notification this process delivered and still owes
// a record for: a duplicate (and it tries to write the record), or a
// conflict when the ledger's delivery was another message.
func (s *Service) fromLedger(ctx context.Context, log *slog.Logger, m ports.Message, o owed) (ports.Outcome, error) {
	if conflicting(o.receipt, m) {
		return s.conflict(log, m, o.receipt)
	}
	s.suppressOwed(ctx, log, o)
	return ports.OutcomeDuplicate, nil
}

// record writes the sent record of key, living ttl, with the store timeout.
// It runs even when ctx is cancelled: the send it records has happened.
func (s *Service) record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	return s.cfg.Store.Record(rctx, key, r, ttl)
}

// pay writes the record the ledger owes for o, with what is left of its TTL
// since the send, and settles o once the store took it.
func (s *Service) pay(ctx context.Context, o owed) error {
	ttl := s.cfg.TTL - s.cfg.Now().Sub(o.receipt.SentAt)
	if ttl > 0 {
		if err := s.record(ctx, o.key, o.receipt, min(ttl, s.cfg.TTL)); err != nil {
			return err
		}
	}
	s.ledger.settle(o)
	return nil
}

// payIfOwed writes key's owed record, if the ledger holds one.
func (s *Service) payIfOwed(ctx context.Context, log *slog.Logger, key string) {
	if o, ok := s.ledger.lookup(key); ok {
		if err := s.pay(ctx, o); err != nil {
			s.recordFail.log(ctx, log, slog.LevelWarn, "idempotency_record_failed",
				slog.String("error", err.Error()))
		}
	}
}

// suppressOwed reports a notification this process delivered and still owes
// a record for as a duplicate, and tries to write that record.
func (s *Service) suppressOwed(ctx context.Context, log *slog.Logger, o owed) {
	log.Info("duplicate_suppressed",
		slog.String("provider_id", o.receipt.ProviderID),
		slog.Time("sent_at", o.receipt.SentAt),
		slog.Bool("recorded", false))
	s.payIfOwed(ctx, log, o.key)
}

// drainBatch is how many owed records one look at the ledger takes,
// drainRetry how long the drain waits after a write the store refused, and
// finalRetry how long Close's final attempt waits after one.
const (
	drainBatch = 64
	drainRetry = time.Second
	finalRetry = 100 * time.Millisecond
)

// drainSoon makes sure a goroutine writes the ledger's owed records while
// there are any: oldest first, waiting drainRetry after a write the store
// refused. At most one runs; it ends when the ledger is empty or at Close.
func (s *Service) drainSoon() {
	if s.ledger.len() == 0 || !s.draining.CompareAndSwap(false, true) {
		return
	}
	s.drains.Add(1)
	go s.drain()
}

func (s *Service) drain() {
	defer s.drains.Done()
	for {
		for s.payOldest(s.closed) {
		}
		if s.ledger.len() > 0 {
			select {
			case <-s.closed:
				s.draining.Store(false)
				return
			case <-time.After(drainRetry):
				continue
			}
		}
		// Empty. A debt entered after the look above would find draining
		// still set and start no drain: look again once it is cleared.
		s.draining.Store(false)
		if s.ledger.len() == 0 || !s.draining.CompareAndSwap(false, true) {
			return
		}
	}
}

// payOldest writes one batch of owed records and reports whether all were
// written and more may be owed. It stops at the first write the store
// refuses, and before each write once stop is closed (nil: never).
func (s *Service) payOldest(stop <-chan struct{}) bool {
	batch := s.ledger.oldest(drainBatch)
	for _, o := range batch {
		select {
		case <-stop:
			return false
		default:
		}
		if s.pay(context.Background(), o) != nil {
			return false
		}
	}
	return len(batch) > 0
}

// Close is CloseBy with no time to spare: one pass at the owed records.
func (s *Service) Close() { s.CloseBy(time.Time{}) }

// CloseBy stops the writing of owed records in the background, waits for
// it, and then makes a final attempt at the records still owed: oldest
// first, each write bounded by the store timeout, a pass ending at the
// first write the store refuses; passes repeat every finalRetry until
// nothing is owed or deadline has passed. A deadline already past still
// gets one pass, so CloseBy may end up to one store timeout after it.
//
// What is still owed then is lost with the process: a replay of it is
// protected by the store alone, and is sent again if the store has no
// record. CloseBy logs owed_records_lost (error level, with count), tells
// Config.OwedLost, and returns the count. Handle must not be called after
// Close or CloseBy; only the first call does anything, later ones return 0.
func (s *Service) CloseBy(deadline time.Time) (lost int) {
	first := false
	s.closeOnce.Do(func() { close(s.closed); first = true })
	s.drains.Wait()
	if !first {
		return 0
	}
	for {
		for s.payOldest(nil) {
		}
		left := deadline.Sub(s.cfg.Now())
		if s.ledger.len() == 0 || left <= 0 {
			break
		}
		time.Sleep(min(finalRetry, left))
	}
	// oldest drops the entries past their TTL, whose records need no write.
	lost = len(s.ledger.oldest(s.cfg.LedgerSize))
	if lost > 0 {
		s.cfg.Logger.Error("owed_records_lost",
			slog.Int("count", lost),
			slog.String("error", "the store did not take these sent records before shutdown; a replay of each is sent again unless the store holds its record"))
		s.cfg.OwedLost(lost)
	}
	return lost
}

// release gives the key back after a failed send, so a retry or a replay
// can send it. It runs even when ctx is cancelled. A failed release is
// harmless: the claim expires after the claim TTL.
func (s *Service) release(ctx context.Context, log *slog.Logger, key, token string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	if err := s.cfg.Store.Release(rctx, key, token); err != nil {
		log.Warn("idempotency_release_failed", slog.String("error", err.Error()),
			slog.Duration("expires_in", s.cfg.ClaimTTL))
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newToken returns a token unique to one delivery attempt, so a claim is
// released only by the attempt that made it.
func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
