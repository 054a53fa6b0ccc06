package domain

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// rateLimited logs a message at most once per interval and counts what it
// held back, so a Redis outage does not write one warning per record.
type rateLimited struct {
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (r *rateLimited) log(ctx context.Context, log *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	r.mu.Lock()
	now := r.now()
	if !r.last.IsZero() && now.Sub(r.last) < r.every {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	r.mu.Unlock()
	attrs = append(attrs, slog.Int("suppressed_since_last", n))
	log.LogAttrs(ctx, level, msg, attrs...)
}
