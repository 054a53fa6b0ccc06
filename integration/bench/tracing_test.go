package bench

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/otel"
)

// tracingRounds: CPU-bound runs, like the stores'; three interleaved
// rounds, best kept.
const tracingRounds = 3

// BenchmarkTracing compares the pipeline with tracing off (what the worker
// runs without an OTLP endpoint: nothing decorated) with the decorators
// over a no-op provider, and with tracing on: the SDK sampling every
// record, batching its spans (a record span and claim, send and record
// children) to an exporter that discards them, so the cost measured is
// the worker's, not a collector's. Zero-latency notifier, memory store,
// MaxInFlight 64.
func BenchmarkTracing(b *testing.B) {
	const events, keys = 20000, 5000
	br := mustBroker(b, events, keys)
	with := func(tracer func(b *testing.B) *otel.Tracer) func(b *testing.B) measurement {
		return func(b *testing.B) measurement {
			return run{maxInFlight: 64, store: memory.New(nil), tracer: tracer(b), want: events, within: time.Minute}.measure(b, br)
		}
	}
	for range b.N {
		bestOf(b, tracingRounds, []variant{
			{runTracingOff, with(func(*testing.B) *otel.Tracer { return nil })},
			{runTracingNoop, with(func(*testing.B) *otel.Tracer { return otel.New(noop.NewTracerProvider()) })},
			{runTracingOn, with(func(b *testing.B) *otel.Tracer {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				return otel.New(tp)
			})},
		})
	}
}
