package domain

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// ClockSkew is how far a producer's clock may run ahead of this worker's:
// an event whose occurred_at is later than now plus ClockSkew cannot have
// happened yet, and is refused as poison.
const ClockSkew = 5 * time.Minute

// stale reports whether ev is older than the maximum age of its type, and
// if so logs stale_event_skipped and reports OutcomeStale for each of its
// channels. Its age runs from occurred_at or, when the event has none, from
// the record's timestamp (the time its producer wrote it, which a replay
// keeps); with neither, the event has no age and is never stale. An
// occurred_at more than ClockSkew ahead of now is a Permanent error. attrs
// are the record's log attributes (Handle's), ctx its context.
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
