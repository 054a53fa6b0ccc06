package otel

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Logger returns l with its lines joined to traces: a line written with a
// context that holds a span (slog's methods that take one) ends with
// trace_id and span_id, the W3C ids of that span, in hex. Inside Handler
// the span is the attempt's; elsewhere inside Delivery the latest
// attempt's, or before the first the producer's (read from the record's
// traceparent header). A line whose context holds no span is written as l
// writes it. The ids are added to the record, so they go inside a group
// opened with WithGroup. With tracing off (a nil *Tracer) Logger returns l
// itself: nothing is added and nothing costs.
func (t *Tracer) Logger(l *slog.Logger) *slog.Logger {
	if t == nil {
		return l
	}
	return slog.New(spanLogHandler{next: l.Handler()})
}

// spanLogHandler is the slog.Handler of Logger's logger.
type spanLogHandler struct{ next slog.Handler }

func (h spanLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h spanLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := lineSpan(ctx); sc.IsValid() {
		r = r.Clone() // r may be shared: add to a copy
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.next.Handle(ctx, r)
}

func (h spanLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return spanLogHandler{next: h.next.WithAttrs(attrs)}
}

func (h spanLogHandler) WithGroup(name string) slog.Handler {
	return spanLogHandler{next: h.next.WithGroup(name)}
}

// lineSpan returns the span a line written with ctx belongs to: ctx's own
// when this process started it (an attempt, or a span under one), else
// the latest attempt of the Delivery ctx is in, else ctx's remote span
// (the producer's), if any.
func lineSpan(ctx context.Context) trace.SpanContext {
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() && !sc.IsRemote() {
		return sc
	}
	if d, ok := ctx.Value(deliveryKey{}).(*delivery); ok {
		if last := d.last.Load(); last != nil {
			return *last
		}
	}
	return sc
}
