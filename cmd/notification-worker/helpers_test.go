package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/prometheus/promtest"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/devbroker"
)

// The tests run with the development build's embedded broker, as `make run`
// does (devbroker.go).
func init() { embeddedBroker = devbroker.Starter(embeddedPartitions) }

// waitWithin bounds every wait in these tests: joining a group on the
// embedded broker and handling a few dozen records takes a second or two.
const waitWithin = 60 * time.Second

// uniqueName returns prefix with a random suffix, so topics, groups and
// key prefixes of one test never meet another's.
func uniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// lookupIn answers as os.LookupEnv would with env as the environment.
func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// MustLoadConfig runs config.LoadWorker on env alone (not the process's
// environment), failing the test on error.
func MustLoadConfig(tb testing.TB, env map[string]string) config.Config {
	tb.Helper()
	cfg, err := config.LoadWorker(lookupIn(env))
	if err != nil {
		tb.Fatalf("config.LoadWorker: %v", err)
	}
	return cfg
}

// MustStartEmbedded starts an embedded broker with topic and its DLQ, closed
// when tb ends.
func MustStartEmbedded(tb testing.TB, topic string) *devbroker.Broker {
	tb.Helper()
	emb, err := devbroker.Start(embeddedPartitions, []string{topic, topic + ".dlq"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(emb.Close)
	return emb
}

// MustPublish publishes msgs to topic on brokers.
func MustPublish(tb testing.TB, brokers []string, topic string, msgs ...kafka.Message) {
	tb.Helper()
	pub, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
	if err != nil {
		tb.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	if err := pub.Publish(ctx, topic, msgs...); err != nil {
		tb.Fatalf("publish: %v", err)
	}
}

// eventMessages keys each event by its shipment, as producers do.
func eventMessages(events []sampleEvent) []kafka.Message {
	msgs := make([]kafka.Message, 0, len(events))
	for _, ev := range events {
		msgs = append(msgs, kafka.Message{Key: []byte(ev.ShipmentID), Value: ev.json()})
	}
	return msgs
}

// MustOpen opens m, closed when tb ends if the test has not closed it.
func MustOpen(tb testing.TB, m *Main) {
	tb.Helper()
	tb.Cleanup(m.Close)
	if err := m.Open(context.Background()); err != nil {
		tb.Fatalf("Open: %v", err)
	}
}

// MustRun runs an opened m in the background. The returned stop cancels
// Run, as SIGTERM does, and returns Run's error.
func MustRun(tb testing.TB, m *Main) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- m.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(waitWithin):
				tb.Errorf("Run did not return within %v of its context's cancellation", waitWithin)
			}
		})
		return runErr
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// httpGet returns the status and body of GET url, or the error.
func httpGet(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// readyz returns /readyz's status and its decoded body.
func readyz(tb testing.TB, m *Main) (int, map[string]any) {
	tb.Helper()
	code, body, err := httpGet("http://" + m.HTTPAddr() + "/readyz")
	if err != nil {
		tb.Fatalf("GET /readyz: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		tb.Fatalf("/readyz body %q: %v", body, err)
	}
	return code, v
}

// scrape reads m's /metrics over HTTP.
func scrape(tb testing.TB, m *Main) promtest.Samples {
	tb.Helper()
	return promtest.MustScrape(tb, "http://"+m.HTTPAddr()+"/metrics")
}

// sumOf adds every series whose name starts with prefix and that carries
// every label pair in labels (`outcome="sent"`).
func sumOf(s promtest.Samples, prefix string, labels ...string) float64 {
	total := 0.0
	for k, v := range s.WithPrefix(prefix) {
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(k, l)
		}
		if ok {
			total += v
		}
	}
	return total
}
