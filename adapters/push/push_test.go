package push_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/push"
	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/internal/devbroker"
	"github.com/harborlight/notification-worker/ports"
)

const (
	token  = "dGVzdC1kZXZpY2UtdG9rZW4tMDEyMzQ1Njc4OQ"
	apiKey = "gw-key-3f9a"
	// waitWithin bounds every wait on the worker: generous, the machine is
	// shared.
	waitWithin = 3 * time.Minute
)

// gateway is a push gateway double over TLS: it keeps every push it took.
type gateway struct {
	srv    *httptest.Server
	mu     sync.Mutex
	pushes []received
	status int // the answer; 0: 200
}

type received struct {
	Auth, IdempotencyKey string
	To, Body, Key        string
}

func MustStartGateway(t *testing.T) *gateway {
	t.Helper()
	g := &gateway{}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			To             string `json:"to"`
			Body           string `json:"body"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		if r.URL.Path != "/v1/push" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad push", http.StatusBadRequest)
			return
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.pushes = append(g.pushes, received{Auth: r.Header.Get("Authorization"), IdempotencyKey: r.Header.Get("Idempotency-Key"), To: req.To, Body: req.Body, Key: req.IdempotencyKey})
		if g.status != 0 {
			w.WriteHeader(g.status)
			return
		}
		fmt.Fprintf(w, `{"id":"gw-%d"}`, len(g.pushes))
	}))
	t.Cleanup(g.srv.Close)
	return g
}

func (g *gateway) received() []received {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]received(nil), g.pushes...)
}

// caFile writes the gateway's certificate as a PEM file.
func (g *gateway) caFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "gateway-ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw})
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestNotifier_Send(t *testing.T) {
	g := MustStartGateway(t)
	n, err := push.New(push.Config{URL: g.srv.URL, APIKey: apiKey, RootCAs: g.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs, Timeout: 10 * time.Second, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	m := ports.Message{IdempotencyKey: "push:e1", EventID: "e1", Channel: push.Name, To: token, ToMasked: push.MaskToken(token), Text: "Shipment S is out for delivery."}

	t.Run("Accepted", func(t *testing.T) {
		r, err := n.Send(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		got := g.received()
		if len(got) != 1 || r.ProviderID != "gw-1" {
			t.Fatalf("gateway took %+v, receipt %+v", got, r)
		}
		want := received{Auth: "Bearer " + apiKey, IdempotencyKey: "push:e1", To: token, Body: m.Text, Key: "push:e1"}
		if got[0] != want {
			t.Fatalf("gateway took %+v, want %+v", got[0], want)
		}
	})
	for _, tc := range []struct {
		name   string
		status int
		check  func(error) bool
	}{
		{"Unregistered410IsPermanent", http.StatusGone, func(err error) bool { return ports.KindOf(err) == ports.Permanent }},
		{"BadKey401IsUnavailable", http.StatusUnauthorized, func(err error) bool { return ports.KindOf(err) == ports.Unavailable }},
		{"Gateway502IsUnknown", http.StatusBadGateway, func(err error) bool { return errors.Is(err, ports.ErrOutcomeUnknown) }},
		{"Busy503IsRetryable", http.StatusServiceUnavailable, func(err error) bool {
			return ports.KindOf(err) == ports.Retryable && !errors.Is(err, ports.ErrOutcomeUnknown)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.mu.Lock()
			g.status = tc.status
			g.mu.Unlock()
			_, err := n.Send(context.Background(), m)
			if err == nil || !tc.check(err) {
				t.Fatalf("err = %v (kind %v)", err, ports.KindOf(err))
			}
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), apiKey) {
				t.Fatalf("error shows the token or the key: %v", err)
			}
		})
	}
}

func TestMaskToken(t *testing.T) {
	for in, want := range map[string]string{"": "", "short": "*****", "abcdefghijklmnop": "************mnop"} {
		if got := push.MaskToken(in); got != want {
			t.Errorf("MaskToken(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWorker_SendsOnePushOnce runs the worker as it ships (the binary built
// from cmd/notification-worker, its channel table, its configuration) with
// the push channel configured: an event with a device_token arrives on the
// broker, one push reaches the gateway over TLS, and a replay of the event
// is suppressed as a duplicate, with no second push.
func TestWorker_SendsOnePushOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the worker")
	}
	g := MustStartGateway(t)
	topic := fmt.Sprintf("push-%d", time.Now().UnixNano())
	emb, err := devbroker.Start(2, []string{topic, topic + ".dlq"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)

	w := integration.StartWorkerProcess(t, map[string]string{
		"KAFKA_BROKERS":     strings.Join(emb.Brokers(), ","),
		"KAFKA_TOPIC":       topic,
		"KAFKA_GROUP_ID":    topic,
		"IDEMPOTENCY_STORE": "memory",
		"HTTP_ADDR":         "off",
		"PUSH_API_URL":      g.srv.URL,
		"PUSH_API_KEY":      apiKey,
		"PUSH_CA_FILE":      g.caFile(t),
	})

	event := []byte(`{"event_id":"push-e1","type":"shipment.out_for_delivery","shipment_id":"SHP-9","recipient":{"name":"Ada","device_token":"` + token + `"},"data":{"eta":"14:00"}}`)
	publish(t, emb.Brokers(), topic, event)
	sent := waitEvent(t, w, "notification_sent", "push-e1")
	if sent["channel"] != "push" || sent["to"] != push.MaskToken(token) {
		t.Fatalf("notification_sent %v: want channel push, to %s", sent, push.MaskToken(token))
	}
	pushes := g.received()
	if len(pushes) != 1 {
		t.Fatalf("the gateway took %d pushes, want 1", len(pushes))
	}
	if got := pushes[0]; got.To != token || got.Key != "push:push-e1" || got.Auth != "Bearer "+apiKey || got.Body != "Shipment SHP-9 is out for delivery, ETA 14:00." {
		t.Fatalf("the gateway took %+v", got)
	}

	publish(t, emb.Brokers(), topic, event) // the replay
	dup := waitEvent(t, w, "duplicate_suppressed", "push-e1")
	if dup["channel"] != "push" {
		t.Fatalf("duplicate_suppressed %v: want channel push", dup)
	}
	if n := len(g.received()); n != 1 {
		t.Fatalf("the gateway took %d pushes, want 1: the replay was sent again", n)
	}
	if strings.Contains(strings.Join(w.Logs(), "\n"), token) {
		t.Fatal("the worker's log shows the device token in clear")
	}
}

func publish(t *testing.T, brokers []string, topic string, value []byte) {
	t.Helper()
	pub, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	if err := pub.Publish(ctx, topic, kafka.Message{Key: []byte("SHP-9"), Value: value}); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits, up to waitWithin, for w's first log line whose msg is
// msg and whose event_id is id, failing if the worker exits first.
func waitEvent(t *testing.T, w *integration.Worker, msg, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(waitWithin)
	for {
		for _, e := range w.Events(msg) {
			if e["event_id"] == id {
				return e
			}
		}
		if code, exited := w.ExitCode(); exited {
			t.Fatalf("the worker exited (code %d) before %s of %s; its log:\n%s", code, msg, id, strings.Join(w.Logs(), "\n"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s of %s within %v; the worker's log:\n%s", msg, id, waitWithin, strings.Join(w.Logs(), "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
