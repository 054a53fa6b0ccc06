// Package prometheus keeps the worker's metrics in the Prometheus format
// (client_golang) and serves them. Metrics is told what happened by the
// domain (as its ports.Observer) and by the consumer (as its metrics sink),
// and measures the store and the notifiers by decorating their ports, so no
// metric call lives in the domain.
//
// Every Metrics has its own registry, never the global one: two workers in
// one process (the demo, the end-to-end tests) keep separate counts.
package prometheus

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/harborlight/notification-worker/internal/buildinfo"
	"github.com/harborlight/notification-worker/ports"
)

// Namespace prefixes every metric the worker exports.
const Namespace = "notification_worker"

// Store operations, the values of the "operation" label.
const (
	OpClaim   = "claim"
	OpRecord  = "record"
	OpRelease = "release"
)

// Store health, as StoreStatus reports it.
const (
	// StoreUnknown: no store call has finished yet.
	StoreUnknown = "unknown"
	// StoreOK: the latest store call succeeded.
	StoreOK = "ok"
	// StoreFailing: the latest store call failed or timed out (or was
	// refused by a circuit breaker in front of the store).
	StoreFailing = "failing"
)

// Buckets, in seconds. The store's are around its 200ms timeout, where the
// failure mode starts to apply; the sends' reach past the 10s send timeout.
var (
	storeBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .15, .2, .25, .5, 1}
	sendBuckets  = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15, 30}
)

// Metrics holds the worker's metrics. It implements ports.Observer and the
// kafka adapter's Metrics interface (structurally: adapters do not import
// each other). Every method is safe for concurrent use and does not block.
type Metrics struct {
	reg *prometheus.Registry

	notifications    *prometheus.CounterVec
	unknown          *prometheus.CounterVec
	reconciliations  *prometheus.CounterVec
	duplicates       prometheus.Counter
	storeUnavailable *prometheus.CounterVec
	deadLettered     *prometheus.CounterVec
	storeDuration    *prometheus.HistogramVec
	sendDuration     *prometheus.HistogramVec
	lag              *prometheus.GaugeVec
	panics           prometheus.Counter
	abandoned        prometheus.Gauge
	retries          *prometheus.CounterVec
	buildInfo        *prometheus.GaugeVec
	owedLost         prometheus.Counter
	redisEvicted     prometheus.Counter
	storeResets      prometheus.Counter
	rateLimited      *prometheus.CounterVec
	rateWait         *prometheus.HistogramVec
	rateFallback     prometheus.Counter

	// storeState is the StoreStatus value, swapped by every store call.
	storeState atomic.Value
	// ledger is what TrackLedger was given; nil until then.
	ledger atomic.Pointer[func() (int, int64)]
	// breakerOpen is what the breaker gauge reads; nil: no breaker, 0.
	breakerOpen atomic.Pointer[func() bool]
}

var _ ports.Observer = (*Metrics)(nil)

// New returns a Metrics on a fresh registry, which also carries the Go
// runtime and process collectors. Every store operation is exported at 0
// from the start, and every (channel, outcome) pair of ports.Outcomes once
// KnowChannels names the channels: a rate() over a series that appears only
// at its first increment misses that increment.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.notifications = m.counterVec("notifications_total",
		"Notifications the domain finished, by channel and outcome (sent, duplicate, failed_retryable, failed_permanent, unknown, conflict, recipient_opted_out, stale).",
		"channel", "outcome")
	m.unknown = m.counterVec("outcome_unknown_total",
		"Sends whose outcome was unknown (no answer after the request was written, or a gateway answering for the provider), by channel: each is reconciled with the provider, or follows UNKNOWN_OUTCOME_POLICY.",
		"channel")
	m.reconciliations = m.counterVec("reconciliations_total",
		"Providers asked whether a send of unknown outcome went out, by channel and result (delivered, not_delivered, cannot_tell).",
		"channel", "result")
	m.duplicates = m.counter("duplicates_suppressed_total",
		"Replayed notifications not sent because the idempotency store held a sent record, or this worker had delivered them and still owed the record.")
	m.storeUnavailable = m.counterVec("store_unavailable_total",
		"Idempotency store calls that failed or timed out, by operation (claim, record, release), including those refused by an open circuit breaker; calls the worker cancelled itself (shutdown) are not counted.",
		"operation")
	m.deadLettered = m.counterVec("records_dead_lettered_total",
		"Records written to the dead letter topic, by source topic and kind (permanent, retryable).",
		"topic", "kind")
	m.storeDuration = m.histogramVec("store_call_duration_seconds",
		"Latency of each idempotency store call, by operation (claim, record, release).",
		storeBuckets, "operation")
	m.sendDuration = m.histogramVec("send_duration_seconds",
		"Latency of each provider call, by channel, whatever its result.",
		sendBuckets, "channel")
	m.lag = m.gaugeVec("consumer_lag",
		"Records between a partition's high-water mark and the group's committed offset (what a restart would replay), read from the broker every few seconds for each partition this worker holds, whether or not records finish; 0 once this worker gives the partition up, so sum across replicas with max by (topic, partition).",
		"topic", "partition")
	m.panics = m.counter("handler_panics_total",
		"Records whose handling panicked (each is dead-lettered as permanent).")
	m.abandoned = m.gauge("handlers_abandoned",
		"Handler calls given up on at a rebalance or shutdown that are still running, each holding one of MAX_IN_FLIGHT slots; at MAX_IN_FLIGHT the worker is wedged and /healthz fails.")
	m.retries = m.counterVec("retries_total",
		"Retries of a record the consumer scheduled, by source topic and the kind of the failure that caused them (retryable; unavailable: a dependency is down; paced: waiting for the sender's pace, or for the next ask about a send of unknown outcome).",
		"topic", "kind")
	m.owedLost = m.counter("owed_records_lost_total",
		"Sent records lost with the worker at shutdown: still owed to the idempotency store after its final attempt at them, or whose sends were still under way then (or ended after it, owing their record): a replay of each is sent again unless the store holds its record.")
	m.redisEvicted = m.counter("redis_evicted_keys_total",
		"Keys the idempotency store's Redis evicted (INFO evicted_keys on every primary, read every minute) since this worker started watching: anyone's keys, Redis does not say whose; with an evicting maxmemory-policy (accepted by IDEMPOTENCY_ALLOW_EVICTION), sent records among them.")
	m.storeResets = m.counter("idempotency_store_resets_total",
		"Times this worker found the idempotency store's Redis restarted without its data (a primary's new run_id, and the store's marker keys gone): replays of notifications sent before it within IDEMPOTENCY_TTL are sent again.")
	m.rateLimited = m.counterVec("rate_limited_total",
		"Sends the provider refused for its sender's pace (Twilio 429, 20429, 21611), by channel: nothing was sent, the sender is paused for the wait the provider asked, and the record is tried again later without spending its retries.",
		"channel")
	m.rateWait = m.histogramVec("rate_limit_wait_seconds",
		"How long a notification waited for its sender's turn (SMS_RATE_LIMIT, EMAIL_RATE_LIMIT) before its send, by channel; a notification without a turn within the wait allowed is not counted here (its record waits and is tried again).",
		[]float64{0, .01, .05, .1, .25, .5, 1, 2.5, 5}, "channel")
	m.rateFallback = m.counter("rate_limit_fallback_total",
		"Times the fleet-wide rate limiter (Redis) could not answer and this replica paced its senders by its share of each limit (the limit divided by KAFKA_EXPECTED_REPLICAS) for a cool-off: at most about one a second while Redis is down.")
	m.buildInfo = m.gaugeVec("build_info",
		"Always 1: the worker's version, the VCS revision it was built from, and the Go version that built it.",
		"version", "revision", "go_version")
	m.storeState.Store(StoreUnknown)
	m.registerFuncs()
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.SetVersion("")
	m.exposeZeros()
	return m
}

// counter, gauge, counterVec, gaugeVec and histogramVec make a metric
// named Namespace_name with help (and the labels, in the order the
// With* calls give their values; the buckets, in seconds) and register it
// on m's registry: a name registered twice panics, as New's callers
// cannot recover from it.
func (m *Metrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
	m.reg.MustRegister(g)
	return g
}

func (m *Metrics) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	m.reg.MustRegister(c)
	return c
}

func (m *Metrics) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	m.reg.MustRegister(g)
	return g
}

func (m *Metrics) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	m.reg.MustRegister(h)
	return h
}

// registerFuncs registers the metrics read from the worker when scraped:
// the ledger's counts and the breaker's state.
func (m *Metrics) registerFuncs() {
	ledgerOwed := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "ledger_owed",
		Help: "Notifications this worker delivered whose sent record the store has not taken yet; it writes them when the store answers again, and suppresses their replays meanwhile.",
	}, func() float64 { owed, _ := m.ledgerCounts(); return float64(owed) })
	ledgerRefusals := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: Namespace, Name: "ledger_refusals_total",
		Help: "Attempts at a record refused because the ledger was full (IDEMPOTENCY_LEDGER_SIZE sent records owed to the store): nothing of the record was sent, and it is tried again, without spending its retries, until the store takes the owed records.",
	}, func() float64 { _, refused := m.ledgerCounts(); return float64(refused) })
	breaker := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "store_breaker_open",
		Help: "1 while the circuit breaker in front of the idempotency store refuses calls, else 0 (also when there is no breaker).",
	}, func() float64 {
		if open := m.breakerOpen.Load(); open != nil && (*open)() {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(ledgerOwed, ledgerRefusals, breaker)
}

// exposeZeros creates every series with known labels at zero, so a rate or
// an alert has a series to read before the first event.
func (m *Metrics) exposeZeros() {
	for _, op := range []string{OpClaim, OpRecord, OpRelease} {
		m.storeUnavailable.WithLabelValues(op)
		m.storeDuration.WithLabelValues(op)
	}
}

// OwedRecordsLost counts n sent records the worker shut down still owing
// to the store, or whose sends were still under way (the domain's
// Config.OwedLost). It is incremented as the process exits: a scrape sees
// it only if one comes before the exit.
func (m *Metrics) OwedRecordsLost(n int) { m.owedLost.Add(float64(n)) }

// RateLimited counts a send on ch the provider refused for its sender's
// pace (the domain's Config.RateLimited).
func (m *Metrics) RateLimited(ch ports.Channel) { m.rateLimited.WithLabelValues(string(ch)).Inc() }

// RateWaited observes how long a send on ch waited for its sender's turn
// (the domain's Config.RateWaited).
func (m *Metrics) RateWaited(ch ports.Channel, d time.Duration) {
	m.rateWait.WithLabelValues(string(ch)).Observe(d.Seconds())
}

// RateLimitFallback counts one failure of the fleet-wide rate limiter,
// after which this replica paces by its share.
func (m *Metrics) RateLimitFallback() { m.rateFallback.Inc() }

// TrackLedger exports what counts reports (the domain's Service.Owed): the
// owed records, and the attempts refused for a full ledger. A later call
// replaces an earlier one, so one Metrics can follow the workers that use it
// in turn.
func (m *Metrics) TrackLedger(counts func() (owed int, refused int64)) { m.ledger.Store(&counts) }

func (m *Metrics) ledgerCounts() (int, int64) {
	if f := m.ledger.Load(); f != nil {
		return (*f)()
	}
	return 0, 0
}

// Registry returns the registry the metrics live on, for a caller that
// wants to add collectors of its own or gather without HTTP.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// KnowChannels exports at 0 every series of each channel in chs: each
// outcome of ports.Outcomes, each reconciliation result, the unknown
// outcomes. The channels are the worker's, known once it is wired, hence
// not in New.
func (m *Metrics) KnowChannels(chs ...ports.Channel) {
	for _, ch := range chs {
		m.unknown.WithLabelValues(string(ch))
		m.rateLimited.WithLabelValues(string(ch))
		m.rateWait.WithLabelValues(string(ch))
		for _, r := range []ports.ReconcileResult{ports.ReconciledDelivered, ports.ReconciledNotDelivered, ports.ReconcileCannotTell} {
			m.reconciliations.WithLabelValues(string(ch), string(r))
		}
		for _, o := range ports.Outcomes {
			m.notifications.WithLabelValues(string(ch), string(o))
		}
	}
}

// KnowTopic exports the dead letter counters of topic at 0 for both kinds a
// record can be dead-lettered with, and its retry counters for every kind
// a retry can have, so an alert on their increase sees the first one. The
// topic is only known once configured, hence not in New.
func (m *Metrics) KnowTopic(topic string) {
	for _, k := range []ports.Kind{ports.Permanent, ports.Retryable} {
		m.deadLettered.WithLabelValues(topic, k.String())
	}
	for _, k := range []ports.Kind{ports.Retryable, ports.Unavailable, ports.Paced} {
		m.retries.WithLabelValues(topic, k.String())
	}
}

// SetVersion sets build_info's version label to version ("unknown" when
// empty; the binary's is set at link time). Its revision is the VCS
// revision the Go toolchain stamped into the binary ("unknown" without
// one, as in tests), go_version the toolchain's. It replaces the series
// New exported: there is one build_info series at a time.
func (m *Metrics) SetVersion(version string) {
	bi := buildinfo.Read(version)
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
}

// WatchBreaker makes store_breaker_open read open at every scrape: pass
// the breaker's "is the circuit open" check. Until it is called the gauge
// reads 0, as it does for a worker without a breaker.
func (m *Metrics) WatchBreaker(open func() bool) { m.breakerOpen.Store(&open) }

// RecordRetried counts a retry the consumer scheduled for a record of
// topic after a failure of kind.
func (m *Metrics) RecordRetried(topic string, kind ports.Kind) {
	m.retries.WithLabelValues(topic, kind.String()).Inc()
}

// RedisKeysEvicted counts n keys the store's Redis evicted (the Redis
// store's health events).
func (m *Metrics) RedisKeysEvicted(n int64) { m.redisEvicted.Add(float64(n)) }

// IdempotencyStoreReset counts one reset of the store's Redis (the Redis
// store's health events).
func (m *Metrics) IdempotencyStoreReset() { m.storeResets.Inc() }

// Observe implements ports.Observer: it counts how a notification ended.
func (m *Metrics) Observe(ch ports.Channel, o ports.Outcome) {
	m.notifications.WithLabelValues(string(ch), string(o)).Inc()
	switch o {
	case ports.OutcomeDuplicate:
		m.duplicates.Inc()
	case ports.OutcomeUnknown:
		m.unknown.WithLabelValues(string(ch)).Inc()
	}
}

// Reconciled counts one reconciliation with a provider, by its result.
func (m *Metrics) Reconciled(ch ports.Channel, r ports.ReconcileResult) {
	m.reconciliations.WithLabelValues(string(ch), string(r)).Inc()
}

// RecordDeadLettered counts a record written to the dead letter topic.
func (m *Metrics) RecordDeadLettered(topic string, kind ports.Kind) {
	m.deadLettered.WithLabelValues(topic, kind.String()).Inc()
}

// HandlerPanicked counts a record whose handling panicked. The topic is not
// a label: the contract (docs/runbook.md) exports one series.
func (m *Metrics) HandlerPanicked(string) { m.panics.Inc() }

// HandlersAbandoned adds delta to the abandoned handler calls still running.
func (m *Metrics) HandlersAbandoned(delta int) { m.abandoned.Add(float64(delta)) }

// ConsumerLag sets the lag of one partition. A negative lag (a high-water
// mark read before the record's own offset was) is reported as 0.
func (m *Metrics) ConsumerLag(topic string, partition int32, lag int64) {
	m.lag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(max(lag, 0)))
}

// StoreStatus returns StoreUnknown, StoreOK or StoreFailing, from the latest
// call through a store returned by InstrumentStore. It is the signal a
// readiness body shows: a store outage does not make the worker unready (it
// fails open), but the operator should see it.
func (m *Metrics) StoreStatus() string { return m.storeState.Load().(string) }

// InstrumentStore returns s measured: the latency of every call, and the
// calls that failed. A call that failed because its caller cancelled it
// (shutdown) says nothing about the store and is neither counted as
// unavailable nor changes StoreStatus; one that ran out of its deadline is
// the store being slow, and counts.
func (m *Metrics) InstrumentStore(s ports.IdempotencyStore) ports.IdempotencyStore {
	return &instrumentedStore{next: s, m: m, claim: m.storeOp(OpClaim), record: m.storeOp(OpRecord), release: m.storeOp(OpRelease)}
}

type instrumentedStore struct {
	next                   ports.IdempotencyStore
	m                      *Metrics
	claim, record, release storeOp
}

// storeOp is the series of one store operation, looked up once.
type storeOp struct {
	took   prometheus.Observer
	failed prometheus.Counter
}

func (m *Metrics) storeOp(op string) storeOp {
	return storeOp{took: m.storeDuration.WithLabelValues(op), failed: m.storeUnavailable.WithLabelValues(op)}
}

func (s *instrumentedStore) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	start := time.Now()
	c, err := s.next.Claim(ctx, key, token, digest, sender, ttl)
	s.m.storeCall(ctx, s.claim, start, err)
	return c, err
}

func (s *instrumentedStore) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	start := time.Now()
	err := s.next.Record(ctx, key, r, ttl)
	s.m.storeCall(ctx, s.record, start, err)
	return err
}

func (s *instrumentedStore) Release(ctx context.Context, key, token string) error {
	start := time.Now()
	err := s.next.Release(ctx, key, token)
	s.m.storeCall(ctx, s.release, start, err)
	return err
}

func (m *Metrics) storeCall(ctx context.Context, op storeOp, start time.Time, err error) {
	op.took.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		m.storeState.Store(StoreOK)
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller gave up: not the store's failure.
	default:
		op.failed.Inc()
		m.storeState.Store(StoreFailing)
	}
}

// InstrumentNotifier returns n measured: the latency of every Send on
// channel ch, whatever its result. Outcomes are counted by Observe, where
// the domain has classified them.
func (m *Metrics) InstrumentNotifier(ch ports.Channel, n ports.Notifier) ports.Notifier {
	return &instrumentedNotifier{next: n, hist: m.sendDuration.WithLabelValues(string(ch))}
}

type instrumentedNotifier struct {
	next ports.Notifier
	hist prometheus.Observer
}

func (n *instrumentedNotifier) Send(ctx context.Context, msg ports.Message) (ports.Receipt, error) {
	start := time.Now()
	r, err := n.next.Send(ctx, msg)
	n.hist.Observe(time.Since(start).Seconds())
	return r, err
}
