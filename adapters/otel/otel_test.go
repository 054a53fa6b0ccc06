package otel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// The producer's span, as its traceparent header carries it.
const (
	producerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpanID  = "00f067aa0ba902b7"
	traceparent     = "00-" + producerTraceID + "-" + producerSpanID + "-01"
)

// The customer in every event here; none of it may reach a span.
const (
	customerName  = "Ada Lovelace"
	customerPhone = "+31200187654"
	customerEmail = "ada.lovelace@example.com"
)

func eventJSON(eventID string) []byte {
	return []byte(`{"event_id":"` + eventID + `","type":"shipment.out_for_delivery","shipment_id":"SHP-1",` +
		`"recipient":{"name":"` + customerName + `","phone":"` + customerPhone + `","email":"` + customerEmail + `"},` +
		`"channels":["sms","email"],"data":{"eta":"14:00"}}`)
}

// provider is a notifier double: it accepts every message, or fails each
// with err when set.
type provider struct {
	id  string
	err error
}

func (p provider) Send(context.Context, ports.Message) (ports.Receipt, error) {
	if p.err != nil {
		return ports.Receipt{}, p.err
	}
	return ports.Receipt{ProviderID: p.id, SentAt: time.Now()}, nil
}

// mustTracedService returns the domain service with its store, notifiers
// and itself traced as the worker wires them, and the exporter that
// receives every span as it ends.
func mustTracedService(t *testing.T, sms, email ports.Notifier) (ports.Handler, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := otel.New(tp)
	svc, err := domain.NewService(domain.Config{
		Store: tr.Store(memory.New(nil)),
		Notifiers: map[ports.Channel]ports.Notifier{
			ports.ChannelSMS:   tr.Notifier(ports.ChannelSMS, "twilio", sms),
			ports.ChannelEmail: tr.Notifier(ports.ChannelEmail, "smtp", email),
		},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	return tr.Handler(svc), exp
}

func record(value []byte, headers ...ports.Header) ports.Record {
	return ports.Record{Topic: "shipment-events", Partition: 3, Offset: 42, Key: []byte("SHP-1"), Value: value, Headers: headers}
}

// A record carrying the producer's traceparent is handled in a span of
// the producer's trace, child of the producer's span, and each claim, send
// and record of its two notifications is a child of that span.
func TestHandler_ContinuesTheProducersTrace(t *testing.T) {
	h, exp := mustTracedService(t, provider{id: "SM123"}, provider{id: "<abc@harborlight.example>"})
	rec := record(eventJSON("ev-1"), ports.Header{Key: "traceparent", Value: []byte(traceparent)})
	if err := h.Handle(context.Background(), rec); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	spans := exp.GetSpans()
	root := mustOne(t, spans, "process shipment-events")
	if got := root.SpanContext.TraceID().String(); got != producerTraceID {
		t.Errorf("record span trace id %s, want the producer's %s", got, producerTraceID)
	}
	if got := root.Parent.SpanID().String(); got != producerSpanID || !root.Parent.IsRemote() {
		t.Errorf("record span parent %s (remote %v), want the producer's span %s", got, root.Parent.IsRemote(), producerSpanID)
	}
	if root.SpanKind != trace.SpanKindConsumer {
		t.Errorf("record span kind %v, want consumer", root.SpanKind)
	}
	wantAttr(t, root, "messaging.destination.name", "shipment-events")
	wantAttr(t, root, "messaging.destination.partition.id", "3")
	wantAttr(t, root, "messaging.kafka.offset", "42")

	counts := map[string]int{}
	for _, s := range spans {
		if s.Name == root.Name {
			continue
		}
		counts[s.Name]++
		if s.SpanContext.TraceID() != root.SpanContext.TraceID() || s.Parent.SpanID() != root.SpanContext.SpanID() {
			t.Errorf("span %s: trace %s parent %s, want trace %s parent %s (the record span)", s.Name,
				s.SpanContext.TraceID(), s.Parent.SpanID(), root.SpanContext.TraceID(), root.SpanContext.SpanID())
		}
	}
	for name, want := range map[string]int{otel.SpanClaim: 2, otel.SpanSend: 2, otel.SpanRecord: 2} {
		if counts[name] != want {
			t.Errorf("%d %s spans, want %d (one per channel); all: %v", counts[name], name, want, counts)
		}
	}
	for _, s := range spans {
		switch {
		case s.Name == otel.SpanSend && attr(s, otel.AttrChannel) == "sms":
			wantAttr(t, s, otel.AttrProvider, "twilio")
			wantAttr(t, s, otel.AttrRecipient, ports.MaskPhone(customerPhone))
			wantAttr(t, s, otel.AttrProviderID, "SM123")
		case s.Name == otel.SpanSend:
			wantAttr(t, s, otel.AttrProvider, "smtp")
			wantAttr(t, s, otel.AttrRecipient, ports.MaskEmail(customerEmail))
		case s.Name == otel.SpanClaim:
			wantAttr(t, s, otel.AttrClaimState, ports.Claimed.String())
		}
	}
	assertNoCustomerData(t, spans)

	// The replay: each claim finds the record; nothing is sent.
	exp.Reset()
	if err := h.Handle(context.Background(), rec); err != nil {
		t.Fatalf("Handle (replay): %v", err)
	}
	for _, s := range exp.GetSpans() {
		if s.Name == otel.SpanSend || s.Name == otel.SpanRecord {
			t.Errorf("replay made a %s span: the duplicate was not suppressed", s.Name)
		}
		if s.Name == otel.SpanClaim {
			wantAttr(t, s, otel.AttrClaimState, ports.AlreadySent.String())
		}
	}
}

// A record without a trace context (or with a malformed one) starts a new
// trace: its span is a root.
func TestHandler_NoTraceContextStartsATrace(t *testing.T) {
	for name, headers := range map[string][]ports.Header{
		"None":      nil,
		"Malformed": {{Key: "traceparent", Value: []byte("00-not-a-trace-01")}},
	} {
		t.Run(name, func(t *testing.T) {
			h, exp := mustTracedService(t, provider{id: "SM1"}, provider{id: "<1@x>"})
			if err := h.Handle(context.Background(), record(eventJSON("ev-"+name), headers...)); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			root := mustOne(t, exp.GetSpans(), "process shipment-events")
			if root.Parent.IsValid() || !root.SpanContext.TraceID().IsValid() {
				t.Errorf("record span parent %v, trace %v: want a root span of a new trace", root.Parent, root.SpanContext.TraceID())
			}
		})
	}
}

// A send the provider refuses for good marks its span, and the record's,
// failed with the error's kind; the claim is released in a span of its own.
// The error's message is recorded, and carries no customer data.
func TestHandler_FailedSendRecordsTheKind(t *testing.T) {
	refused := ports.MarkPermanent(errors.New("status 400: code 21211: invalid To number " + ports.MaskPhone(customerPhone)))
	h, exp := mustTracedService(t, provider{err: refused}, provider{id: "<2@x>"})
	err := h.Handle(context.Background(), record(eventJSON("ev-fail"), ports.Header{Key: "traceparent", Value: []byte(traceparent)}))
	if ports.KindOf(err) != ports.Permanent {
		t.Fatalf("Handle = %v, want a permanent error", err)
	}
	spans := exp.GetSpans()
	for _, name := range []string{"process shipment-events", otel.SpanRelease} {
		s := mustOne(t, spans, name)
		if name == otel.SpanRelease {
			continue
		}
		if s.Status.Code != codes.Error {
			t.Errorf("%s status %v, want Error", name, s.Status)
		}
		wantAttr(t, s, "error.type", "permanent")
	}
	failed := 0
	for _, s := range spans {
		if s.Name == otel.SpanSend && s.Status.Code == codes.Error {
			failed++
			wantAttr(t, s, "error.type", "permanent")
			if len(s.Events) == 0 || s.Events[0].Name != "exception" {
				t.Errorf("failed send span has events %v, want the error recorded", s.Events)
			}
		}
	}
	if failed != 1 {
		t.Errorf("%d failed send spans, want 1 (sms)", failed)
	}
	assertNoCustomerData(t, spans)
}

// A panic in the handler ends its span as an error and goes on.
func TestHandler_PanicEndsTheSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h := otel.New(tp).Handler(ports.HandlerFunc(func(context.Context, ports.Record) error { panic("bug") }))
	func() {
		defer func() {
			if r := recover(); r != "bug" {
				t.Errorf("recovered %v, want the handler's panic", r)
			}
		}()
		_ = h.Handle(context.Background(), record(nil))
	}()
	s := mustOne(t, exp.GetSpans(), "process shipment-events")
	if s.Status.Code != codes.Error || s.EndTime.IsZero() {
		t.Errorf("span after a panic: status %v, ended %v; want an ended error span", s.Status, !s.EndTime.IsZero())
	}
}

// With tracing off (no provider) nothing is decorated, the logger neither.
func TestNew_NilProviderDecoratesNothing(t *testing.T) {
	tr := otel.New(nil)
	store := memory.New(nil)
	if got := tr.Store(store); got != ports.IdempotencyStore(store) {
		t.Errorf("Store decorated with tracing off")
	}
	n := &provider{id: "x"}
	if got := tr.Notifier(ports.ChannelSMS, "twilio", n); got != ports.Notifier(n) {
		t.Errorf("Notifier decorated with tracing off")
	}
	h := &nopHandler{}
	if got := tr.Delivery(h); got != ports.Handler(h) {
		t.Errorf("Delivery decorated with tracing off")
	}
	if got := tr.Handler(h); got != ports.Handler(h) {
		t.Errorf("Handler decorated with tracing off")
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if got := tr.Logger(log); got != log {
		t.Errorf("Logger decorated with tracing off")
	}
}

type nopHandler struct{}

func (*nopHandler) Handle(context.Context, ports.Record) error { return nil }

func mustOne(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		names := make([]string, len(spans))
		for i, s := range spans {
			names[i] = s.Name
		}
		t.Fatalf("%d spans named %q, want 1; spans: %v", len(found), name, names)
	}
	return found[0]
}

func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func wantAttr[K ~string](t *testing.T, s tracetest.SpanStub, key K, want string) {
	t.Helper()
	if got := attr(s, attribute.Key(key)); got != want {
		t.Errorf("span %s: %s = %q, want %q", s.Name, key, got, want)
	}
}

// assertNoCustomerData fails t if the customer's name, phone number or
// email address (or the parts masking drops) is in any span's name,
// attributes, events or status.
func assertNoCustomerData(t *testing.T, spans tracetest.SpanStubs) {
	t.Helper()
	forbidden := []string{customerName, "Ada", "Lovelace", customerPhone[2:], "ada.lovelace"}
	for _, s := range spans {
		var b strings.Builder
		b.WriteString(s.Name + " " + s.Status.Description)
		for _, kv := range s.Attributes {
			b.WriteString(" " + string(kv.Key) + "=" + kv.Value.Emit())
		}
		for _, e := range s.Events {
			b.WriteString(" " + e.Name)
			for _, kv := range e.Attributes {
				b.WriteString(" " + string(kv.Key) + "=" + kv.Value.Emit())
			}
		}
		for _, f := range forbidden {
			if strings.Contains(b.String(), f) {
				t.Errorf("span %s carries customer data %q: %s", s.Name, f, b.String())
			}
		}
	}
}
