package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Service is "send unless already sent". It implements ports.Handler and is
// safe for concurrent use.
//
// Besides the store, it remembers what it delivered in its journal, so
// that its own retries never send a notification twice: what a delivery of
// a record (ports.Record.DeliveryID) delivered, for that delivery's further
// attempts, and the deliveries whose sent record the store has not
// confirmed, for any record this process handles; kept at most Config.TTL.
// Owed records are written from the journal when the store answers again;
// once Config.LedgerSize are owed, Handle takes no new record until the
// store has taken some.
type Service struct {
	cfg       Config
	journal   *journal
	draining  atomic.Bool    // a drain goroutine runs
	drains    sync.WaitGroup // the drain goroutine, for Close
	closed    chan struct{}  // closed by Close
	closeOnce sync.Once
	// tally keeps CloseBy's count of the records lost with the process
	// whole: the sends in progress when it counts, and the records owed
	// after it by sends that were not (see CloseBy).
	tally struct {
		sync.Mutex
		done    bool                       // CloseBy has counted
		sending map[*notification]struct{} // sends under way, their delivery not yet entered
	}
	refused     atomic.Int64 // attempts refused for a full ledger
	unavailable *ports.LogLimit
	recordFail  *ports.LogLimit
	throttled   *ports.LogLimit
	ledgerFull  *ports.LogLimit
}

var _ ports.Handler = (*Service)(nil)

// NewService checks cfg and returns a Service.
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
		cfg:         cfg,
		journal:     newJournal(cfg.LedgerSize, cfg.TTL, cfg.Now),
		closed:      make(chan struct{}),
		unavailable: &ports.LogLimit{Every: cfg.LogEvery},
		recordFail:  &ports.LogLimit{Every: cfg.LogEvery},
		throttled:   &ports.LogLimit{Every: cfg.LogEvery},
		ledgerFull:  &ports.LogLimit{Every: cfg.LogEvery},
	}
	s.tally.sending = map[*notification]struct{}{}
	return s, nil
}

// LongestHandle bounds how long Handle takes on one record, with every
// dependency as slow as its timeout allows: per channel, a wait on another
// worker's claim (the claim TTL, then one more look), a reconciliation and
// a send (the send timeout each), and the claims, records and releases
// around them (a store timeout each; five in all), and the sender's pace:
// a turn asked (a store timeout), waited for, and a wait after a turn not
// granted or a provider's refusal (rateWaitMax each). A call running longer
// is not waiting on anything the service bounds: a notifier ignoring its
// context, or a bug.
func (s *Service) LongestHandle() time.Duration {
	pace := 2*max(rateWaitMax(&s.cfg), 0) + s.cfg.StoreTimeout
	return time.Duration(len(s.cfg.Templates.Channels())) * (s.cfg.ClaimTTL + s.cfg.ClaimWaitMax + 2*s.cfg.SendTimeout + 5*s.cfg.StoreTimeout + pace)
}

// Owed returns how many deliveries the journal holds whose sent record is
// still owed to the store, and how many attempts at a record Handle refused
// because Config.LedgerSize records were owed.
func (s *Service) Owed() (owed int, refused int64) {
	return s.journal.owedCount(), s.refused.Load()
}

// Handle decodes rec and delivers each of its notifications. It returns nil
// when every notification was sent, was a duplicate, or found its recipient
// opted out, and for a stale event, which it skips before any claim (see
// Config.MaxEventAge). A notification delivered by an earlier attempt
// carrying the same rec.DeliveryID (non-zero) is neither sent nor reported
// again. Otherwise the error's
// ports.Kind tells the consumer what to do: Permanent for a record that can
// never succeed (it does not decode, its type is unknown, a provider refused
// it for good, its occurred_at is more than ClockSkew in the future),
// Unavailable when the store is down in the closed mode (or another
// dependency the operator must see to: a provider's credentials, the rate
// limiter's Redis not answering; or a full ledger, below), Paced when a
// notification was held back by its sender's pace (Config.RateLimiter) or
// refused by the provider for it (ports.ErrRateLimited), or its send's
// outcome is unknown and the provider is asked again later (due then:
// ports.PacedFor), and Retryable for everything else. A record
// whose notifications failed in several ways takes the kind that keeps it
// longest: Unavailable over Paced over Retryable over Permanent, so that
// a notification still waiting is never dead-lettered for another one's
// failure. Retrying a record is safe: what was sent is skipped as a
// duplicate.
//
// While Config.LedgerSize sent records are owed to the store, an attempt
// at a record is refused before any claim or send (Unavailable, logged
// ledger_full and counted in Owed) unless an earlier attempt of its
// delivery left something in the journal: the record waits, unsent, for
// the store to take the owed records.
//
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

	if !s.journal.admits(rec.DeliveryID, msgs) {
		s.refused.Add(1)
		owed := s.journal.owedCount()
		s.logLimited(ctx, s.ledgerFull, with(ctx, s.cfg.Logger, attrs[:5]...), slog.LevelWarn, "ledger_full",
			slog.Int("owed", owed), slog.Int("ledger_size", s.cfg.LedgerSize))
		return ports.MarkUnavailable(fmt.Errorf("event %s: ledger full: %d sent records are owed to the idempotency store, at least the ledger size %d; the record waits until the store takes them", ev.EventID, owed, s.cfg.LedgerSize))
	}
	// What the delivery leaves in the journal goes when its record is
	// finished (below), or else when its source ends it (a panic included).
	finished := false
	defer func() {
		if !finished {
			s.journal.watch(rec.DeliveryID, msgs, ports.DeliveryOf(ctx).Ended)
		}
	}()

	var failed []error
	worst := ports.Permanent
	for _, m := range msgs {
		attrs[5] = slog.String("channel", string(m.Channel))
		n := &notification{m: m, log: with(ctx, s.cfg.Logger, attrs[:]...), delivery: rec.DeliveryID}
		s.deliver(ctx, n)
		if o, ok := n.state.outcome(); ok {
			s.cfg.Observer.Observe(m.Channel, o)
		}
		if n.err == nil {
			continue
		}
		failed = append(failed, fmt.Errorf("%s: %w", m.Channel, n.err))
		// One retryable channel makes the record worth retrying: the sent
		// channels are skipped then, and a permanent one fails again.
		if k := ports.KindOf(n.err); holdRank(k) > holdRank(worst) {
			worst = k
		}
	}
	if len(failed) == 0 || worst == ports.Permanent {
		// The record is finished: no attempt of this delivery follows.
		finished = true
		for _, m := range msgs {
			s.journal.finish(m.IdempotencyKey, rec.DeliveryID)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return mark(worst, fmt.Errorf("event %s: %w", ev.EventID, errors.Join(failed...)))
}

// holdRank orders the kinds by how long they keep a record: Permanent
// (dead-lettered now), Retryable (dead-lettered after the retry budget),
// Paced (retried until the pace allows), Unavailable (retried until the
// dependency answers, and the one an operator must act on).
func holdRank(k ports.Kind) int {
	switch k {
	case ports.Permanent:
		return 0
	case ports.Retryable:
		return 1
	case ports.Paced:
		return 2
	}
	return 3
}

// mark wraps err as kind (Retryable: err unchanged, as KindOf reads an
// unmarked error).
func mark(kind ports.Kind, err error) error {
	switch kind {
	case ports.Permanent:
		return ports.MarkPermanent(err)
	case ports.Unavailable:
		return ports.MarkUnavailable(err)
	case ports.Paced:
		return ports.MarkPaced(err)
	}
	return err
}
