package domain_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// newFakeStore is the memory store with faults injectable per method.
func newFakeStore() *storetest.Fake { return &storetest.Fake{Store: memory.New(nil)} }

// provider is a notifier double that keeps what it accepted, as a provider
// would, and fails when FailFunc says so.
type provider struct {
	FailFunc func(m ports.Message) error

	mu   sync.Mutex
	sent []ports.Message
}

func (p *provider) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	if p.FailFunc != nil {
		if err := p.FailFunc(m); err != nil {
			return ports.Receipt{}, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = append(p.sent, m)
	return ports.Receipt{ProviderID: fmt.Sprintf("%s-%d", m.Channel, len(p.sent))}, nil
}

func (p *provider) Sent() []ports.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ports.Message(nil), p.sent...)
}

type world struct {
	store    *storetest.Fake
	sms      *provider
	email    *provider
	logs     *logtest.Buffer
	outcomes map[ports.Outcome]int
	mu       sync.Mutex
	svc      *domain.Service
}

// newWorld builds a Service on a fake store and two providers; each of
// opts may change its Config first.
func newWorld(t *testing.T, mode domain.FailureMode, opts ...func(*domain.Config)) *world {
	t.Helper()
	w := &world{store: newFakeStore(), sms: &provider{}, email: &provider{}, logs: &logtest.Buffer{}, outcomes: map[ports.Outcome]int{}}
	cfg := domain.Config{
		Store:        w.store,
		Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelSMS: w.sms, ports.ChannelEmail: w.email},
		TTL:          time.Hour,
		ClaimTTL:     2 * time.Second,
		StoreTimeout: 50 * time.Millisecond,
		SendTimeout:  time.Second,
		ClaimWaitMax: 20 * time.Millisecond,
		LogEvery:     time.Nanosecond,
		FailureMode:  mode,
		Logger:       slog.New(slog.NewJSONHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Observer: ports.ObserverFunc(func(_ ports.Channel, o ports.Outcome) {
			w.mu.Lock()
			w.outcomes[o]++
			w.mu.Unlock()
		}),
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := domain.NewService(cfg)
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	t.Cleanup(svc.Close)
	w.svc = svc
	return w
}

func (w *world) handle(t *testing.T, value string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.svc.Handle(ctx, ports.Record{Topic: "shipment-events", Partition: 1, Offset: 7, Value: []byte(value)})
}

func (w *world) claimState(t *testing.T, key string) ports.ClaimState {
	t.Helper()
	c, err := w.store.Store.Claim(context.Background(), key, "probe", "", "", time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if c.State == ports.Claimed {
		_ = w.store.Store.Release(context.Background(), key, "probe")
	}
	return c.State
}

func event(id string, channels ...string) string {
	ch, _ := json.Marshal(channels)
	return fmt.Sprintf(`{"event_id":%q,"type":"shipment.out_for_delivery","shipment_id":"SHP-1",
		"recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"},
		"channels":%s,"data":{"eta":"14:00-16:00"}}`, id, ch)
}

func TestService(t *testing.T) {
	t.Run("FirstSendRecords", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		if err := w.handle(t, event("e1", "sms")); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		if got := w.sms.Sent(); len(got) != 1 || got[0].To != "+31201234567" || !strings.Contains(got[0].Text, "out for delivery") {
			t.Fatalf("sms sent %+v, want one out-for-delivery SMS to +31201234567", got)
		}
		if s := w.claimState(t, "sms:e1"); s != ports.AlreadySent {
			t.Fatalf("key state %v after send, want already_sent", s)
		}
		if n := len(w.logs.Events(t, "notification_sent")); n != 1 {
			t.Fatalf("%d notification_sent lines, want 1", n)
		}
		if w.outcomes[ports.OutcomeSent] != 1 {
			t.Fatalf("outcomes %v, want one sent", w.outcomes)
		}
	})

	t.Run("SentKeySkippedAndLogged", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		for range 2 {
			if err := w.handle(t, event("e1", "sms", "email")); err != nil {
				t.Fatalf("Handle: %v", err)
			}
		}
		if len(w.sms.Sent()) != 1 || len(w.email.Sent()) != 1 {
			t.Fatalf("sent %d SMS, %d email; want 1 each", len(w.sms.Sent()), len(w.email.Sent()))
		}
		dups := w.logs.Events(t, "duplicate_suppressed")
		if len(dups) != 2 {
			t.Fatalf("%d duplicate_suppressed lines, want 2", len(dups))
		}
		for _, field := range []string{"event_id", "channel", "shipment_id", "topic", "partition", "offset"} {
			if _, ok := dups[0][field]; !ok {
				t.Errorf("duplicate_suppressed line lacks %q: %v", field, dups[0])
			}
		}
		if w.outcomes[ports.OutcomeDuplicate] != 2 {
			t.Fatalf("outcomes %v, want two duplicates", w.outcomes)
		}
	})

	for _, tc := range []struct {
		name     string
		other    func(s ports.IdempotencyStore, key string) error
		wantSent int
	}{
		{"InFlightThenRecordedSkips", func(s ports.IdempotencyStore, key string) error {
			return s.Record(context.Background(), key, ports.Receipt{ProviderID: "other"}, time.Hour)
		}, 0},
		{"InFlightThenReleasedSends", func(s ports.IdempotencyStore, key string) error {
			return s.Release(context.Background(), key, "other-worker")
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, domain.FailOpen)
			const key = "sms:e1"
			if _, err := w.store.Store.Claim(context.Background(), key, "other-worker", "", "", time.Minute); err != nil {
				t.Fatal(err)
			}
			// The other worker finishes only once we have seen its claim.
			seen := make(chan struct{})
			var once sync.Once
			w.store.ClaimFunc = func(ctx context.Context, k, tok, digest, sender string, ttl time.Duration) (ports.Claim, error) {
				c, err := w.store.Store.Claim(ctx, k, tok, digest, sender, ttl)
				if c.State == ports.InFlight {
					once.Do(func() { close(seen) })
				}
				return c, err
			}
			done := make(chan error, 1)
			go func() {
				<-seen
				done <- tc.other(w.store.Store, key)
			}()
			if err := w.handle(t, event("e1", "sms")); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := len(w.sms.Sent()); got != tc.wantSent {
				t.Fatalf("sent %d, want %d", got, tc.wantSent)
			}
			if s := w.claimState(t, key); s != ports.AlreadySent {
				t.Fatalf("key state %v, want already_sent", s)
			}
		})
	}

	t.Run("InFlightBeyondClaimTTLIsRetryable", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.store.ClaimFunc = func(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
			return ports.Claim{State: ports.InFlight, Lease: ports.Lease{Token: "stuck"}}, nil
		}
		err := w.handle(t, event("e1", "sms"))
		if err == nil || ports.KindOf(err) != ports.Retryable {
			t.Fatalf("Handle: %v (kind %v), want a retryable error", err, ports.KindOf(err))
		}
		if len(w.sms.Sent()) != 0 {
			t.Fatalf("sent while another worker held the claim")
		}
	})

	// Once we have seen another worker's claim, a store that stops
	// answering must not turn into fail-open: that worker is sending.
	t.Run("StoreFailsWhileWaitingOnInFlightClaim", func(t *testing.T) {
		for _, mode := range []domain.FailureMode{domain.FailOpen, domain.FailClosed} {
			t.Run(string(mode), func(t *testing.T) {
				w := newWorld(t, mode)
				const key = "sms:e1"
				if _, err := w.store.Store.Claim(context.Background(), key, "other-worker", "", "", time.Minute); err != nil {
					t.Fatal(err)
				}
				var calls atomic.Int32
				w.store.ClaimFunc = func(ctx context.Context, k, tok, digest, sender string, ttl time.Duration) (ports.Claim, error) {
					switch n := calls.Add(1); {
					case n == 1:
						return w.store.Store.Claim(ctx, k, tok, digest, sender, ttl) // in flight
					case n < 4:
						return ports.Claim{}, errors.New("i/o timeout")
					case n == 4:
						// The other worker's send went through meanwhile.
						if err := w.store.Store.Record(ctx, k, ports.Receipt{ProviderID: "other"}, time.Hour); err != nil {
							return ports.Claim{}, err
						}
					}
					return w.store.Store.Claim(ctx, k, tok, digest, sender, ttl)
				}
				if err := w.handle(t, event("e1", "sms")); err != nil {
					t.Fatalf("Handle: %v", err)
				}
				if n := len(w.sms.Sent()); n != 0 {
					t.Fatalf("sent %d while another worker held the claim", n)
				}
				if n := len(w.logs.Events(t, "duplicate_suppressed")); n != 1 {
					t.Fatalf("%d duplicate_suppressed lines, want 1", n)
				}
			})
		}
	})

	storeDown := func(ctx context.Context, _, _, _, _ string, _ time.Duration) (ports.Claim, error) {
		return ports.Claim{}, errors.New("connection refused")
	}
	storeHangs := func(ctx context.Context, _, _, _, _ string, _ time.Duration) (ports.Claim, error) {
		<-ctx.Done()
		return ports.Claim{}, ctx.Err()
	}
	for _, tc := range []struct {
		name  string
		claim func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error)
	}{{"StoreError", storeDown}, {"StoreTimeout", storeHangs}} {
		t.Run(tc.name+"OpenSendsAndWarns", func(t *testing.T) {
			w := newWorld(t, domain.FailOpen)
			w.store.ClaimFunc = tc.claim
			start := time.Now()
			if err := w.handle(t, event("e1", "sms")); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if elapsed := time.Since(start); elapsed > 2*time.Second {
				t.Fatalf("Handle took %v with the store down", elapsed)
			}
			if len(w.sms.Sent()) != 1 {
				t.Fatalf("sent %d, want 1 (fail open)", len(w.sms.Sent()))
			}
			warn := w.logs.Events(t, "idempotency_check_unavailable")
			if len(warn) != 1 || warn[0]["level"] != "WARN" {
				t.Fatalf("idempotency_check_unavailable lines %v, want one warning", warn)
			}
			// The record is still written, so a replay after the outage is
			// suppressed.
			if s := w.claimState(t, "sms:e1"); s != ports.AlreadySent {
				t.Fatalf("key state %v, want already_sent", s)
			}
		})
		t.Run(tc.name+"ClosedSendsNothing", func(t *testing.T) {
			w := newWorld(t, domain.FailClosed)
			w.store.ClaimFunc = tc.claim
			err := w.handle(t, event("e1", "sms"))
			if ports.KindOf(err) != ports.Unavailable {
				t.Fatalf("Handle: %v (kind %v), want unavailable", err, ports.KindOf(err))
			}
			if len(w.sms.Sent()) != 0 {
				t.Fatalf("sent %d with the store down in closed mode", len(w.sms.Sent()))
			}
			// When the store is back, the retry sends it.
			w.store.ClaimFunc = nil
			if err := w.handle(t, event("e1", "sms")); err != nil || len(w.sms.Sent()) != 1 {
				t.Fatalf("after recovery: err %v, sent %d; want nil, 1", err, len(w.sms.Sent()))
			}
		})
	}

	t.Run("SendFailureReleasesOwnClaim", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			err  error
			kind ports.Kind
			out  ports.Outcome
		}{
			{"Retryable", errors.New("503 from provider"), ports.Retryable, ports.OutcomeFailedRetryable},
			{"Permanent", ports.MarkPermanent(errors.New("21211 invalid number")), ports.Permanent, ports.OutcomeFailedPermanent},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w := newWorld(t, domain.FailOpen)
				w.sms.FailFunc = func(ports.Message) error { return tc.err }
				err := w.handle(t, event("e1", "sms"))
				if ports.KindOf(err) != tc.kind {
					t.Fatalf("Handle: %v (kind %v), want %v", err, ports.KindOf(err), tc.kind)
				}
				if s := w.claimState(t, "sms:e1"); s != ports.Claimed {
					t.Fatalf("key state %v after a failed send, want free (released)", s)
				}
				if w.outcomes[tc.out] != 1 {
					t.Fatalf("outcomes %v, want one %v", w.outcomes, tc.out)
				}
				if n := len(w.logs.Events(t, "notification_failed")); n != 1 {
					t.Fatalf("%d notification_failed lines, want 1", n)
				}
			})
		}
		t.Run("NotAnotherWorkersClaim", func(t *testing.T) {
			// Our claim expired mid-send and another worker claimed the key:
			// our failure must not free their claim.
			w := newWorld(t, domain.FailOpen)
			w.sms.FailFunc = func(m ports.Message) error {
				_ = w.store.Store.Release(context.Background(), m.IdempotencyKey, tokenOf(t, w.store.Store, m.IdempotencyKey))
				if _, err := w.store.Store.Claim(context.Background(), m.IdempotencyKey, "other-worker", "", "", time.Minute); err != nil {
					return err
				}
				return errors.New("timeout")
			}
			_ = w.handle(t, event("e1", "sms"))
			c, _ := w.store.Store.Claim(context.Background(), "sms:e1", "probe", "", "", time.Minute)
			if c.State != ports.InFlight || c.Lease.Token != "other-worker" {
				t.Fatalf("after our failed send: %+v, want other-worker's claim intact", c)
			}
		})
	})

	t.Run("RecordFailureLoggedAndCountedAsSent", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.store.RecordFunc = func(context.Context, string, ports.Receipt, time.Duration) error {
			return errors.New("READONLY replica")
		}
		if err := w.handle(t, event("e1", "sms")); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		if len(w.sms.Sent()) != 1 || w.outcomes[ports.OutcomeSent] != 1 {
			t.Fatalf("sent %d, outcomes %v; want 1 sent", len(w.sms.Sent()), w.outcomes)
		}
		if n := len(w.logs.Events(t, "idempotency_record_failed")); n != 1 {
			t.Fatalf("%d idempotency_record_failed lines, want 1", n)
		}
	})

	t.Run("FanOutReplayResendsOnlyFailedChannel", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.email.FailFunc = func(ports.Message) error { return errors.New("451 try later") }
		err := w.handle(t, event("e1", "sms", "email"))
		if err == nil || ports.KindOf(err) != ports.Retryable {
			t.Fatalf("Handle: %v, want retryable", err)
		}
		w.email.FailFunc = nil
		if err := w.handle(t, event("e1", "sms", "email")); err != nil {
			t.Fatalf("replay: %v", err)
		}
		if len(w.sms.Sent()) != 1 || len(w.email.Sent()) != 1 {
			t.Fatalf("sent %d SMS, %d email; want 1 each", len(w.sms.Sent()), len(w.email.Sent()))
		}
	})

	t.Run("PoisonIsPermanent", func(t *testing.T) {
		for name, value := range map[string]string{
			"BadJSON":        `{"event_id":`,
			"MissingEventID": `{"type":"shipment.delivered","shipment_id":"S","recipient":{"phone":"+31201234567"}}`,
			"UnknownType":    `{"event_id":"e","type":"shipment.teleported","shipment_id":"S","recipient":{"phone":"+31201234567"}}`,
			"UnknownChannel": `{"event_id":"e","type":"shipment.delivered","shipment_id":"S","recipient":{"phone":"+31201234567"},"channels":["pigeon"]}`,
		} {
			t.Run(name, func(t *testing.T) {
				w := newWorld(t, domain.FailOpen)
				err := w.handle(t, value)
				if ports.KindOf(err) != ports.Permanent {
					t.Fatalf("Handle: %v (kind %v), want permanent", err, ports.KindOf(err))
				}
				if len(w.sms.Sent())+len(w.email.Sent()) != 0 {
					t.Fatal("a poison record sent something")
				}
			})
		}
	})
}

// tokenOf reads the owner of a pending key.
func tokenOf(t *testing.T, s ports.IdempotencyStore, key string) string {
	t.Helper()
	c, err := s.Claim(context.Background(), key, "probe", "", "", time.Minute)
	if err != nil || c.State != ports.InFlight {
		t.Fatalf("key %s: %+v, %v; want in flight", key, c, err)
	}
	return c.Lease.Token
}

// TestService_LongestHandleBoundsASlowRecord: every dependency as slow as
// its timeout lets it be, on both channels: another worker's claim held
// until the last look before the claim TTL runs out, then a send that
// answers only at the send timeout, then a release that answers only at
// the store timeout. Handle still returns within LongestHandle, the bound
// the consumer's stall detection is built on; the bound without its
// per-channel factor, or without the claim TTL, would be exceeded.
func TestService_LongestHandleBoundsASlowRecord(t *testing.T) {
	const claimTTL = 500 * time.Millisecond
	store := newFakeStore()
	atDeadline := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	var mu sync.Mutex
	firstLook := map[string]time.Time{}
	store.ClaimFunc = func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
		mu.Lock()
		first, seen := firstLook[key]
		if !seen {
			first = time.Now()
			firstLook[key] = first
		}
		mu.Unlock()
		if time.Since(first) < claimTTL-15*time.Millisecond {
			return ports.Claim{State: ports.InFlight, Lease: ports.Lease{Token: "other-worker"}}, nil
		}
		return store.Store.Claim(ctx, key, token, digest, sender, ttl)
	}
	store.ReleaseFunc = func(ctx context.Context, _, _ string) error { return atDeadline(ctx) }
	hangs := notifierFunc(func(ctx context.Context, _ ports.Message) (ports.Receipt, error) {
		return ports.Receipt{}, atDeadline(ctx)
	})
	svc, err := domain.NewService(domain.Config{
		Store:        store,
		Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelSMS: hangs, ports.ChannelEmail: hangs},
		ClaimTTL:     claimTTL,
		StoreTimeout: 100 * time.Millisecond,
		SendTimeout:  100 * time.Millisecond,
		ClaimWaitMax: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	start := time.Now()
	err = svc.Handle(context.Background(), ports.Record{Topic: "shipment-events", Value: []byte(event("e1", "sms", "email"))})
	took := time.Since(start)
	if err == nil {
		t.Fatal("Handle succeeded with every send failing")
	}
	if len(firstLook) != 2 {
		t.Fatalf("claims for %d keys, want one per channel", len(firstLook))
	}
	// About 2 x (500 + 100 + 100) ms = 1.4 s, against a bound of
	// 2 x (500 + 20 + 2 x 100 + 5 x 100) ms = 2.44 s.
	if limit := svc.LongestHandle(); took > limit {
		t.Fatalf("Handle took %v, longer than LongestHandle %v", took, limit)
	}
	if took < 1300*time.Millisecond {
		t.Fatalf("Handle took only %v: the dependencies were not as slow as the test means them to be", took)
	}
}

type notifierFunc func(context.Context, ports.Message) (ports.Receipt, error)

func (f notifierFunc) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	return f(ctx, m)
}
