// Package otel traces the worker with OpenTelemetry: a span per record,
// continuing the producer's trace from the record's W3C trace context
// headers, with child spans for each idempotency store call and each send.
// Like the metrics, it decorates the ports (ports.Handler,
// ports.IdempotencyStore, ports.Notifier), so no tracing call lives in the
// domain: the domain hands its context down, and the child spans find their
// parent there. The same context joins the lines logged about a record to
// its trace (Logger).
//
// No span attribute, event or status carries a recipient's phone number,
// email address or name: a send span holds the recipient masked
// (ports.Message.ToMasked). Errors are recorded with their ports.Kind as
// error.type, and their message as the logs carry it.
package otel

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/harborlight/notification-worker/ports"
)

// ScopeName is the instrumentation scope of every span the Tracer starts.
const ScopeName = "github.com/harborlight/notification-worker/adapters/otel"

// Span names.
const (
	SpanClaim   = "claim"
	SpanSend    = "send"
	SpanRecord  = "record"
	SpanRelease = "release"
)

// Attribute keys of this service's own (those of the OpenTelemetry semantic
// conventions come from semconv).
const (
	AttrChannel    = attribute.Key("notification.channel")
	AttrProvider   = attribute.Key("notification.provider")
	AttrEventID    = attribute.Key("notification.event_id")
	AttrRecipient  = attribute.Key("notification.recipient") // masked
	AttrProviderID = attribute.Key("notification.provider_id")
	AttrKey        = attribute.Key("idempotency.key")
	AttrClaimState = attribute.Key("idempotency.claim.state")
)

// Tracer starts the worker's spans on a trace.TracerProvider and reads the
// W3C trace context (traceparent, tracestate) from records. Its decorators
// are safe for concurrent use when what they decorate is.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer on tp. A nil tp returns nil, and every decorator of
// a nil *Tracer returns what it was given, undecorated: tracing that is
// off costs nothing.
func New(tp trace.TracerProvider) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), prop: propagation.TraceContext{}}
}

// Handler returns h traced: each call is a span of kind consumer, named
// "process <topic>", child of the trace context in the record's headers
// (or a new trace's root when it has none or an invalid one). Each attempt
// at a record is a span of its own. The span ends when h returns, or
// panics (the panic goes on).
func (t *Tracer) Handler(h ports.Handler) ports.Handler {
	if t == nil {
		return h
	}
	return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) (err error) {
		ctx = t.prop.Extract(ctx, headerCarrier(rec.Headers))
		ctx, span := t.tracer.Start(ctx, "process "+rec.Topic,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(
				semconv.MessagingSystemKafka,
				semconv.MessagingOperationTypeProcess,
				semconv.MessagingDestinationName(rec.Topic),
				semconv.MessagingDestinationPartitionID(strconv.Itoa(int(rec.Partition))),
				semconv.MessagingKafkaOffset(int(rec.Offset)),
			))
		if d, ok := ctx.Value(deliveryKey{}).(*delivery); ok {
			d.attempt(span.SpanContext())
		}
		defer func() {
			if r := recover(); r != nil {
				span.SetStatus(codes.Error, "panic")
				span.End()
				panic(r)
			}
			end(span, err)
		}()
		return h.Handle(ctx, rec)
	})
}

// Delivery is the middleware that goes first in the record policy, around
// everything done with one record taken from the source: its attempts
// (each a span of Handler's, which must sit inside it) and what the policy
// does between and after them (a retry's backoff, a dead letter). It reads
// the record's trace context once, so that a line logged with the
// delivery's context outside any attempt carries a span (see Logger): the
// latest attempt's, or before the first the producer's.
func (t *Tracer) Delivery(next ports.Handler) ports.Handler {
	if t == nil {
		return next
	}
	return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		ctx = t.prop.Extract(ctx, headerCarrier(rec.Headers))
		return next.Handle(context.WithValue(ctx, deliveryKey{}, new(delivery)), rec)
	})
}

type deliveryKey struct{}

// delivery is what Delivery knows of its record's attempts: the span of
// the latest to start. Attempts follow one another, but a line about the
// record may be written from any goroutine.
type delivery struct {
	last atomic.Pointer[trace.SpanContext]
}

func (d *delivery) attempt(sc trace.SpanContext) { d.last.Store(&sc) }

// Store returns s traced: a span per call (claim, record, release), with
// the key and, for a claim, what it found.
func (t *Tracer) Store(s ports.IdempotencyStore) ports.IdempotencyStore {
	if t == nil {
		return s
	}
	return &tracedStore{next: s, t: t}
}

type tracedStore struct {
	next ports.IdempotencyStore
	t    *Tracer
}

var _ ports.IdempotencyStore = (*tracedStore)(nil)

func (s *tracedStore) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	ctx, span := s.t.tracer.Start(ctx, SpanClaim, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(AttrKey.String(key)))
	c, err := s.next.Claim(ctx, key, token, digest, sender, ttl)
	if err == nil {
		span.SetAttributes(AttrClaimState.String(c.State.String()))
	}
	end(span, err)
	return c, err
}

func (s *tracedStore) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	ctx, span := s.t.tracer.Start(ctx, SpanRecord, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(AttrKey.String(key)))
	err := s.next.Record(ctx, key, r, ttl)
	end(span, err)
	return err
}

func (s *tracedStore) Release(ctx context.Context, key, token string) error {
	ctx, span := s.t.tracer.Start(ctx, SpanRelease, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(AttrKey.String(key)))
	err := s.next.Release(ctx, key, token)
	end(span, err)
	return err
}

// Notifier returns n, the notifier of channel ch, traced: a span per Send,
// with the channel, the provider's name (as the worker's start-up line
// names it: twilio, smtp, console), the event, the recipient masked and,
// on success, the provider's message id.
func (t *Tracer) Notifier(ch ports.Channel, provider string, n ports.Notifier) ports.Notifier {
	if t == nil {
		return n
	}
	return &tracedNotifier{next: n, t: t, channel: AttrChannel.String(string(ch)), provider: AttrProvider.String(provider)}
}

type tracedNotifier struct {
	next              ports.Notifier
	t                 *Tracer
	channel, provider attribute.KeyValue
}

var _ ports.Notifier = (*tracedNotifier)(nil)

func (n *tracedNotifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	ctx, span := n.t.tracer.Start(ctx, SpanSend, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		n.channel, n.provider,
		AttrEventID.String(m.EventID),
		AttrKey.String(m.IdempotencyKey),
		AttrRecipient.String(m.ToMasked),
	))
	r, err := n.next.Send(ctx, m)
	if err == nil {
		span.SetAttributes(AttrProviderID.String(r.ProviderID))
	}
	end(span, err)
	return r, err
}

// end ends span, first marking it failed when err is not nil: status Error,
// error.type the error's ports.Kind, and the error as an event.
func end(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(ports.KindOf(err).String()))
		span.RecordError(err)
		span.SetStatus(codes.Error, ports.KindOf(err).String())
	}
	span.End()
}

// headerCarrier reads the W3C trace context from a record's headers. It is
// read-only: Set is a no-op, since the worker never writes to a record it
// consumed.
type headerCarrier []ports.Header

var _ propagation.TextMapCarrier = headerCarrier(nil)

// Get returns the value of the first header named key (keys compare as
// the propagator writes them: lower case), or "".
func (c headerCarrier) Get(key string) string {
	for _, h := range c {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (headerCarrier) Set(string, string) {}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c))
	for i, h := range c {
		keys[i] = h.Key
	}
	return keys
}
