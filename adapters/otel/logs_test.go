package otel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// Records run through the worker's record policy with tracing on, each
// carrying a producer's traceparent of its own. Every line about a record
// ends with its trace and a span of it: inside an attempt, the attempt's;
// a retry, a panic or a dead letter after one, the span of the attempt
// before it; a record dead-lettered before any attempt, the producer's. A
// line about no record carries neither.
func TestLogger_JoinsARecordsLinesToItsSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := otel.New(tp)
	var out logtest.Buffer
	log := tr.Logger(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})))

	const (
		retried    = 1 // fails once, retryable, then is handled
		refused    = 2 // fails for good: dead-lettered, whose first write fails
		panicking  = 3 // panics: dead-lettered
		oversized  = 4 // over MaxRecordBytes: dead-lettered before any attempt
		producerOf = "00f067aa0ba9%04x"
	)
	traceOf := func(offset int64) string { return fmt.Sprintf("4bf92f3577b34da6a3ce929d0e0e%04x", offset) }

	var mu sync.Mutex
	attempts := map[int64]int{}
	h := ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		mu.Lock()
		attempts[rec.Offset]++
		n := attempts[rec.Offset]
		mu.Unlock()
		log.InfoContext(ctx, "attempt_line", "offset", rec.Offset, "attempt", n)
		switch {
		case rec.Offset == retried && n == 1:
			return errors.New("provider answered 503")
		case rec.Offset == refused:
			return ports.MarkPermanent(errors.New("provider refused"))
		case rec.Offset == panicking:
			panic("bug")
		}
		return nil
	})
	sinkWrites := 0
	sink := sinkFunc(func(ctx context.Context, rec ports.Record, _ ports.Kind, _ string) error {
		log.WarnContext(ctx, "sink_line", "offset", rec.Offset)
		mu.Lock()
		defer mu.Unlock()
		if sinkWrites++; rec.Offset == refused && sinkWrites == 1 {
			return errors.New("dead letter topic unavailable")
		}
		return nil
	})
	pcfg := policy.Config{MaxRecordBytes: 64, RetryMaxAttempts: 3, RetryInitialBackoff: time.Millisecond, RetryMaxBackoff: time.Millisecond, Logger: log}
	chain := policy.Chain(tr.Handler(h), tr.Delivery,
		policy.DeadLetter(sink, pcfg), policy.MaxBytes(pcfg), policy.Recover(pcfg), policy.Retry(pcfg))

	for _, off := range []int64{retried, refused, panicking, oversized} {
		value := []byte("{}")
		if off == oversized {
			value = []byte(strings.Repeat("x", 65))
		}
		rec := ports.Record{Topic: "shipment-events", Partition: 3, Offset: off, Value: value, Headers: []ports.Header{
			{Key: "traceparent", Value: []byte("00-" + traceOf(off) + "-" + fmt.Sprintf(producerOf, off) + "-01")},
		}}
		if err := chain.Handle(context.Background(), rec); err != nil {
			t.Fatalf("record %d: %v", off, err)
		}
	}
	log.Info("not_about_a_record")

	// The attempts' spans of each record's trace, in the order they began.
	spans := map[string][]string{}
	byStart := exp.GetSpans()
	slices.SortFunc(byStart, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	for _, s := range byStart {
		if s.Name == "process shipment-events" {
			spans[s.SpanContext.TraceID().String()] = append(spans[s.SpanContext.TraceID().String()], s.SpanContext.SpanID().String())
		}
	}
	wantSpan := func(l map[string]any) string {
		off := int64(l["offset"].(float64))
		attemptSpans := spans[traceOf(off)]
		switch {
		case off == oversized:
			return fmt.Sprintf(producerOf, off)
		case l["msg"] == "attempt_line":
			return attemptSpans[int(l["attempt"].(float64))-1]
		case l["msg"] == "record_retry_scheduled":
			return attemptSpans[int(l["attempt"].(float64))-1]
		case len(attemptSpans) > 0:
			return attemptSpans[len(attemptSpans)-1]
		}
		return "(no attempt)"
	}
	seen := map[string]bool{}
	for _, l := range out.Events(t, "") {
		msg := l["msg"].(string)
		if msg == "not_about_a_record" {
			if l["trace_id"] != nil || l["span_id"] != nil {
				t.Errorf("%s carries trace_id %v, span_id %v; want neither", msg, l["trace_id"], l["span_id"])
			}
			continue
		}
		off := int64(l["offset"].(float64))
		seen[fmt.Sprint(msg, "/", off)] = true
		if got, want := l["trace_id"], traceOf(off); got != want {
			t.Errorf("%s of record %d: trace_id %v, want the producer's trace %s", msg, off, got, want)
		}
		if got, want := l["span_id"], wantSpan(l); got != want {
			t.Errorf("%s of record %d (attempt %v): span_id %v, want %s; the record's attempts: %v", msg, off, l["attempt"], got, want, spans[traceOf(off)])
		}
	}
	for _, line := range []string{
		"attempt_line/1", "record_retry_scheduled/1",
		"attempt_line/2", "dead_letter_failed/2", "sink_line/2", "event_dead_lettered/2",
		"attempt_line/3", "handler_panicked/3", "event_dead_lettered/3",
		"sink_line/4", "event_dead_lettered/4",
	} {
		if !seen[line] {
			t.Errorf("no %s line; logs:\n%s", line, out.String())
		}
	}
	if n := len(spans[traceOf(retried)]); n != 2 {
		t.Errorf("%d attempt spans of the retried record, want 2", n)
	}
}

type sinkFunc func(ctx context.Context, rec ports.Record, kind ports.Kind, reason string) error

func (f sinkFunc) DeadLetter(ctx context.Context, rec ports.Record, kind ports.Kind, reason string) error {
	return f(ctx, rec, kind, reason)
}

// BenchmarkLogger is the notification_sent line as the domain writes it,
// to a JSON handler writing nowhere: plain (tracing off: Logger returns
// the logger itself) and joined to the span in its context (tracing on).
func BenchmarkLogger(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("bench").Start(context.Background(), "process shipment-events")
	defer span.End()
	plain := slog.New(slog.NewJSONHandler(io.Discard, nil))
	for _, c := range []struct {
		name string
		log  *slog.Logger
	}{
		{"plain", plain},
		{"joined", otel.New(tp).Logger(plain)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.log.LogAttrs(ctx, slog.LevelInfo, "notification_sent",
					slog.String("topic", "shipment-events"), slog.Int("partition", 3), slog.Int64("offset", 42),
					slog.String("event_id", "9f1c2d3e-7d3c-4b1e-9f2a-0c5d8e6b4a21"), slog.String("shipment_id", "SHP-100234"),
					slog.String("channel", "sms"), slog.String("to", "+31*******67"), slog.String("provider_id", "SM123"),
					slog.Bool("idempotency_checked", true))
			}
		})
	}
}
