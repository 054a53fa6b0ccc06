package domain

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

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
