package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/internal/logtest"
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
	waitFor(t, "the record's span", func() (bool, string) {
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
	var (
		mu     sync.Mutex
		spans  = map[string]string{} // span name -> trace id (hex)
		posted []string
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		posted = append(posted, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name] = hex.EncodeToString(s.TraceId)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer receiver.Close()

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
	waitFor(t, "the event's notifications sent", func() (bool, string) {
		sent := sumOf(scrape(t, m), "notification_worker_notifications_total{", `outcome="sent"`)
		return sent == float64(n), fmt.Sprintf("sent %v of %d", sent, n)
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	m.Close() // flushes the batch of spans

	mu.Lock()
	defer mu.Unlock()
	if got := spans["process "+topic]; got != traceID {
		t.Errorf("record span exported in trace %q, want %s; exported: %v (posts to %v)", got, traceID, spans, posted)
	}
	for _, p := range posted {
		if p != "/v1/traces" {
			t.Errorf("exported to %s, want /v1/traces", p)
		}
	}
	if !strings.Contains(out.String(), `"tracing":"otlp `+receiver.URL+`/v1/traces"`) {
		t.Errorf("worker_starting does not name the OTLP endpoint")
	}
}
