package logtest

import (
	"context"
	"log/slog"
)

type markKey struct{}

// WithMark returns ctx marked with mark, for MarkHandler to find.
func WithMark(ctx context.Context, mark string) context.Context {
	return context.WithValue(ctx, markKey{}, mark)
}

// MarkHandler returns h adding to each line written with a marked context
// (WithMark) the mark, as the field "mark": a test sees which context a
// line was written with.
func MarkHandler(h slog.Handler) slog.Handler { return markHandler{h} }

type markHandler struct{ slog.Handler }

func (h markHandler) Handle(ctx context.Context, r slog.Record) error {
	if m, ok := ctx.Value(markKey{}).(string); ok {
		r = r.Clone()
		r.AddAttrs(slog.String("mark", m))
	}
	return h.Handler.Handle(ctx, r)
}

func (h markHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return markHandler{h.Handler.WithAttrs(attrs)}
}

func (h markHandler) WithGroup(name string) slog.Handler {
	return markHandler{h.Handler.WithGroup(name)}
}
