package redis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// smsService is a domain.Service sending SMS through sms, which also
// reconciles, on store, failing open (the default): its claims live
// claimTTL, and its store calls and sends are bounded by storeTimeout and
// sendTimeout. It is closed when t ends.
func smsService(t *testing.T, store ports.IdempotencyStore, sms *smsProvider, claimTTL, storeTimeout, sendTimeout time.Duration) *domain.Service {
	t.Helper()
	svc, err := domain.NewService(domain.Config{
		Store:        store,
		Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelSMS: sms},
		Reconcilers:  map[ports.Channel]ports.Reconciler{ports.ChannelSMS: sms},
		TTL:          time.Hour,
		ClaimTTL:     claimTTL,
		StoreTimeout: storeTimeout,
		SendTimeout:  sendTimeout,
		ClaimWaitMax: 50 * time.Millisecond,
		FailureMode:  domain.FailOpen,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}
	t.Cleanup(svc.Close)
	return svc
}

// smsProvider is an SMS provider double: it keeps every message it
// accepted, answers the first send with an unknown outcome (the request
// was written, no answer came) though it accepted it (unless lose: then
// the first request never reached it), and lists what it accepted to a
// reconciliation, as Twilio's Messages list does.
type smsProvider struct {
	lose     bool
	mu       sync.Mutex
	sends    int
	accepted []ports.Message
	at       []time.Time
}

func (p *smsProvider) Send(_ context.Context, m ports.Message) (ports.Receipt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sends++
	if p.lose && p.sends == 1 {
		return ports.Receipt{}, fmt.Errorf("read: connection reset: %w", ports.ErrOutcomeUnknown)
	}
	p.accepted = append(p.accepted, m)
	p.at = append(p.at, time.Now())
	if p.sends == 1 {
		return ports.Receipt{}, fmt.Errorf("read: connection reset: %w", ports.ErrOutcomeUnknown)
	}
	return ports.Receipt{ProviderID: fmt.Sprintf("SM%d", len(p.accepted)), SentAt: time.Now()}, nil
}

// Sender and Lag make it a ports.Reconciler whose list shows what it
// accepted at once.
func (p *smsProvider) Sender() string     { return "from:+15550001111" }
func (p *smsProvider) Lag() time.Duration { return 0 }

func (p *smsProvider) Reconcile(_ context.Context, m ports.Message, w ports.Window) (ports.Reconciliation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range p.accepted {
		if a.To == m.To && w.Sent(a.Text) && !p.at[i].Before(w.Since.Add(-time.Second)) && !p.at[i].After(w.Until.Add(time.Second)) {
			return ports.Reconciliation{Delivered: true, Receipt: ports.Receipt{ProviderID: fmt.Sprintf("SM%d", i+1), SentAt: p.at[i]}}, nil
		}
	}
	return ports.Reconciliation{}, nil
}

func (p *smsProvider) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.accepted)
}

// TestMinReplicas_TakeoverShortOfReplicasIsNotSentBlind: worker A sends an
// SMS whose outcome is unknown (the provider has it) and dies holding its
// claim. Once the lease has passed, worker B gets the replay while the
// replica is slow to acknowledge: B's takeover of A's claim is applied on
// the primary, but falls short of IDEMPOTENCY_MIN_REPLICAS. The store then
// knows the key held an abandoned claim whose send may have gone out, yet
// Claim reports only an error, and the default failure mode (open) sends
// the SMS again without asking the provider: the customer gets it twice.
// With replication flowing, the same takeover reconciles and sends nothing.
// It runs with WAIT on redis-server, and with WAITAOF
// (IDEMPOTENCY_WAIT_AOF) on a server that has it.
func TestMinReplicas_TakeoverShortOfReplicasIsNotSentBlind(t *testing.T) {
	for _, server := range []struct {
		name    string
		start   func(testing.TB, ...string) *redistest.Server
		waitAOF bool
	}{
		{"WAIT", redistest.MustStart, false},
		{"WAITAOF", redistest.MustStartWaitAOF, true},
	} {
		t.Run(server.name, func(t *testing.T) { takeoverShortOfReplicas(t, server.start(t), server.waitAOF) })
	}
}

func takeoverShortOfReplicas(t *testing.T, primary *redistest.Server, waitAOF bool) {
	_, link := redistest.MustStartReplica(t, primary, "--appendfsync", "always")
	const storeTimeout = time.Second
	cfg := redis.Config{URL: primary.URL(), Timeout: storeTimeout, MinReplicas: 1, WaitAOF: waitAOF, CompactPrefix: "tb:"}
	store := MustStore(t, cfg)
	raw := primary.MustClient(t, 0)

	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReplicationHeld=%v", held), func(t *testing.T) {
			var sms *smsProvider
			worker := func() *domain.Service {
				// The lease outlasts a send of 1 s and two store timeouts.
				return smsService(t, store, sms, 3500*time.Millisecond, storeTimeout, time.Second)
			}
			// Worker A: the provider takes the SMS, A hears nothing back,
			// keeps its claim and dies (it never handles the record again).
			// The scenario needs A's claim in the store: a claim whose
			// acknowledgement a loaded machine delayed past the store
			// timeout is given back, and A's send then went out unchecked,
			// which no store can protect. Such a start is tried again, with
			// a fresh event and provider, a bounded number of times.
			var rec ports.Record
			for try := 1; ; try++ {
				sms = &smsProvider{}
				id := fmt.Sprintf("evt-%d", time.Now().UnixNano())
				rec = ports.Record{Topic: "shipment-events", Value: []byte(fmt.Sprintf(`{"event_id":%q,"type":"shipment.out_for_delivery","shipment_id":"SHP-1",
				"recipient":{"name":"Ada","phone":"+31201234567"},"channels":["sms"],"data":{"eta":"14:00-16:00"}}`, id))}
				_ = worker().Handle(testCtx(t), rec)
				if n := sms.Accepted(); n != 1 {
					t.Fatalf("worker A: the provider accepted %d SMS, want 1", n)
				}
				if v, ok := MustGet(t, raw, cfg.Key(domain.NotificationKey(id, ports.ChannelSMS))); ok && strings.HasPrefix(v, "p") {
					break
				} else if try == 5 {
					t.Fatalf("worker A's claim never stayed in the store in %d tries (last value %q, present %v)", try, v, ok)
				}
			}
			time.Sleep(3600 * time.Millisecond) // A's lease passes

			if held {
				link.Hold()
				defer link.Release()
			}
			// Worker B: the replay, with a fresh record (another process).
			_ = worker().Handle(testCtx(t), ports.Record{Topic: rec.Topic, Value: rec.Value, DeliveryID: ports.NewDeliveryID()})
			if n := sms.Accepted(); n != 1 {
				t.Errorf("the customer got the SMS %d times, want once (worker B sent it again without reconciling the taken-over claim)", n)
			}
		})
	}
}
