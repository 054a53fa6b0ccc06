package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// TestMain_TraceContinuesFromTheProducer publishes an event with the
// producer's W3C trace context on the embedded broker and runs the worker
// with an in-memory span exporter. The record's span joins the producer's
// trace as a child of the producer's span; each claim, send and record of
// its notifications is a child of the record's span; and no span carries
// the customer's name, phone number or email address.
func TestMain_TraceContinuesFromTheProducer(t *testing.T) {
	const (
		traceID = "0af7651916cd43dd8448eb211c80319c"
		spanID  = "b7ad6b7169203331"
	)
	topic, group := uniqueName("traced"), uniqueName("group")
	emb := MustStartEmbedded(t, topic)
	cfg := MustLoadConfig(t, map[string]string{
		"KAFKA_BROKERS":  emb.Brokers()[0],
		"KAFKA_TOPIC":    topic,
		"KAFKA_GROUP_ID": group,
		"HTTP_ADDR":      "off",
	})
	events, _ := sampleEvents(1)
	ev := events[0]
	ev.Channels = []string{"sms", "email"}
	MustPublish(t, emb.Brokers(), topic, kafka.Message{
		Key: []byte(ev.ShipmentID), Value: ev.json(),
		Headers: map[string]string{"traceparent": "00-" + traceID + "-" + spanID + "-01", "tracestate": "shipment-api=1"},
	})

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var out logtest.Buffer
	m := &Main{Config: cfg, Stdout: &out, Deps: Deps{TracerProvider: tp}}
	MustOpen(t, m)
	stop := MustRun(t, m)
	recordSpan := "process " + topic
	wait.For(t, waitWithin, "the record's span", func() (bool, string) {
		names := []string{}
		for _, s := range exp.GetSpans() {
			if s.Name == recordSpan {
				return true, ""
			}
			names = append(names, s.Name)
		}
		return false, fmt.Sprintf("spans so far: %v", names)
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	spans := exp.GetSpans()
	var root tracetest.SpanStub
	children := map[string]int{}
	for _, s := range spans {
		if s.Name == recordSpan {
			root = s
		}
	}
	if got := root.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("record span in trace %s, want the producer's %s", got, traceID)
	}
	if got := root.Parent.SpanID().String(); got != spanID {
		t.Errorf("record span's parent %s, want the producer's span %s", got, spanID)
	}
	for _, s := range spans {
		if s.Name == recordSpan {
			continue
		}
		if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("span %s is not a child of the record's span", s.Name)
			continue
		}
		children[s.Name]++
	}
	for name, want := range map[string]int{otel.SpanClaim: 2, otel.SpanSend: 2, otel.SpanRecord: 2} {
		if children[name] != want {
			t.Errorf("%d %s spans under the record's, want %d (sms and email); all: %v", children[name], name, want, children)
		}
	}

	r := ev.Recipient
	forbidden := []string{r.Name, r.Phone, strings.TrimPrefix(r.Phone, "+")[1:], r.Email, r.Email[:strings.IndexByte(r.Email, '@')]}
	for _, s := range spans {
		text := s.Name + " " + s.Status.Description + " " + fmt.Sprint(s.Attributes)
		for _, e := range s.Events {
			text += " " + e.Name + " " + fmt.Sprint(e.Attributes)
		}
		for _, f := range forbidden {
			if f != "" && strings.Contains(text, f) {
				t.Errorf("span %s carries customer data %q: %s", s.Name, f, text)
			}
		}
	}
}

// TestMain_ExportsOverOTLP configures the worker as an operator would,
// with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an OTLP/HTTP receiver on
// loopback, and finds the record's span, in the producer's trace, in what
// the receiver got by the time the worker closed.
func TestMain_ExportsOverOTLP(t *testing.T) {
	const traceID = "5b8efff798038103d269b633813fc60c"
	receiver := startOTLPReceiver(t)

	topic := uniqueName("otlp")
	emb := MustStartEmbedded(t, topic)
	cfg := MustLoadConfig(t, map[string]string{
		"KAFKA_BROKERS":               emb.Brokers()[0],
		"KAFKA_TOPIC":                 topic,
		"KAFKA_GROUP_ID":              uniqueName("group"),
		"HTTP_ADDR":                   "127.0.0.1:0",
		"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.URL,
	})
	events, n := sampleEvents(1)
	MustPublish(t, emb.Brokers(), topic, kafka.Message{
		Key: []byte(events[0].ShipmentID), Value: events[0].json(),
		Headers: map[string]string{"traceparent": "00-" + traceID + "-b7ad6b7169203331-01"},
	})
	var out logtest.Buffer
	m := &Main{Config: cfg, Stdout: &out}
	MustOpen(t, m)
	stop := MustRun(t, m)
	wait.For(t, waitWithin, "the event's notifications sent", func() (bool, string) {
		sent := sumOf(scrape(t, m), "notification_worker_notifications_total{", `outcome="sent"`)
		return sent == float64(n), fmt.Sprintf("sent %v of %d", sent, n)
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	m.Close() // flushes the batch of spans

	spans := map[string]string{} // span name -> trace id (hex)
	for _, s := range receiver.Spans() {
		spans[s.Name] = hex.EncodeToString(s.TraceId)
	}
	if got := spans["process "+topic]; got != traceID {
		t.Errorf("record span exported in trace %q, want %s; exported: %v (posts to %v)", got, traceID, spans, receiver.Posted())
	}
	for _, p := range receiver.Posted() {
		if p != "/v1/traces" {
			t.Errorf("exported to %s, want /v1/traces", p)
		}
	}
	if !strings.Contains(out.String(), `"tracing":"otlp `+receiver.URL+`/v1/traces"`) {
		t.Errorf("worker_starting does not name the OTLP endpoint")
	}
}

// TestMain_LogsJoinedToTraces runs two records through the worker, each
// with a producer's traceparent: one whose send fails once and is retried,
// one that does not decode and is dead-lettered. With tracing on (an
// OTLP/HTTP receiver on loopback), every line about a record carries
// trace_id, the producer's trace, and span_id, a span the worker exported
// for the record, child of the producer's span: the attempt the line was
// written in, or the attempt a retry or a dead letter followed. Lines about
// no record carry neither. With tracing off no line carries either.
func TestMain_LogsJoinedToTraces(t *testing.T) {
	const producerSpan = "b7ad6b7169203331"
	traces := map[int64]string{0: "6e0c63257de34c92bf9efcd03927272e", 1: "f9a2b6cd3f1e4c0a8d7e5b4a3c2d1e0f"}
	run := func(t *testing.T, env map[string]string) *logtest.Buffer {
		topic := uniqueName("joined")
		emb := MustStartEmbedded(t, topic)
		vars := map[string]string{
			"KAFKA_BROKERS":         emb.Brokers()[0],
			"KAFKA_TOPIC":           topic,
			"KAFKA_GROUP_ID":        uniqueName("group"),
			"HTTP_ADDR":             "off",
			"RETRY_INITIAL_BACKOFF": "10ms",
			"RETRY_MAX_BACKOFF":     "50ms",
		}
		for k, v := range env {
			vars[k] = v
		}
		events, _ := sampleEvents(1)
		ev := events[0]
		ev.Channels = []string{"sms"}
		header := func(offset int64) map[string]string {
			return map[string]string{"traceparent": "00-" + traces[offset] + "-" + producerSpan + "-01"}
		}
		// One key: one partition, offsets 0 and 1.
		MustPublish(t, emb.Brokers(), topic,
			kafka.Message{Key: []byte(ev.ShipmentID), Value: ev.json(), Headers: header(0)},
			kafka.Message{Key: []byte(ev.ShipmentID), Value: []byte(`{"event_id":`), Headers: header(1)},
		)
		var sends atomic.Int32
		sms := notifierFunc(func(context.Context, ports.Message) (ports.Receipt, error) {
			if sends.Add(1) == 1 {
				return ports.Receipt{}, errors.New("provider answered 503")
			}
			return ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, nil
		})
		out := &logtest.Buffer{}
		m := &Main{Config: MustLoadConfig(t, vars), Stdout: out, Deps: Deps{Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: sms}}}
		MustOpen(t, m)
		stop := MustRun(t, m)
		wait.For(t, waitWithin, "the retried record sent and the poison dead-lettered", func() (bool, string) {
			sent, dead := len(out.Events(t, "notification_sent")), len(out.Events(t, "event_dead_lettered"))
			return sent == 1 && dead == 1, fmt.Sprintf("%d notification_sent, %d event_dead_lettered", sent, dead)
		})
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		m.Close() // flushes the batch of spans
		for _, msg := range []string{"notification_failed", "record_retry_scheduled"} {
			if len(out.Events(t, msg)) != 1 {
				t.Errorf("%d %s lines, want 1 (the first send failed); logs:\n%s", len(out.Events(t, msg)), msg, out.String())
			}
		}
		return out
	}

	t.Run("On", func(t *testing.T) {
		receiver := startOTLPReceiver(t)
		out := run(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.URL})
		// The attempts exported for each record (by trace), failed or not.
		type attempt struct {
			span   string
			failed bool
		}
		attempts := map[string][]attempt{}
		for _, s := range receiver.Spans() {
			if !strings.HasPrefix(s.Name, "process ") {
				continue
			}
			trace := hex.EncodeToString(s.TraceId)
			if parent := hex.EncodeToString(s.ParentSpanId); parent != producerSpan {
				t.Errorf("record span %x in trace %s: parent %s, want the producer's %s", s.SpanId, trace, parent, producerSpan)
			}
			attempts[trace] = append(attempts[trace], attempt{hex.EncodeToString(s.SpanId), s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR})
		}
		spanOf := func(offset int64, failed bool) string {
			for _, a := range attempts[traces[offset]] {
				if a.failed == failed {
					return a.span
				}
			}
			return fmt.Sprintf("(no attempt exported with failed=%v in trace %s)", failed, traces[offset])
		}
		// What each line is written in or follows: the first attempt at
		// record 0 failed, the second sent; record 1's only attempt failed.
		failedAttempt := map[string]bool{"notification_failed": true, "record_retry_scheduled": true, "event_dead_lettered": true}
		about := 0
		for _, l := range out.Events(t, "") {
			msg := l["msg"].(string)
			off, ok := l["offset"].(float64)
			if !ok {
				if l["trace_id"] != nil || l["span_id"] != nil {
					t.Errorf("%s, about no record, carries trace_id %v, span_id %v", msg, l["trace_id"], l["span_id"])
				}
				continue
			}
			about++
			offset := int64(off)
			if got, want := l["trace_id"], traces[offset]; got != want {
				t.Errorf("%s of record %d: trace_id %v, want the producer's %s", msg, offset, got, want)
			}
			if got, want := l["span_id"], spanOf(offset, failedAttempt[msg]); got != want {
				t.Errorf("%s of record %d: span_id %v, want %s (exported: %v)", msg, offset, got, want, attempts)
			}
		}
		if about < 4 {
			t.Errorf("%d lines about the records, want at least notification_failed, record_retry_scheduled, notification_sent and event_dead_lettered", about)
		}
	})
	t.Run("Off", func(t *testing.T) {
		out := run(t, nil)
		for _, l := range out.Events(t, "") {
			if _, ok := l["trace_id"]; ok {
				t.Errorf("%s carries trace_id with tracing off", l["msg"])
			}
			if _, ok := l["span_id"]; ok {
				t.Errorf("%s carries span_id with tracing off", l["msg"])
			}
		}
	})
}

// otlpReceiver is an OTLP/HTTP traces receiver on loopback that keeps
// every span posted to it, and the paths posted to.
type otlpReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	spans  []*tracepb.Span
	posted []string
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.posted = append(r.posted, req.URL.Path)
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	t.Cleanup(r.Close)
	return r
}

// Spans returns the spans received so far.
func (r *otlpReceiver) Spans() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

// Posted returns the paths exports were posted to so far.
func (r *otlpReceiver) Posted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.posted)
}
