package domain

import (
	"context"
	"log/slog"

	"github.com/harborlight/notification-worker/ports"
)

// logLimited logs msg through log unless l holds it back (see
// ports.LogLimit), adding how many were held back since the last one let
// through as suppressed_since_last. It keeps a warning that an outage
// repeats for every record (idempotency_check_unavailable,
// idempotency_record_failed) to one per Config.LogEvery.
func (s *Service) logLimited(ctx context.Context, l *ports.LogLimit, log *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	held, ok := l.Allow(s.cfg.Now())
	if !ok {
		return
	}
	log.LogAttrs(ctx, level, msg, append(attrs, slog.Int("suppressed_since_last", held))...)
}
