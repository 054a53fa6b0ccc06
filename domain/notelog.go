package domain

import (
	"context"
	"log/slog"
	"runtime"
	"time"
)

// noteLog writes the lines about one notification. Every line carries the
// record's attributes and the channel's (attrs, in Handle's order), then
// its own: what Logger.With(attrs...) would print, but attrs are not
// formatted into a handler of their own first, which cost a record a
// handler clone and its buffer's growth before any line was written.
// Methods are those of slog.Logger the domain uses, with the same level
// check and caller's PC. Lines are written with the context of the
// record's handling, or for Log and LogAttrs the call's, so that a handler
// finds there what it adds to a record's lines (its trace and span, with
// tracing on).
type noteLog struct {
	ctx   context.Context
	l     *slog.Logger
	attrs [6]slog.Attr
	n     int // of attrs in use
}

// with returns l's lines carrying attrs (at most six) before their own,
// written with ctx, the context the record is handled with.
func with(ctx context.Context, l *slog.Logger, attrs ...slog.Attr) noteLog {
	n := noteLog{ctx: ctx, l: l, n: len(attrs)}
	copy(n.attrs[:], attrs)
	return n
}

func (n noteLog) Debug(msg string, attrs ...slog.Attr) {
	n.log(n.ctx, slog.LevelDebug, msg, attrs)
}

func (n noteLog) Info(msg string, attrs ...slog.Attr) {
	n.log(n.ctx, slog.LevelInfo, msg, attrs)
}

func (n noteLog) Warn(msg string, attrs ...slog.Attr) {
	n.log(n.ctx, slog.LevelWarn, msg, attrs)
}

func (n noteLog) Error(msg string, attrs ...slog.Attr) {
	n.log(n.ctx, slog.LevelError, msg, attrs)
}

func (n noteLog) Log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	n.log(ctx, level, msg, attrs)
}

func (n noteLog) LogAttrs(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	n.log(ctx, level, msg, attrs)
}

// log is slog.Logger's log with n's attributes first. Its callers are the
// methods above, so the PC it records is their caller's.
func (n noteLog) log(ctx context.Context, level slog.Level, msg string, attrs []slog.Attr) {
	h := n.l.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // runtime.Callers, log, the method: its caller
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.AddAttrs(n.attrs[:n.n]...)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r)
}
