package prometheus_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/prometheus/promtest"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// fakeNotifier is a ports.Notifier whose answer the test chooses.
type fakeNotifier struct {
	SendFunc func(ctx context.Context, m ports.Message) (ports.Receipt, error)
}

func (f *fakeNotifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	return f.SendFunc(ctx, m)
}

// mustScrape serves m over HTTP, as the worker does, and reads it back.
func mustScrape(tb testing.TB, m *prometheus.Metrics) promtest.Samples {
	tb.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	return promtest.MustScrape(tb, srv.URL)
}

// newMetrics returns prometheus.New() for a worker whose channels are SMS
// and email.
func newMetrics() *prometheus.Metrics {
	m := prometheus.New()
	m.KnowChannels(ports.ChannelSMS, ports.ChannelEmail)
	return m
}

func TestMetrics_Observe(t *testing.T) {
	t.Run("EveryChannelAndOutcomeStartsAtZero", func(t *testing.T) {
		s := mustScrape(t, newMetrics())
		for _, ch := range []ports.Channel{ports.ChannelSMS, ports.ChannelEmail} {
			for _, o := range ports.Outcomes {
				s.Want(t, `notification_worker_notifications_total{channel="`+string(ch)+`",outcome="`+string(o)+`"}`, 0)
			}
		}
		s.Want(t, "notification_worker_duplicates_suppressed_total", 0)
		s.Want(t, "notification_worker_handler_panics_total", 0)
		s.Want(t, "notification_worker_handlers_abandoned", 0)
		for _, op := range []string{"claim", "record", "release"} {
			s.Want(t, `notification_worker_store_unavailable_total{operation="`+op+`"}`, 0)
			s.Want(t, `notification_worker_store_call_duration_seconds_count{operation="`+op+`"}`, 0)
		}
	})
	t.Run("CountsByChannelAndOutcome", func(t *testing.T) {
		m := newMetrics()
		m.Observe(ports.ChannelSMS, ports.OutcomeSent)
		m.Observe(ports.ChannelSMS, ports.OutcomeSent)
		m.Observe(ports.ChannelEmail, ports.OutcomeFailedPermanent)
		m.Observe(ports.ChannelEmail, ports.OutcomeDuplicate)
		m.Observe(ports.ChannelSMS, ports.OutcomeDuplicate)
		s := mustScrape(t, m)
		s.Want(t, `notification_worker_notifications_total{channel="sms",outcome="sent"}`, 2)
		s.Want(t, `notification_worker_notifications_total{channel="email",outcome="failed_permanent"}`, 1)
		s.Want(t, `notification_worker_notifications_total{channel="email",outcome="sent"}`, 0)
		s.Want(t, "notification_worker_duplicates_suppressed_total", 2)
	})
	t.Run("RegistriesAreIndependent", func(t *testing.T) {
		a, b := newMetrics(), newMetrics()
		a.Observe(ports.ChannelSMS, ports.OutcomeSent)
		mustScrape(t, a).Want(t, `notification_worker_notifications_total{channel="sms",outcome="sent"}`, 1)
		mustScrape(t, b).Want(t, `notification_worker_notifications_total{channel="sms",outcome="sent"}`, 0)
	})
}

func TestMetrics_Consumer(t *testing.T) {
	t.Run("DeadLettersByTopicAndKind", func(t *testing.T) {
		m := newMetrics()
		m.KnowTopic("shipments")
		s := mustScrape(t, m)
		s.Want(t, `notification_worker_records_dead_lettered_total{kind="permanent",topic="shipments"}`, 0)
		s.Want(t, `notification_worker_records_dead_lettered_total{kind="retryable",topic="shipments"}`, 0)

		m.RecordDeadLettered("shipments", ports.Permanent)
		m.RecordDeadLettered("shipments", ports.Permanent)
		m.RecordDeadLettered("shipments", ports.Retryable)
		s = mustScrape(t, m)
		s.Want(t, `notification_worker_records_dead_lettered_total{kind="permanent",topic="shipments"}`, 2)
		s.Want(t, `notification_worker_records_dead_lettered_total{kind="retryable",topic="shipments"}`, 1)
	})
	t.Run("Panics", func(t *testing.T) {
		m := newMetrics()
		m.HandlerPanicked("shipments")
		mustScrape(t, m).Want(t, "notification_worker_handler_panics_total", 1)
	})
	t.Run("HandlersAbandonedUpAndDown", func(t *testing.T) {
		m := newMetrics()
		m.HandlersAbandoned(3)
		m.HandlersAbandoned(-1)
		mustScrape(t, m).Want(t, "notification_worker_handlers_abandoned", 2)
	})
	t.Run("LagPerPartitionLatestWins", func(t *testing.T) {
		m := newMetrics()
		m.ConsumerLag("shipments", 0, 40)
		m.ConsumerLag("shipments", 0, 7)
		m.ConsumerLag("shipments", 3, 12)
		m.ConsumerLag("shipments", 2, -1)
		s := mustScrape(t, m)
		s.Want(t, `notification_worker_consumer_lag{partition="0",topic="shipments"}`, 7)
		s.Want(t, `notification_worker_consumer_lag{partition="3",topic="shipments"}`, 12)
		s.Want(t, `notification_worker_consumer_lag{partition="2",topic="shipments"}`, 0)
		if _, ok := s.Get(`notification_worker_consumer_lag{partition="1",topic="shipments"}`); ok {
			t.Error("lag exported for partition 1, which reported none")
		}
	})
}

func TestMetrics_InstrumentStore(t *testing.T) {
	errDown := errors.New("connection refused")
	t.Run("OK", func(t *testing.T) {
		m := newMetrics()
		want := ports.Claim{State: ports.AlreadySent, Receipt: ports.Receipt{ProviderID: "SM1"}}
		s := m.InstrumentStore(&storetest.Fake{
			Store: memory.New(nil), // Record and Release succeed
			ClaimFunc: func(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
				return want, nil
			},
		})
		if m.StoreStatus() != prometheus.StoreUnknown {
			t.Errorf("StoreStatus before any call = %q, want %q", m.StoreStatus(), prometheus.StoreUnknown)
		}
		ctx := context.Background()
		got, err := s.Claim(ctx, "k", "t", "", "", time.Minute)
		if err != nil || got != want {
			t.Fatalf("Claim = %+v, %v; want %+v, nil", got, err, want)
		}
		if err := s.Record(ctx, "k", ports.Receipt{}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "k", "t"); err != nil {
			t.Fatal(err)
		}
		sm := mustScrape(t, m)
		for _, op := range []string{"claim", "record", "release"} {
			sm.Want(t, `notification_worker_store_call_duration_seconds_count{operation="`+op+`"}`, 1)
			sm.Want(t, `notification_worker_store_unavailable_total{operation="`+op+`"}`, 0)
		}
		if m.StoreStatus() != prometheus.StoreOK {
			t.Errorf("StoreStatus = %q, want %q", m.StoreStatus(), prometheus.StoreOK)
		}
	})
	t.Run("FailuresAndTimeoutsCountCancellationsDoNot", func(t *testing.T) {
		m := newMetrics()
		s := m.InstrumentStore(&storetest.Fake{
			ClaimFunc: func(ctx context.Context, _, _, _, _ string, _ time.Duration) (ports.Claim, error) {
				if ctx.Err() != nil {
					return ports.Claim{}, ctx.Err()
				}
				return ports.Claim{}, errDown
			},
			RecordFunc:  func(context.Context, string, ports.Receipt, time.Duration) error { return errDown },
			ReleaseFunc: func(ctx context.Context, _, _ string) error { return ctx.Err() },
		})
		if _, err := s.Claim(context.Background(), "k", "t", "", "", time.Minute); !errors.Is(err, errDown) {
			t.Fatalf("Claim error = %v, want the store's", err)
		}
		if err := s.Record(context.Background(), "k", ports.Receipt{}, time.Minute); !errors.Is(err, errDown) {
			t.Fatalf("Record error = %v, want the store's", err)
		}
		expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := s.Claim(expired, "k", "t", "", "", time.Minute); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Claim error = %v, want DeadlineExceeded", err)
		}
		if m.StoreStatus() != prometheus.StoreFailing {
			t.Errorf("StoreStatus = %q, want %q", m.StoreStatus(), prometheus.StoreFailing)
		}
		cancelled, cancel2 := context.WithCancel(context.Background())
		cancel2()
		if err := s.Release(cancelled, "k", "t"); !errors.Is(err, context.Canceled) {
			t.Fatalf("Release error = %v, want Canceled", err)
		}
		sm := mustScrape(t, m)
		sm.Want(t, `notification_worker_store_unavailable_total{operation="claim"}`, 2)
		sm.Want(t, `notification_worker_store_unavailable_total{operation="record"}`, 1)
		sm.Want(t, `notification_worker_store_unavailable_total{operation="release"}`, 0)
		// Latency is measured whatever the result.
		sm.Want(t, `notification_worker_store_call_duration_seconds_count{operation="release"}`, 1)
		if m.StoreStatus() != prometheus.StoreFailing {
			t.Errorf("StoreStatus after a cancelled call = %q, want it unchanged (%q)", m.StoreStatus(), prometheus.StoreFailing)
		}
	})
}

func TestMetrics_InstrumentNotifier(t *testing.T) {
	m := newMetrics()
	errRejected := ports.MarkPermanent(errors.New("550 no such user"))
	sms := m.InstrumentNotifier(ports.ChannelSMS, &fakeNotifier{SendFunc: func(context.Context, ports.Message) (ports.Receipt, error) {
		return ports.Receipt{ProviderID: "SM1"}, nil
	}})
	email := m.InstrumentNotifier(ports.ChannelEmail, &fakeNotifier{SendFunc: func(context.Context, ports.Message) (ports.Receipt, error) {
		return ports.Receipt{}, errRejected
	}})
	t.Run("ZeroBeforeAnySend", func(t *testing.T) {
		s := mustScrape(t, m)
		s.Want(t, `notification_worker_send_duration_seconds_count{channel="sms"}`, 0)
		s.Want(t, `notification_worker_send_duration_seconds_count{channel="email"}`, 0)
	})
	t.Run("PassesResultsThroughAndMeasuresEach", func(t *testing.T) {
		for range 2 {
			if r, err := sms.Send(context.Background(), ports.Message{}); err != nil || r.ProviderID != "SM1" {
				t.Fatalf("sms Send = %+v, %v; want SM1, nil", r, err)
			}
		}
		if _, err := email.Send(context.Background(), ports.Message{}); ports.KindOf(err) != ports.Permanent {
			t.Fatalf("email Send error = %v, want the notifier's permanent error", err)
		}
		s := mustScrape(t, m)
		s.Want(t, `notification_worker_send_duration_seconds_count{channel="sms"}`, 2)
		s.Want(t, `notification_worker_send_duration_seconds_count{channel="email"}`, 1)
		if v, _ := s.Get(`notification_worker_send_duration_seconds_bucket{channel="sms",le="+Inf"}`); v != 2 {
			t.Errorf("sms +Inf bucket = %v, want 2", v)
		}
	})
}

// The Redis store's health events: exported at 0 from the start, so an
// alert's increase() sees the first eviction or reset.
func TestMetrics_RedisHealth(t *testing.T) {
	m := newMetrics()
	s := mustScrape(t, m)
	s.Want(t, "notification_worker_redis_evicted_keys_total", 0)
	s.Want(t, "notification_worker_idempotency_store_resets_total", 0)

	m.RedisKeysEvicted(2640)
	m.RedisKeysEvicted(5)
	m.IdempotencyStoreReset()
	s = mustScrape(t, m)
	s.Want(t, "notification_worker_redis_evicted_keys_total", 2645)
	s.Want(t, "notification_worker_idempotency_store_resets_total", 1)
}
