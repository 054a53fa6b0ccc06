package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/devbroker"
	"github.com/harborlight/notification-worker/ports"
)

// partitions is the topic's partition count in every benchmark, so the
// variants compared differ in one thing only.
const partitions = 8

// broker is an embedded kfake broker holding one topic of published events,
// which every variant of a benchmark consumes with its own group: the same
// events, in the same partitions.
type broker struct {
	brokers []string
	topic   string
	events  int
}

var groupSeq atomic.Int64

// mustBroker starts an embedded broker and publishes n events with keys
// drawn from keys distinct shipments, round robin, so consecutive records
// of one partition rarely share a key.
func mustBroker(b *testing.B, n, keys int) *broker {
	b.Helper()
	topic := "shipment-events"
	e, err := devbroker.Start(partitions, []string{topic})
	if err != nil {
		b.Fatalf("devbroker.Start: %v", err)
	}
	b.Cleanup(e.Close)
	return mustPublish(b, e.Brokers(), topic, n, keys)
}

// mustPublish publishes n events to topic (which must exist with
// partitions partitions) on brokers, as mustBroker describes.
func mustPublish(b *testing.B, brokers []string, topic string, n, keys int) *broker {
	b.Helper()
	p, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
	if err != nil {
		b.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const batch = 500 // the size Sarama publishes fastest (FIELD-NOTES)
	for from := 0; from < n; from += batch {
		msgs := make([]kafka.Message, 0, batch)
		for i := from; i < min(from+batch, n); i++ {
			shipment := fmt.Sprintf("SHP-%06d", i%keys)
			msgs = append(msgs, kafka.Message{Key: []byte(shipment), Value: eventJSON(newUUID(), shipment)})
		}
		if err := p.Publish(ctx, topic, msgs...); err != nil {
			b.Fatalf("Publish: %v", err)
		}
	}
	return &broker{brokers: brokers, topic: topic, events: n}
}

// eventJSON is a valid shipment event (README: "The event") for one SMS.
func eventJSON(eventID, shipment string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"type":"shipment.out_for_delivery","occurred_at":%q,`+
		`"shipment_id":%q,"recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"},`+
		`"channels":["sms"],"data":{"eta":"14:00-16:00","tracking_url":"https://track.example/%s"}}`,
		eventID, time.Now().UTC().Format(time.RFC3339), shipment, shipment)
}

// newUUID returns a random (version 4) UUID, the event_id producers assign.
func newUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// twilioSID returns an id shaped like a Twilio message SID ("SM" and 32 hex
// digits), the provider id an SMS record holds.
func twilioSID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "SM" + hex.EncodeToString(b[:])
}

// notifier is a provider double whose every send takes latency.
type notifier struct {
	latency time.Duration
	sends   atomic.Int64
}

func (n *notifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	if n.latency > 0 {
		t := time.NewTimer(n.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ports.Receipt{}, ctx.Err()
		}
	}
	n.sends.Add(1)
	return ports.Receipt{ProviderID: twilioSID()}, nil
}

// passThrough is "no store": every notification is new, and nothing is
// remembered. It is the floor the real stores are compared with.
type passThrough struct{}

func (passThrough) Claim(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
	return ports.Claim{State: ports.Claimed}, nil
}
func (passThrough) Record(context.Context, string, ports.Receipt, time.Duration) error { return nil }
func (passThrough) Release(context.Context, string, string) error                      { return nil }

// storeClock adds the time spent in store calls to the record's tally,
// found in the call's context (the domain hands its context down).
type storeClock struct{ ports.IdempotencyStore }

type tallyKey struct{}

// tally is the time one record spent waiting for the store.
type tally struct{ nanos atomic.Int64 }

func add(ctx context.Context, since time.Time) {
	if t, ok := ctx.Value(tallyKey{}).(*tally); ok {
		t.nanos.Add(int64(time.Since(since)))
	}
}

func (s storeClock) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	defer add(ctx, time.Now())
	return s.IdempotencyStore.Claim(ctx, key, token, digest, sender, ttl)
}

func (s storeClock) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	defer add(ctx, time.Now())
	return s.IdempotencyStore.Record(ctx, key, r, ttl)
}

func (s storeClock) Release(ctx context.Context, key, token string) error {
	defer add(ctx, time.Now())
	return s.IdempotencyStore.Release(ctx, key, token)
}

// run is one measured consumption: a fresh group reads the broker's topic
// with the real consumer and the real domain service.
type run struct {
	maxInFlight int
	store       ports.IdempotencyStore
	latency     time.Duration // of each send
	// sms, when set, sends the SMS instead of the latency double.
	sms ports.Notifier
	// want is how many records to measure; within bounds the wall time.
	want   int
	within time.Duration
	// serverCPU, when set, reads the CPU time a server process used so far
	// (redis-server shares this machine's CPUs with the worker).
	serverCPU func() time.Duration
	// tracer, when set, decorates the handler, the store and the notifier
	// as the worker does with tracing on; nil decorates nothing (off).
	tracer *otel.Tracer
}

// measurement is what a run saw, from the moment the first record reached
// the handler (the group join is not the worker's throughput) to the
// moment the last measured record finished.
type measurement struct {
	records int
	elapsed time.Duration
	// store holds, per measured record, the time it spent in store calls.
	store []time.Duration
	// timedOut is set when within passed before want records finished.
	timedOut bool
	// rounds holds the rate of every round when this is the best of
	// several (see bestOf).
	rounds []float64
	// cpu is the CPU time this process used while measuring (the worker,
	// and the in-process broker and benchmark around it): unlike the wall
	// time, other work on the machine barely moves it.
	cpu time.Duration
	// serverCPU is the CPU time the store's server used meanwhile, when
	// known.
	serverCPU time.Duration
	// conns is how many connections the provider double accepted during
	// the run, when counted.
	conns int64
	// join is the time from starting the consumer to its first record: the
	// group join and the first fetch.
	join time.Duration
}

// cpuPerRecord is the process's CPU time per measured record.
func (m measurement) cpuPerRecord() time.Duration {
	if m.records == 0 {
		return 0
	}
	return m.cpu / time.Duration(m.records)
}

// serverCPUPerRecord is the server's CPU time per measured record.
func (m measurement) serverCPUPerRecord() time.Duration {
	if m.records == 0 {
		return 0
	}
	return m.serverCPU / time.Duration(m.records)
}

// processCPU returns the user and system CPU time this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (m measurement) perSecond() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return float64(m.records) / m.elapsed.Seconds()
}

// percentile returns the p-th percentile (nearest rank) of the per-record
// store time.
func (m measurement) percentile(p float64) time.Duration {
	if len(m.store) == 0 {
		return 0
	}
	d := slices.Clone(m.store)
	slices.Sort(d)
	i := int(float64(len(d))*p/100+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

// measure runs r against br and returns what it saw. It fails b if the
// consumer fails or no record arrives within r.within.
func (r run) measure(b *testing.B, br *broker) measurement {
	b.Helper()
	if r.want > br.events {
		b.Fatalf("want %d records of %d published", r.want, br.events)
	}
	var sms ports.Notifier = &notifier{latency: r.latency}
	if r.sms != nil {
		sms = r.sms
	}
	svc, err := domain.NewService(domain.Config{
		Store:     r.tracer.Store(storeClock{r.store}),
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: r.tracer.Notifier(ports.ChannelSMS, "double", sms)},
		// The production defaults: IDEMPOTENCY_TIMEOUT 200ms, fail open,
		// warnings at most once a second.
		StoreTimeout: 200 * time.Millisecond,
		FailureMode:  domain.FailOpen,
		// Info, as in production: the per-record notification_sent line is
		// part of the cost (with its trace and span, with tracing on); only
		// the write to stdout is left out.
		Logger: r.tracer.Logger(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))),
	})
	if err != nil {
		b.Fatalf("NewService: %v", err)
	}
	// The consumer holds one of its MaxInFlight slots for each call of
	// handler, inside measure (below), as it does for each attempt inside
	// the worker's policy.
	handler := r.tracer.Handler(svc)
	c, err := kafka.NewConsumer(kafka.Config{
		Brokers:         br.brokers,
		Topic:           br.topic,
		GroupID:         fmt.Sprintf("bench-%d", groupSeq.Add(1)),
		MaxInFlight:     r.maxInFlight,
		ShutdownTimeout: 5 * time.Second,
		Logger:          slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		b.Fatalf("NewConsumer: %v", err)
	}

	var (
		first    atomic.Int64 // unix nanos of the first handler call
		finished atomic.Int64
		mu       sync.Mutex
		times    = make([]time.Duration, 0, r.want)
		end      time.Time
		reached  = make(chan struct{})
	)
	measure := func(next ports.Handler) ports.Handler {
		return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			first.CompareAndSwap(0, time.Now().UnixNano())
			t := &tally{}
			err := next.Handle(context.WithValue(ctx, tallyKey{}, t), rec)
			if n := finished.Add(1); n <= int64(r.want) {
				mu.Lock()
				times = append(times, time.Duration(t.nanos.Load()))
				if n == int64(r.want) {
					end = time.Now()
					close(reached)
				}
				mu.Unlock()
			}
			return err
		})
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := time.Now()
	go func() { done <- c.RunPolicy(ctx, handler, measure) }()
	stop := func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				b.Fatalf("consumer: %v", err)
			}
		case <-time.After(30 * time.Second):
			b.Fatalf("consumer did not stop within 30s")
		}
	}

	// The clock starts at the first record, so the deadline does too; the
	// join itself gets a bound of its own.
	joinBy := time.After(30 * time.Second)
	for first.Load() == 0 {
		select {
		case err := <-done:
			b.Fatalf("consumer stopped before the first record: %v", err)
		case <-joinBy:
			cancel()
			b.Fatalf("no record handled within 30s of starting the consumer")
		case <-time.After(5 * time.Millisecond):
		}
	}
	m := measurement{join: time.Unix(0, first.Load()).Sub(started)}
	cpuStart := processCPU()
	var serverStart time.Duration
	if r.serverCPU != nil {
		serverStart = r.serverCPU()
	}
	deadline := time.NewTimer(time.Until(time.Unix(0, first.Load()).Add(r.within)))
	defer deadline.Stop()
	select {
	case <-reached:
	case <-deadline.C:
		m.timedOut = true
	case err := <-done:
		b.Fatalf("consumer stopped while measuring: %v", err)
	}
	m.cpu = processCPU() - cpuStart
	if r.serverCPU != nil {
		m.serverCPU = r.serverCPU() - serverStart
	}
	mu.Lock()
	if !m.timedOut {
		m.records, m.elapsed = r.want, end.Sub(time.Unix(0, first.Load()))
	} else {
		m.records, m.elapsed = len(times), time.Since(time.Unix(0, first.Load()))
	}
	m.store = slices.Clone(times)
	mu.Unlock()
	stop()
	return m
}

// needRedis skips b, with the reason, when no redis-server can be started.
func needRedis(b *testing.B) {
	b.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("redis-server not found on PATH (Debian: apt-get install -y redis-server): the Redis benchmarks need a real server")
	}
}

// mustRedis starts a throwaway redis-server on a free loopback port, killed
// when b ends.
func mustRedis(b *testing.B) *redistest.Server {
	b.Helper()
	needRedis(b)
	return redistest.MustStart(b)
}
