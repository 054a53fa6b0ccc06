package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/ports"
)

// clearEnv unsets the variables these tests depend on, whatever the
// machine's environment holds.
func clearEnv(t *testing.T) {
	for _, v := range []string{"KAFKA_BROKERS", "REDIS_URL", "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN",
		"TWILIO_FROM_NUMBER", "SMTP_HOST", "SMTP_FROM", "HTTP_ADDR", "LOG_LEVEL", "LOG_FORMAT", "KAFKA_TOPIC",
		"SMS_NOTIFIER", "EMAIL_NOTIFIER", "IDEMPOTENCY_STORE", "IDEMPOTENCY_ALLOW_EVICTION"} {
		t.Setenv(v, "")
	}
}

func runCmd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	// The logger and the console notifier write stdout from many
	// goroutines, as they share os.Stdout in production.
	var out, errOut logtest.Buffer
	code = run(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRun(t *testing.T) {
	t.Run("BadConfigExits2NamingEveryVariable", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("IDEMPOTENCY_TTL", "forever")
		t.Setenv("SMTP_PORT", "smtp")
		code, _, stderr := runCmd(t, "")
		if code != 2 || !strings.Contains(stderr, "IDEMPOTENCY_TTL") || !strings.Contains(stderr, "SMTP_PORT") {
			t.Fatalf("exit %d, stderr %q; want 2 naming IDEMPOTENCY_TTL and SMTP_PORT", code, stderr)
		}
	})

	t.Run("RefusedAdapterChoiceExits2", func(t *testing.T) {
		// Found by Open, not by config.Load: still bad configuration.
		clearEnv(t)
		t.Setenv("KAFKA_BROKERS", "127.0.0.1:1")
		t.Setenv("REDIS_URL", "redis://127.0.0.1:1")
		if code, _, stderr := runCmd(t, ""); code != 2 || !strings.Contains(stderr, "SMS_NOTIFIER") {
			t.Fatalf("exit %d, stderr %q; want 2 naming SMS_NOTIFIER", code, stderr)
		}
	})

	t.Run("EvictingRedisExits2NamingThePolicy", func(t *testing.T) {
		clearEnv(t)
		srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
		t.Setenv("KAFKA_BROKERS", "127.0.0.1:1")
		t.Setenv("REDIS_URL", srv.URL())
		t.Setenv("SMS_NOTIFIER", "console")
		t.Setenv("EMAIL_NOTIFIER", "console")
		t.Setenv("HTTP_ADDR", "127.0.0.1:0")
		code, _, stderr := runCmd(t, "")
		if code != 2 || !strings.Contains(stderr, "allkeys-lru") || !strings.Contains(stderr, "IDEMPOTENCY_ALLOW_EVICTION=true") {
			t.Fatalf("exit %d, stderr %q; want 2 naming allkeys-lru and IDEMPOTENCY_ALLOW_EVICTION=true", code, stderr)
		}
	})

	t.Run("UnknownCommandExits2", func(t *testing.T) {
		clearEnv(t)
		if code, _, stderr := runCmd(t, "", "frobnicate"); code != 2 || !strings.Contains(stderr, "usage:") {
			t.Fatalf("exit %d, stderr %q; want 2 with the usage", code, stderr)
		}
	})

	// The production binary links no embedded broker: EVENT_SOURCE=embedded
	// and the demo are refused in one line, exit 2, before anything runs.
	t.Run("WithoutEmbeddedBrokerExits2", func(t *testing.T) {
		dev := embeddedBroker
		embeddedBroker = nil
		t.Cleanup(func() { embeddedBroker = dev })
		for _, args := range [][]string{nil, {"demo"}} {
			setEnv(t, map[string]string{"EVENT_SOURCE": "embedded", "HTTP_ADDR": "127.0.0.1:0"})
			code, stdout, stderr := runCmd(t, "", args...)
			if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "-tags devbroker") {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line naming -tags devbroker", args, code, stdout, stderr)
			}
		}
	})

	// The demo is `make run`: the incident replayed, each notification sent
	// once, each replay suppressed, exit 0.
	t.Run("Demo", func(t *testing.T) {
		clearEnv(t)
		code, stdout, stderr := runCmd(t, "", "demo")
		if code != 0 {
			t.Fatalf("demo exit %d\nstderr: %s\nstdout: %s", code, stderr, stdout)
		}
		if !strings.Contains(stdout, "sent 24, duplicates suppressed 24, duplicate sends 0\n") {
			t.Fatalf("demo summary missing from:\n%s", stdout)
		}
		if n := strings.Count(stdout, "msg=duplicate_suppressed"); n != 24 {
			t.Errorf("%d duplicate_suppressed lines, want one per replayed notification (24)", n)
		}
		if n := strings.Count(stdout, "msg=notification_sent"); n != 24 {
			t.Errorf("%d notification_sent lines, want 24", n)
		}
		if n := strings.Count(stdout, "msg=event_dead_lettered"); n != 2 {
			t.Errorf("%d event_dead_lettered lines, want the malformed record once per phase", n)
		}
	})
}

func TestPublish(t *testing.T) {
	t.Run("WithoutBrokersIsUsageError", func(t *testing.T) {
		clearEnv(t)
		if code, _, stderr := runCmd(t, `{"shipment_id":"S"}`, "publish"); code != 2 || !strings.Contains(stderr, "KAFKA_BROKERS") {
			t.Fatalf("exit %d, stderr %q; want 2 naming KAFKA_BROKERS", code, stderr)
		}
	})

	t.Run("JSONLinesKeyedByShipment", func(t *testing.T) {
		clearEnv(t)
		topic := uniqueName("publish")
		emb := MustStartEmbedded(t, topic)
		t.Setenv("KAFKA_BROKERS", strings.Join(emb.Brokers(), ","))
		in := `{"event_id":"e1","shipment_id":"SHP-1"}` + "\n\n" +
			`{"event_id":"e2","shipment_id":"SHP-2"}` + "\n" +
			"not json, still published\n"
		code, stdout, stderr := runCmd(t, in, "publish", "-topic", topic)
		if code != 0 || !strings.Contains(stdout, "published 3 records to "+topic) {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		got := MustReadTopic(t, emb.Brokers(), topic, 3)
		want := map[string]string{
			`{"event_id":"e1","shipment_id":"SHP-1"}`: "SHP-1",
			`{"event_id":"e2","shipment_id":"SHP-2"}`: "SHP-2",
			"not json, still published":               "",
		}
		for _, rec := range got {
			k, ok := want[string(rec.Value)]
			if !ok || string(rec.Key) != k {
				t.Errorf("record %q with key %q, want one of the input lines keyed by its shipment", rec.Value, rec.Key)
			}
			delete(want, string(rec.Value))
		}
	})

	t.Run("Samples", func(t *testing.T) {
		clearEnv(t)
		topic := uniqueName("samples")
		emb := MustStartEmbedded(t, topic)
		t.Setenv("KAFKA_BROKERS", strings.Join(emb.Brokers(), ","))
		if code, stdout, stderr := runCmd(t, "", "publish", "-topic", topic, "-sample", "5"); code != 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		for _, rec := range MustReadTopic(t, emb.Brokers(), topic, 5) {
			ev, err := domain.Decode(rec.Value)
			if err != nil {
				t.Errorf("sample %s is not a valid event: %v", rec.Value, err)
				continue
			}
			if string(rec.Key) != ev.ShipmentID {
				t.Errorf("sample keyed %q, want its shipment %q", rec.Key, ev.ShipmentID)
			}
		}
	})
}

// MustReadTopic consumes topic from the start until n records arrived.
func MustReadTopic(tb testing.TB, brokers []string, topic string, n int) []ports.Record {
	tb.Helper()
	c, err := kafka.NewConsumer(kafka.Config{
		Brokers: brokers, Topic: topic, GroupID: uniqueName("reader"),
		SessionTimeout: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	var mu sync.Mutex
	var got []ports.Record
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
			mu.Lock()
			defer mu.Unlock()
			if got = append(got, rec); len(got) == n {
				cancel()
			}
			return nil
		}))
	}()
	if err := <-done; err != nil {
		tb.Fatalf("reading %s: %v", topic, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		tb.Fatal(fmt.Errorf("read %d records from %s before the deadline, want %d", len(got), topic, n))
	}
	return got
}
