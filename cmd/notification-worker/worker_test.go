package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// The worker's metrics satisfy the consumer's interface without the adapters
// importing each other; cmd, which wires them, is where that is checked.
var _ kafka.Metrics = (*prometheus.Metrics)(nil)

// panickingNotifier stands in for a notifier with a bug.
type panickingNotifier struct{}

func (panickingNotifier) Send(context.Context, ports.Message) (ports.Receipt, error) {
	panic("notifier bug")
}

// TestMain_MetricsAcrossAReplay runs events through two workers in turn, on
// the embedded broker with one store between them, as the 2026-04-02
// incident did: the second starts from offset 0. It reads every metric of
// the runbook's contract back from /metrics over HTTP, and the probes'
// answers through the worker's life.
func TestMain_MetricsAcrossAReplay(t *testing.T) {
	topic, group := uniqueName("metrics"), uniqueName("group")
	emb := MustStartEmbedded(t, topic)
	cfg := MustLoadConfig(t, map[string]string{
		"KAFKA_BROKERS":         emb.Brokers()[0],
		"KAFKA_TOPIC":           topic,
		"KAFKA_GROUP_ID":        group,
		"HTTP_ADDR":             "127.0.0.1:0",
		"SEND_TIMEOUT":          "2s",
		"SHUTDOWN_TIMEOUT":      "5s",
		"RETRY_INITIAL_BACKOFF": "10ms",
		"RETRY_MAX_BACKOFF":     "50ms",
	})

	events, n := sampleEvents(14)
	var perChannel = map[ports.Channel]float64{}
	for _, ev := range events {
		chs := ev.Channels
		if len(chs) == 0 {
			chs = []string{"sms", "email"}
		}
		for _, ch := range chs {
			perChannel[ports.Channel(ch)]++
		}
	}
	poison := kafka.Message{Key: []byte("SHP-broken"), Value: []byte(`{"type":"shipment.delivered","shipment_id":"SHP-broken"`)}
	MustPublish(t, emb.Brokers(), topic, append(eventMessages(events), poison)...)

	// One store and one set of metrics for both workers: the store stands
	// in for Redis, and the metrics let the counts span the restart.
	store, metrics := memory.New(nil), prometheus.New()
	var out logtest.Buffer

	first := &Main{Config: cfg, Stdout: &out, Deps: Deps{Store: store, Metrics: metrics}}
	if first.Ready() {
		t.Fatal("Ready before Open")
	}
	MustOpen(t, first)
	base := "http://" + first.HTTPAddr()
	t.Run("ReadyzBeforeRun", func(t *testing.T) {
		code, body := readyz(t, first)
		if code != http.StatusServiceUnavailable || body["ready"] != false || body["consumer"] != consumerStopped {
			t.Errorf("/readyz = %d %v, want 503 with consumer stopped", code, body)
		}
	})
	stop := MustRun(t, first)

	t.Run("Healthz", func(t *testing.T) {
		if code, _, err := httpGet(base + "/healthz"); err != nil || code != http.StatusOK {
			t.Fatalf("/healthz = %d, %v; want 200", code, err)
		}
	})
	t.Run("ReadyzWhileAssigned", func(t *testing.T) {
		wait.For(t, waitWithin, "/readyz 200 once partitions are assigned", func() (bool, string) {
			code, body := readyz(t, first)
			return code == http.StatusOK && body["ready"] == true && body["consumer"] == consumerAssigned,
				fmt.Sprintf("%d %v", code, body)
		})
	})
	wait.For(t, waitWithin, "first delivery", func() (bool, string) {
		s := scrape(t, first)
		sent := sumOf(s, "notification_worker_notifications_total{", `outcome="sent"`)
		dl := sumOf(s, "notification_worker_records_dead_lettered_total{")
		return sent == float64(n) && dl == 1, fmt.Sprintf("sent %v of %d, dead-lettered %v of 1", sent, n, dl)
	})
	if err := stop(); err != nil {
		t.Fatalf("first Run: %v", err)
	}
	t.Run("ReadyzAfterRunReturned", func(t *testing.T) {
		code, body := readyz(t, first)
		if code != http.StatusServiceUnavailable || body["ready"] != false || body["consumer"] != consumerStopped {
			t.Errorf("/readyz = %d %v, want 503 with consumer stopped", code, body)
		}
		if code, _, err := httpGet(base + "/healthz"); err != nil || code != http.StatusOK {
			t.Errorf("/healthz after Run = %d, %v; want 200: the process is alive", code, err)
		}
	})
	first.Close()
	t.Run("NothingListensAfterClose", func(t *testing.T) {
		if _, _, err := httpGet(base + "/readyz"); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("GET /readyz after Close: %v, want connection refused", err)
		}
	})

	// The replay: offsets gone, a new worker reads from offset 0. One new
	// event goes to a notifier that panics; every replayed notification
	// must be suppressed before any notifier is called.
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	if err := deleteGroup(ctx, cfg); err != nil {
		t.Fatalf("delete group: %v", err)
	}
	extra, _ := sampleEvents(1)
	extra[0].Channels = []string{"email"}
	MustPublish(t, emb.Brokers(), topic, eventMessages(extra)...)

	second := &Main{Config: cfg, Stdout: &out, Deps: Deps{
		Store: store, Metrics: metrics,
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelEmail: panickingNotifier{}},
	}}
	MustOpen(t, second)
	stop = MustRun(t, second)
	wait.For(t, waitWithin, "replay", func() (bool, string) {
		s := scrape(t, second)
		dup := sumOf(s, "notification_worker_notifications_total{", `outcome="duplicate"`)
		dl := sumOf(s, "notification_worker_records_dead_lettered_total{")
		p := sumOf(s, "notification_worker_handler_panics_total")
		return dup == float64(n) && dl == 3 && p == 1, fmt.Sprintf("duplicates %v of %d, dead-lettered %v of 3, panics %v of 1", dup, n, dl, p)
	})
	if err := stop(); err != nil {
		t.Fatalf("second Run: %v", err)
	}
	s := scrape(t, second)

	t.Run("NotificationsByChannelAndOutcome", func(t *testing.T) {
		for _, ch := range []ports.Channel{ports.ChannelSMS, ports.ChannelEmail} {
			want := map[ports.Outcome]float64{
				ports.OutcomeSent:            perChannel[ch],
				ports.OutcomeDuplicate:       perChannel[ch],
				ports.OutcomeFailedRetryable: 0,
				ports.OutcomeFailedPermanent: 0,
			}
			for o, w := range want {
				s.Want(t, `notification_worker_notifications_total{channel="`+string(ch)+`",outcome="`+string(o)+`"}`, w)
			}
		}
	})
	t.Run("DuplicatesSuppressed", func(t *testing.T) {
		s.Want(t, "notification_worker_duplicates_suppressed_total", float64(n))
	})
	t.Run("StoreUnavailable", func(t *testing.T) {
		for _, op := range []string{"claim", "record", "release"} {
			s.Want(t, `notification_worker_store_unavailable_total{operation="`+op+`"}`, 0)
		}
	})
	t.Run("RecordsDeadLettered", func(t *testing.T) {
		// The poison record in each run, and the record whose notifier
		// panicked.
		s.Want(t, `notification_worker_records_dead_lettered_total{kind="permanent",topic="`+topic+`"}`, 3)
		s.Want(t, `notification_worker_records_dead_lettered_total{kind="retryable",topic="`+topic+`"}`, 0)
	})
	t.Run("HandlerPanics", func(t *testing.T) {
		s.Want(t, "notification_worker_handler_panics_total", 1)
	})
	t.Run("StoreCallDuration", func(t *testing.T) {
		// A claim per notification per run, plus the panicking one's; a
		// record per send.
		claims, _ := s.Get(`notification_worker_store_call_duration_seconds_count{operation="claim"}`)
		if claims < float64(2*n+1) {
			t.Errorf("claim calls measured = %v, want at least %d", claims, 2*n+1)
		}
		s.Want(t, `notification_worker_store_call_duration_seconds_count{operation="record"}`, float64(n))
		if v, _ := s.Get(`notification_worker_store_call_duration_seconds_bucket{operation="claim",le="+Inf"}`); v != claims {
			t.Errorf("claim +Inf bucket = %v, want the count %v", v, claims)
		}
	})
	t.Run("SendDuration", func(t *testing.T) {
		for _, ch := range []ports.Channel{ports.ChannelSMS, ports.ChannelEmail} {
			s.Want(t, `notification_worker_send_duration_seconds_count{channel="`+string(ch)+`"}`, perChannel[ch])
		}
	})
	t.Run("ConsumerLagPerPartition", func(t *testing.T) {
		for p := range embeddedPartitions {
			series := `notification_worker_consumer_lag{partition="` + strconv.Itoa(p) + `",topic="` + topic + `"}`
			v, ok := s.Get(series)
			if !ok {
				t.Errorf("%s not exported", series)
			} else if v < 0 {
				t.Errorf("%s = %v, want >= 0", series, v)
			}
		}
	})
}

// TestMain_ReadyzShowsStoreOutage kills Redis under a running worker. The
// worker fails open, so /readyz must stay 200 while its body names the
// outage, and the outage must show in store_unavailable_total; once Redis is
// back, the body says so.
func TestMain_ReadyzShowsStoreOutage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures string // IDEMPOTENCY_BREAKER_FAILURES
		outage   string // /readyz's "store" while Redis is down
	}{
		{"BehindTheBreaker", "2", storeOpenCircuit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redisSrv := redistest.MustStart(t)
			topic := uniqueName("outage")
			emb := MustStartEmbedded(t, topic)
			cfg := MustLoadConfig(t, map[string]string{
				"KAFKA_BROKERS":                emb.Brokers()[0],
				"KAFKA_TOPIC":                  topic,
				"KAFKA_GROUP_ID":               uniqueName("group"),
				"REDIS_URL":                    redisSrv.URL(),
				"SMS_NOTIFIER":                 "console",
				"EMAIL_NOTIFIER":               "console",
				"IDEMPOTENCY_KEY_PREFIX":       uniqueName("idem") + ":",
				"IDEMPOTENCY_BREAKER_FAILURES": tc.failures,
				"IDEMPOTENCY_BREAKER_COOLDOWN": "100ms",
				"HTTP_ADDR":                    "127.0.0.1:0",
				"SEND_TIMEOUT":                 "2s",
				"SHUTDOWN_TIMEOUT":             "5s",
			})
			m := &Main{Config: cfg, Stdout: &logtest.Buffer{}}
			MustOpen(t, m)
			MustRun(t, m)

			// send publishes one SMS-only event and waits until the worker
			// has sent it.
			sent := 0
			send := func(what string) {
				t.Helper()
				ev, _ := sampleEvents(1)
				ev[0].Channels = []string{"sms"}
				MustPublish(t, emb.Brokers(), topic, eventMessages(ev)...)
				sent++
				wait.For(t, waitWithin, what, func() (bool, string) {
					got := sumOf(scrape(t, m), "notification_worker_notifications_total{", `outcome="sent"`)
					return got == float64(sent), fmt.Sprintf("sent %v of %d", got, sent)
				})
			}
			send("a send with Redis up")
			if code, body := readyz(t, m); code != http.StatusOK || body["store"] != prometheus.StoreOK {
				t.Fatalf("/readyz with Redis up = %d %v, want 200 with store ok", code, body)
			}

			redisSrv.Kill(t)
			// Keep sending: each send fails its claim and its record (the
			// breaker counts only failures that beat the caller's deadline,
			// so how many sends open it is not fixed).
			var body map[string]any
			wait.For(t, waitWithin, "/readyz 200 naming the outage", func() (bool, string) {
				send("a send with Redis down (fail-open)")
				var code int
				code, body = readyz(t, m)
				return code == http.StatusOK && body["ready"] == true && body["store"] == tc.outage, fmt.Sprintf("%d %v", code, body)
			})
			if body["consumer"] != consumerAssigned {
				t.Errorf("consumer = %v, want %s", body["consumer"], consumerAssigned)
			}
			if got := sumOf(scrape(t, m), "notification_worker_store_unavailable_total{"); got < 1 {
				t.Errorf("store_unavailable_total = %v during the outage, want > 0", got)
			}

			redisSrv.Restart(t)
			// The next call finds the store again (after the breaker's
			// probe, if there is one).
			wait.For(t, waitWithin, "/readyz store ok once Redis is back", func() (bool, string) {
				send("a send after Redis came back")
				_, body := readyz(t, m)
				return body["store"] == prometheus.StoreOK, fmt.Sprintf("%v", body)
			})
		})
	}
}

// TestMain_InsecureTransportAllowedIsLogged: the opt-out from the clear-text
// refusals is visible at start, as a warning an operator can alert on, and
// only when it is set.
func TestMain_InsecureTransportAllowedIsLogged(t *testing.T) {
	for _, tc := range []struct {
		name, allow string
		want        bool
	}{{"Set", "true", true}, {"Unset", "", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := MustLoadConfig(t, map[string]string{
				"ALLOW_INSECURE_TRANSPORT": tc.allow,
				"EVENT_SOURCE":             "embedded",
				"KAFKA_TOPIC":              uniqueName("insecure"),
				"HTTP_ADDR":                "off",
			})
			var out logtest.Buffer
			m := &Main{Config: cfg, Stdout: &out}
			MustOpen(t, m)
			m.Close()
			logged := strings.Contains(out.String(), `"level":"WARN","msg":"insecure_transport_allowed"`)
			if logged != tc.want {
				t.Errorf("insecure_transport_allowed logged: %v, want %v; logs:\n%s", logged, tc.want, out.String())
			}
		})
	}
}
