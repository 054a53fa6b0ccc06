package kafka_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/prometheus/promtest"
	"github.com/harborlight/notification-worker/ports"
)

// The W3C trace context a producer puts on a record.
const (
	testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTracestate  = "vendor=opaque"
)

// mustPublishWithHeaders writes one record per entry of values, each with
// headers in the given order (the Publisher takes a map, which has none).
func mustPublishWithHeaders(tb testing.TB, brokers []string, topic string, headers []sarama.RecordHeader, values ...string) {
	tb.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_4_0_0
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		tb.Fatalf("NewSyncProducer: %v", err)
	}
	defer p.Close()
	for _, v := range values {
		msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("SHP-1"), Value: sarama.StringEncoder(v), Headers: headers}
		if _, _, err := p.SendMessage(msg); err != nil {
			tb.Fatalf("SendMessage: %v", err)
		}
	}
}

// The handler sees a record's headers as the producer wrote them: in
// order, repeated keys kept. A record dead-lettered keeps them too, so the
// trace context reaches whoever reads the dead letter topic.
func TestConsumer_RecordHeadersReachHandlerAndDeadLetter(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "headers")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	sent := []sarama.RecordHeader{
		{Key: []byte("tenant"), Value: []byte("a")},
		{Key: []byte("traceparent"), Value: []byte(testTraceparent)},
		{Key: []byte("tracestate"), Value: []byte(testTracestate)},
		{Key: []byte("tenant"), Value: []byte("b")},
	}
	mustPublishWithHeaders(t, brokers, topic, sent, "ok", "poison")
	MustPublish(t, brokers, topic, kafka.Message{Key: []byte("SHP-1"), Value: []byte("bare")})

	var mu sync.Mutex
	seen := map[string][]ports.Header{}
	cfg, _ := testConfig(brokers, topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		mu.Lock()
		seen[string(rec.Value)] = rec.Headers
		mu.Unlock()
		if string(rec.Value) == "poison" {
			return ports.MarkPermanent(errors.New("unknown event type"))
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 3})
	rc.MustStop(t, 10*time.Second)

	want := make([]ports.Header, len(sent))
	for i, h := range sent {
		want[i] = ports.Header{Key: string(h.Key), Value: h.Value}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range []string{"ok", "poison"} {
		if !slices.EqualFunc(seen[v], want, func(a, b ports.Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
			t.Errorf("record %q: handler saw headers %q, want %q", v, seen[v], want)
		}
	}
	if h, ok := seen["bare"]; !ok || h != nil {
		t.Errorf("record without headers: handler saw %q (called %v), want nil", h, ok)
	}

	dlq := readTopic(t, brokers, cfg.DLQTopic)
	if len(dlq) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dlq))
	}
	for k, v := range map[string]string{"traceparent": testTraceparent, "tracestate": testTracestate} {
		if got, ok := header(dlq[0], k); !ok || got != v {
			t.Errorf("dead letter header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
}

// Each retry the consumer schedules is counted by the kind of failure that
// caused it, on the metrics the worker exports.
func TestConsumer_RetriesCountedByKind(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "retries")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	MustPublish(t, brokers, topic, kafka.Message{Key: []byte("SHP-1"), Value: []byte("flaky")})

	metrics := prometheus.New()
	metrics.KnowTopic(topic)
	cfg, _ := testConfig(brokers, topic)
	cfg.Metrics = metrics
	var mu sync.Mutex
	calls := 0
	rc := MustRun(t, cfg, ports.HandlerFunc(func(context.Context, ports.Record) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 1:
			return errors.New("provider 503")
		case 2, 3:
			return ports.MarkUnavailable(errors.New("store down, closed mode"))
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 1})
	rc.MustStop(t, 10*time.Second)

	srv := httptest.NewServer(metrics.Handler())
	defer srv.Close()
	s := promtest.MustScrape(t, srv.URL)
	s.Want(t, `notification_worker_retries_total{kind="retryable",topic="`+topic+`"}`, 1)
	s.Want(t, `notification_worker_retries_total{kind="unavailable",topic="`+topic+`"}`, 2)
}
