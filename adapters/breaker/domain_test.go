package breaker_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/testclock"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// countingNotifier accepts every message at once.
type countingNotifier struct{ sent atomic.Int64 }

func (n *countingNotifier) Send(context.Context, ports.Message) (ports.Receipt, error) {
	n.sent.Add(1)
	return ports.Receipt{ProviderID: "SM1"}, nil
}

// openWorld is the real domain service, failing open, on a breaker held
// open around a store that is down.
type openWorld struct {
	store    *storetest.Fake
	breaker  *breaker.Breaker
	svc      *domain.Service
	notifier *countingNotifier
	logs     *logtest.Buffer
	clock    *testclock.Clock // the clock the domain's rate limiter reads
}

const logEvery = time.Second

func newOpenWorld(t *testing.T) *openWorld {
	t.Helper()
	down := &atomic.Bool{}
	down.Store(true)
	w := &openWorld{
		store:    switchable(down, &atomic.Bool{}),
		notifier: &countingNotifier{},
		logs:     &logtest.Buffer{},
		clock:    testclock.New(time.Date(2026, 4, 2, 9, 14, 0, 0, time.UTC)),
	}
	w.breaker = MustBreaker(t, w.store, breaker.Config{Failures: 3, Cooldown: time.Hour, Probe: never})
	svc, err := domain.NewService(domain.Config{
		Store:       w.breaker,
		Notifiers:   map[ports.Channel]ports.Notifier{ports.ChannelSMS: w.notifier},
		FailureMode: domain.FailOpen,
		LogEvery:    logEvery,
		Now:         w.clock.Now,
		Logger:      slog.New(slog.NewJSONHandler(w.logs, nil)),
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	w.svc = svc
	return w
}

// mustOpen trips the breaker with failing store calls made directly, so the
// records the test handles afterwards all meet an open circuit.
func (w *openWorld) mustOpen(t *testing.T) {
	t.Helper()
	for range 3 {
		_, _ = w.breaker.Claim(context.Background(), "trip", "tok", "", "", time.Minute)
	}
	if got := w.breaker.State(); got != breaker.StateOpen {
		t.Fatalf("breaker %q after 3 failures, want open", got)
	}
}

func (w *openWorld) mustHandle(t *testing.T, i int) {
	t.Helper()
	v := fmt.Sprintf(`{"event_id":"evt-%d","type":"shipment.out_for_delivery","shipment_id":"SHP-%d",`+
		`"recipient":{"name":"Ada","phone":"+31201234567"},"channels":["sms"],"data":{"eta":"14:00-16:00"}}`, i, i)
	rec := ports.Record{Topic: "shipment-events", Offset: int64(i), Key: fmt.Appendf(nil, "SHP-%d", i), Value: []byte(v)}
	if err := w.svc.Handle(context.Background(), rec); err != nil {
		t.Errorf("Handle record %d: %v, want nil (fail open)", i, err)
	}
}

// With the circuit open the store is never asked, so every record fails
// its check at once; the domain must still say so, but rate-limited
// (Config.LogEvery), each warning counting what it held back.
func TestOpenCircuitWarningsAreRateLimited(t *testing.T) {
	t.Run("OnePerIntervalUnderConcurrency", func(t *testing.T) {
		w := newOpenWorld(t)
		w.mustOpen(t)
		callsBefore := w.store.Calls()

		const workers, perWorker = 8, 125
		var wg sync.WaitGroup
		for g := range workers {
			wg.Go(func() {
				for i := range perWorker {
					w.mustHandle(t, g*perWorker+i)
				}
			})
		}
		wg.Wait()
		// The clock has not moved: one interval, one warning.
		warns := w.logs.Events(t, "idempotency_check_unavailable")
		if len(warns) != 1 {
			t.Fatalf("%d idempotency_check_unavailable warnings for %d records in one interval, want 1", len(warns), workers*perWorker)
		}
		w.clock.Add(logEvery)
		w.mustHandle(t, workers*perWorker)

		warns = w.logs.Events(t, "idempotency_check_unavailable")
		if len(warns) != 2 {
			t.Fatalf("%d warnings after the interval passed, want 2", len(warns))
		}
		for i, want := range []float64{0, workers*perWorker - 1} {
			if got, ok := warns[i]["suppressed_since_last"].(float64); !ok || got != want {
				t.Errorf("warning %d: suppressed_since_last = %v, want %v", i, warns[i]["suppressed_since_last"], want)
			}
			if lvl := warns[i]["level"]; lvl != "WARN" {
				t.Errorf("warning %d: level %v, want WARN", i, lvl)
			}
			if e, _ := warns[i]["error"].(string); !strings.Contains(e, breaker.ErrOpen.Error()) {
				t.Errorf("warning %d: error %q, want it to name the open circuit", i, e)
			}
		}
		if got := w.notifier.sent.Load(); got != workers*perWorker+1 {
			t.Errorf("%d sent, want %d: failing open sends every record", got, workers*perWorker+1)
		}
		if got := w.store.Calls(); got != callsBefore {
			t.Errorf("the store was called %d times while the circuit was open, want 0", got-callsBefore)
		}
	})

	t.Run("BoundedAsTimePasses", func(t *testing.T) {
		w := newOpenWorld(t)
		const records, step = 300, 100 * time.Millisecond
		for i := range records {
			w.mustHandle(t, i)
			w.clock.Add(step)
		}
		if got := w.breaker.State(); got != breaker.StateOpen {
			t.Fatalf("breaker %q, want open: the first failures should have tripped it", got)
		}
		warns := w.logs.Events(t, "idempotency_check_unavailable")
		// 300 records over 30 s of clock, one warning a second at most.
		maxWarns := int(time.Duration(records)*step/logEvery) + 1
		if len(warns) == 0 || len(warns) > maxWarns {
			t.Fatalf("%d warnings for %d records over %v, want 1 to %d", len(warns), records, time.Duration(records)*step, maxWarns)
		}
		reported := 0
		for i, m := range warns {
			n, ok := m["suppressed_since_last"].(float64)
			if !ok {
				t.Fatalf("warning %d has no suppressed_since_last: %v", i, m)
			}
			reported += 1 + int(n)
		}
		// Every failed check is either a warning or counted by the next
		// one; only those after the last warning are still pending.
		perInterval := int(logEvery / step)
		if reported > records || reported < records-perInterval {
			t.Errorf("warnings account for %d failed checks, want %d to %d of %d", reported, records-perInterval, records, records)
		}
		if got := w.notifier.sent.Load(); got != records {
			t.Errorf("%d sent, want %d", got, records)
		}
	})
}
