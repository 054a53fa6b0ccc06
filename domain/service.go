package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Service is "send unless already sent". It implements ports.Handler and is
// safe for concurrent use. Besides the store, it keeps a ledger of its
// sends, so that its own retries never send a notification twice, with the
// store up or down; the records it owes the store are written in the
// background (the drain), and a last time by CloseBy.
type Service struct {
	cfg       Config
	ledger    *ledger
	rateWait  time.Duration  // rateWaitMax of cfg
	drains    sync.WaitGroup // the drain, for Close
	closed    chan struct{}  // closed by Close
	closeOnce sync.Once

	refused atomic.Int64 // attempts refused for a full ledger
	// limits holds back the warnings an outage repeats for every record,
	// by message (see logLimited).
	limits map[string]*ports.LogLimit
}

var _ ports.Handler = (*Service)(nil)

// NewService checks cfg and returns a Service, whose drain runs until
// Close.
func NewService(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if cfg.Templates == nil {
		t, err := LoadTemplates(nil)
		if err != nil {
			return nil, err
		}
		cfg.Templates = t
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg:      cfg,
		ledger:   newLedger(cfg.LedgerSize, cfg.TTL, cfg.Now),
		rateWait: rateWaitMax(&cfg),
		closed:   make(chan struct{}),
		limits:   map[string]*ports.LogLimit{},
	}
	for _, msg := range []string{"idempotency_check_unavailable", "idempotency_record_failed", "notification_rate_limited", "ledger_full"} {
		s.limits[msg] = &ports.LogLimit{Every: cfg.LogEvery}
	}
	s.drains.Add(1)
	go s.drain()
	return s, nil
}

// LongestHandle bounds how long Handle takes on one record, every
// dependency as slow as its timeout allows: per channel, a wait on another
// worker's claim (the claim TTL, then one more look), a reconciliation and
// a send (a send timeout each), five store calls around them, and the
// sender's pace (a turn asked, and two waits of rateWaitMax). A call
// running longer is waiting on nothing the service bounds.
func (s *Service) LongestHandle() time.Duration {
	pace := 2*max(s.rateWait, 0) + s.cfg.StoreTimeout
	return time.Duration(len(s.cfg.Templates.Channels())) * (s.cfg.ClaimTTL + s.cfg.ClaimWaitMax + 2*s.cfg.SendTimeout + 5*s.cfg.StoreTimeout + pace)
}

// Owed returns how many sent records the ledger owes the store, and how
// many attempts at a record Handle refused because Config.LedgerSize
// records were owed.
func (s *Service) Owed() (owed int, refused int64) {
	return s.ledger.owedCount(), s.refused.Load()
}

// Handle decodes rec and delivers each of its notifications. It returns nil
// when every notification was sent, was a duplicate, or found its recipient
// opted out, and for a stale event, skipped before any claim (see
// Config.MaxEventAge). A notification delivered by an earlier attempt with
// the same rec.DeliveryID (non-zero) is neither sent nor reported again.
// Otherwise the error's ports.Kind says what to do: Permanent for a record
// that can never succeed (it does not decode, a provider refused it for
// good, its occurred_at is more than ClockSkew ahead); Unavailable when a
// dependency needs the operator (the store in the closed mode, a
// provider's credentials, the rate limiter's Redis) or the ledger is full;
// Paced when a notification waits for its sender's pace or the next ask
// about a send of unknown outcome (ports.PacedFor); else Retryable. Of
// several, the kind that keeps the record longest wins (Unavailable,
// Paced, Retryable, Permanent): none still waiting is dead-lettered for
// another's failure. Retrying is safe: what was sent is skipped.
//
// While Config.LedgerSize records are owed to the store, an attempt is
// refused before any claim (Unavailable, ledger_full, counted in Owed)
// unless an earlier attempt of its delivery left something in the ledger.
// Cancelling ctx abandons waits and sends not yet started; a send that
// succeeded is recorded even so.
func (s *Service) Handle(ctx context.Context, rec ports.Record) error {
	ev, err := s.cfg.Templates.DecodeEvent(rec.Value)
	if err != nil {
		return ports.MarkPermanent(err)
	}
	// What every line about the record carries, in this order, and a
	// notification's lines its channel after them.
	attrs := [...]slog.Attr{
		slog.String("topic", rec.Topic),
		slog.Int("partition", int(rec.Partition)),
		slog.Int64("offset", rec.Offset),
		slog.String("event_id", ev.EventID),
		slog.String("shipment_id", ev.ShipmentID),
		{}, // the channel's
	}
	if stale, err := s.stale(ctx, attrs[:5], ev, rec); err != nil || stale {
		return err
	}
	msgs, err := s.render(ev)
	if err != nil {
		return err
	}
	if !s.ledger.admits(rec.DeliveryID, msgs) {
		s.refused.Add(1)
		owed := s.ledger.owedCount()
		s.logLimited(ctx, with(ctx, s.cfg.Logger, attrs[:5]...), slog.LevelWarn, "ledger_full",
			slog.Int("owed", owed), slog.Int("ledger_size", s.cfg.LedgerSize))
		return ports.MarkUnavailable(fmt.Errorf("event %s: ledger full: %d sent records are owed to the idempotency store, at least the ledger size %d; the record waits until the store takes them", ev.EventID, owed, s.cfg.LedgerSize))
	}
	// What the delivery leaves in the ledger goes when its record is
	// finished (below), or else when its source ends it (a panic included).
	finished := false
	defer func() {
		if !finished {
			s.ledger.watch(rec.DeliveryID, msgs, ports.DeliveryOf(ctx).Ended)
		}
	}()
	var failed []error
	worst := ports.Permanent
	for _, m := range msgs {
		attrs[5] = slog.String("channel", string(m.Channel))
		n := &notification{m: m, log: with(ctx, s.cfg.Logger, attrs[:]...), delivery: rec.DeliveryID}
		s.deliver(ctx, n)
		if o := outcomes[n.state]; o != "" {
			s.cfg.Observer.Observe(m.Channel, o)
		}
		if n.err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", m.Channel, n.err))
			// One retryable channel makes the record worth retrying: the
			// sent channels are skipped then, and a permanent one fails again.
			if k := ports.KindOf(n.err); holdRank(k) > holdRank(worst) {
				worst = k
			}
		}
	}
	if len(failed) == 0 || worst == ports.Permanent {
		// The record is finished: no attempt of this delivery follows.
		finished = true
		for _, m := range msgs {
			s.ledger.forget(m.IdempotencyKey, rec.DeliveryID)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return mark[worst](fmt.Errorf("event %s: %w", ev.EventID, errors.Join(failed...)))
}

// render renders ev's message on each of its channels, or returns a
// Permanent error: an event that cannot render on one channel is poison as
// a whole, and nothing of it should go out half-formed.
func (s *Service) render(ev Event) ([]ports.Message, error) {
	msgs := make([]ports.Message, 0, len(ev.Channels))
	for _, ch := range ev.Channels {
		if s.cfg.Notifiers[ch] == nil {
			return nil, ports.MarkPermanent(fmt.Errorf("event %s: no notifier is configured for channel %q", ev.EventID, ch))
		}
		m, err := s.cfg.Templates.Render(ev, ch)
		if err != nil {
			return nil, ports.MarkPermanent(fmt.Errorf("event %s: %w", ev.EventID, err))
		}
		m.Fingerprint = Fingerprint(ev, ch)
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// holdRank orders the kinds by how long they keep a record: Permanent
// (dead-lettered now), Retryable (after the retry budget), Paced (until
// the pace allows), Unavailable (until the dependency answers).
func holdRank(k ports.Kind) int {
	return slices.Index([]ports.Kind{ports.Permanent, ports.Retryable, ports.Paced, ports.Unavailable}, k)
}

// mark wraps an error as its kind (a Retryable one as it is).
var mark = map[ports.Kind]func(error) error{
	ports.Permanent: ports.MarkPermanent, ports.Unavailable: ports.MarkUnavailable, ports.Paced: ports.MarkPaced,
	ports.Retryable: func(err error) error { return err },
}

// ClockSkew is how far a producer's clock may run ahead of this worker's:
// an event whose occurred_at is later than now plus ClockSkew cannot have
// happened yet, and is refused as poison.
const ClockSkew = 5 * time.Minute

// stale reports whether ev is older than the maximum age of its type, and
// if so logs stale_event_skipped (with attrs) and reports OutcomeStale on
// each of its channels. Its age runs from occurred_at, else from the
// record's timestamp (which a replay keeps); with neither, it is never
// stale. An occurred_at more than ClockSkew ahead is a Permanent error.
func (s *Service) stale(ctx context.Context, attrs []slog.Attr, ev Event, rec ports.Record) (bool, error) {
	at, from := ev.OccurredAt, "occurred_at"
	if at.IsZero() {
		at, from = rec.Timestamp, "record_timestamp"
	}
	if at.IsZero() {
		return false, nil
	}
	age := s.cfg.Now().Sub(at)
	if from == "occurred_at" && age < -ClockSkew {
		return false, ports.MarkPermanent(fmt.Errorf("event %s: occurred_at %s is %v ahead of this worker's clock, more than the clock skew allowed (%v): it cannot have happened yet",
			ev.EventID, at.UTC().Format(time.RFC3339), (-age).Round(time.Second), ClockSkew))
	}
	limit, ok := s.cfg.MaxEventAgeByType[ev.Type]
	if !ok {
		limit = s.cfg.MaxEventAge
	}
	if age <= limit {
		return false, nil
	}
	with(ctx, s.cfg.Logger, attrs...).Info("stale_event_skipped",
		slog.String("type", ev.Type),
		slog.Duration("age", age.Round(time.Second)),
		slog.Duration("max_age", limit),
		slog.String("age_from", from))
	for _, ch := range ev.Channels {
		s.cfg.Observer.Observe(ch, ports.OutcomeStale)
	}
	return true, nil
}

// drainEvery is how often the drain looks for owed records, and
// finalRetry how often CloseBy's final attempt does.
const (
	drainEvery = time.Second
	finalRetry = 100 * time.Millisecond
)

// drain writes the ledger's owed records every drainEvery until Close.
func (s *Service) drain() {
	defer s.drains.Done()
	for ports.Sleep(s.closed, drainEvery) {
		s.writeAllOwed()
	}
}

// writeAllOwed writes the ledger's owed records, oldest first, stopping at
// the first write the store refuses.
func (s *Service) writeAllOwed() {
	for _, o := range s.ledger.owedRecords() {
		if s.writeOwed(context.Background(), o) != nil {
			return
		}
	}
}

// Close is CloseBy with no time to spare: one pass at the owed records.
func (s *Service) Close() { s.CloseBy(time.Time{}) }

// CloseBy stops the drain, then makes a final attempt at the records still
// owed: passes as the drain's, every finalRetry until nothing is owed or
// deadline has passed (one pass at least, so it may end up to a store
// timeout after it).
//
// What is still owed then is lost with the process (a replay of it is
// sent again unless the store has its record), and so is every send still
// under way (in a notifier ignoring its context): nothing writes a record
// after CloseBy. It logs owed_records_lost (with count, and sending: those
// still under way), tells Config.OwedLost, and returns the count, which
// may exceed what is lost (a send counted that then fails), never fall
// below it: a Handle still running that owes a record whose send was not
// counted reports it then (owed_records_lost with count 1, OwedLost(1)).
//
// Handle must not be called after Close or CloseBy (one still running may
// end); only the first call does anything, later ones return 0.
func (s *Service) CloseBy(deadline time.Time) (lost int) {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.drains.Wait()
		for s.writeAllOwed(); s.ledger.owedCount() > 0 && s.cfg.Now().Before(deadline); s.writeAllOwed() {
			time.Sleep(min(finalRetry, deadline.Sub(s.cfg.Now())))
		}
		owed, sending := s.ledger.close()
		lost = owed + sending
		s.reportLost(lost, sending, "the store did not take these sent records before shutdown, or their sends were still under way; a replay of each is sent again unless the store holds its record")
	})
	return lost
}

// reportLost logs owed_records_lost with count n, of which sending were
// sends still under way, and tells Config.OwedLost; nothing when n is 0.
func (s *Service) reportLost(n, sending int, why string) {
	if n == 0 {
		return
	}
	s.cfg.Logger.Error("owed_records_lost",
		slog.Int("count", n),
		slog.Int("sending", sending),
		slog.String("error", why))
	s.cfg.OwedLost(n)
}

// logLimited logs msg, a warning an outage repeats for every record (one
// of s.limits), through log at most once per Config.LogEvery, with how
// many were held back since the last one as suppressed_since_last.
func (s *Service) logLimited(ctx context.Context, log noteLog, level slog.Level, msg string, attrs ...slog.Attr) {
	held, ok := s.limits[msg].Allow(s.cfg.Now())
	if !ok {
		return
	}
	log.LogAttrs(ctx, level, msg, append(attrs, slog.Int("suppressed_since_last", held))...)
}

// noteLog writes the lines about one notification. Every line carries the
// record's attributes and the channel's (attrs, in Handle's order), then
// its own: what Logger.With(attrs...) would print, without formatting a
// handler of its own for each notification. Lines are written with the
// context of the record's handling, or for Log and LogAttrs the call's, so
// that a handler finds there what it adds to a record's lines (its trace
// and span, with tracing on).
type noteLog struct {
	ctx   context.Context
	l     *slog.Logger
	attrs []slog.Attr
}

// with returns l's lines carrying a copy of attrs before their own,
// written with ctx, the context the record is handled with.
func with(ctx context.Context, l *slog.Logger, attrs ...slog.Attr) noteLog {
	return noteLog{ctx: ctx, l: l, attrs: slices.Clone(attrs)}
}

func (n noteLog) Debug(msg string, attrs ...slog.Attr) {
	n.LogAttrs(n.ctx, slog.LevelDebug, msg, attrs...)
}

func (n noteLog) Info(msg string, attrs ...slog.Attr) {
	n.LogAttrs(n.ctx, slog.LevelInfo, msg, attrs...)
}

func (n noteLog) Warn(msg string, attrs ...slog.Attr) {
	n.LogAttrs(n.ctx, slog.LevelWarn, msg, attrs...)
}

func (n noteLog) Error(msg string, attrs ...slog.Attr) {
	n.LogAttrs(n.ctx, slog.LevelError, msg, attrs...)
}

func (n noteLog) Log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	n.LogAttrs(ctx, level, msg, attrs...)
}

// LogAttrs is slog.Logger's, with n's attributes first. Its lines carry
// no source position.
func (n noteLog) LogAttrs(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	h := n.l.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(n.attrs...)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r)
}
