package main

import (
	"cmp"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/httpapi"
	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// embeddedPartitions is the partition count of the embedded broker's topics:
// enough for key-ordered concurrency and a rebalance to be visible.
const embeddedPartitions = 4

// httpShutdownTimeout bounds how long Close waits for a scrape or a probe
// in progress; they take milliseconds, and Close must not hang on a client.
const httpShutdownTimeout = 5 * time.Second

// The consumer's state, as /readyz shows it.
const (
	consumerAssigned = "assigned" // in the group, holding partitions: ready
	consumerSpare    = "spare"    // in the group, given no partition (more replicas than partitions): ready
	consumerJoining  = "joining"  // running, not in the group yet, or between sessions of a rebalance: not ready
	consumerStopped  = "stopped"  // Run not started, or returned
	consumerWedged   = "wedged"   // hung handler calls stop the worker: not live
)

// storeOpenCircuit is /readyz's "store" while the circuit breaker refuses
// calls; otherwise it shows prometheus.StoreStatus.
const storeOpenCircuit = "open-circuit"

// Main is the worker: Open builds the adapters the configuration names and
// starts the HTTP endpoints, Run consumes until its context is done, Close
// stops the endpoints and releases what Open built. The demo and the
// end-to-end tests use it as main does.
type Main struct {
	// Config comes from config.LoadWorker, which resolved the adapter of
	// every port and checked the whole; Open refuses one whose Adapters
	// are not resolved.
	Config config.Config
	// Stdout receives the JSON logs and the console notifier's lines.
	Stdout io.Writer
	// Deps gives what Open would otherwise build from Config.
	Deps Deps

	logger   *slog.Logger
	metrics  *prometheus.Metrics
	channels []route           // the rows of channels this worker offers
	adapters map[string]string // what was built for each port, for the start-up log
	tracer   *otel.Tracer      // nil: tracing off
	breaker  *breaker.Breaker  // nil without Redis
	consumer *kafka.Consumer
	kafka    kafka.Config // Kafka's settings; once Open built the consumer, its configuration, for Run to reach the brokers with
	handler  ports.Handler
	http     *httpapi.Server // nil when HTTP_ADDR is off
	debug    string          // the debug server's address; "" when DEBUG_ADDR is empty
	running  atomic.Bool     // Run is consuming
	// policy is the record policy the consumer runs handler behind.
	policy []ports.Middleware
	// stopping is when Run's context was done (SIGTERM): the start of the
	// shutdown SHUTDOWN_TIMEOUT bounds. Zero until then.
	stopping atomic.Pointer[time.Time]
	// startBy is when STARTUP_TIMEOUT from Open's start ends: reach gives
	// up on a dependency then.
	startBy time.Time
	closers []func()
}

// Deps are what a caller gives Main instead of having Open build it from
// Config: the demo and the end-to-end tests pass them. Every field is
// optional; nil means built.
type Deps struct {
	// Logger replaces the logger built from LOG_LEVEL and LOG_FORMAT.
	Logger *slog.Logger
	// Store replaces the store IDEMPOTENCY_STORE names. The demo passes one
	// store to two workers: it stands in for Redis, which outlives a
	// restart.
	Store ports.IdempotencyStore
	// Notifiers replace, per channel, the notifier its variable
	// (SMS_NOTIFIER, EMAIL_NOTIFIER) names.
	Notifiers map[ports.Channel]ports.Notifier
	// Metrics replaces a fresh set. Tests pass one to two workers in turn,
	// as they pass one Store, to read counts that span a restart.
	Metrics *prometheus.Metrics
	// Observer is told how each notification ended, besides Metrics.
	Observer ports.Observer
	// TracerProvider replaces the tracing the configuration asks for (OTLP
	// export when OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, else none). Tests pass one
	// that keeps the spans in memory.
	TracerProvider trace.TracerProvider
}

// Open builds every adapter and the domain service, each store and notifier
// measured by the metrics, and serves /healthz, /readyz and /metrics on
// Config.HTTPAddr (unless it is empty), and net/http/pprof on
// Config.DebugAddr (only when it is set). /readyz answers 503 until Run has
// joined the group. It refuses a Config whose settings do not combine
// (config.Config.Check: a *config.Error, as from LoadWorker), and returns
// a *config.Error too for what it finds misconfigured only now (a port in
// use, templates that lack a provider channel's text, a Redis that evicts).
// It tries Redis until it answers, for up to STARTUP_TIMEOUT (reach: a
// *startError when it does not); Kafka is Run's. On error, what was built
// so far is closed by Close.
func (m *Main) Open(ctx context.Context) error {
	cfg := m.Config
	if err := cfg.Check(); err != nil {
		return err
	}
	m.startBy = time.Now().Add(cfg.StartupTimeout)
	m.logger = cmp.Or(m.Deps.Logger, newLogger(m.Stdout, cfg.LogLevel, cfg.LogFormat))
	m.metrics = m.Deps.Metrics
	if m.metrics == nil {
		m.metrics = prometheus.New()
	}
	m.kafka = kafka.LoadSettings(cfg.Settings())
	m.metrics.KnowTopic(m.kafka.Topic)
	m.channels = active(cfg, m.Deps)
	m.metrics.KnowChannels(channelNames(m.channels)...)
	m.metrics.SetVersion(release())
	m.adapters = map[string]string{}
	chosen, err := choose(cfg, m.Deps)
	if err != nil {
		return err
	}
	m.tracer, err = m.openTracing(ctx)
	if err != nil {
		return err
	}
	// With tracing on, the lines about a record carry its trace and span.
	m.logger = m.tracer.Logger(m.logger)
	brokers, err := eventSources[chosen.Source](m)
	if err != nil {
		return err
	}
	m.adapters["event_source"] = chosen.Source
	store, notifiers, err := m.openPorts(ctx, chosen)
	if err != nil {
		return err
	}
	limiter, paces, err := m.openRateLimits(chosen.Store)
	if err != nil {
		return err
	}
	svc, err := m.openService(store, notifiers, limiter, paces)
	if err != nil {
		return err
	}
	if err := m.openConsumer(brokers, m.tracer.Handler(svc), 2*svc.LongestHandle()); err != nil {
		return err
	}
	if err := m.openHTTP(); err != nil {
		return err
	}
	if err := m.openDebug(); err != nil {
		return err
	}
	m.logger.Info("worker_starting", slog.String("version", release()), slog.Any("config", cfg), slog.Any("adapters", m.adapters))
	for _, name := range cfg.UnknownVariables {
		m.logger.Warn("config_unknown_variable", slog.String("variable", name),
			slog.String("reason", "no setting has this name, and it is ignored (the README's configuration table lists them)"))
	}
	if len(chosen.realBesideMemory) > 0 {
		m.logger.Warn("memory_store_with_real_providers", slog.String("store", chosen.Store), slog.Any("notifiers", chosen.realBesideMemory),
			slog.String("reason", "IDEMPOTENCY_STORE="+chosen.Store+" beside real providers: every sent record is forgotten at a restart, and a replay after it sends each notification again; for a test lab only"))
	}
	for _, name := range chosen.consoleShared {
		m.logger.Warn("console_notifier_shared_store", slog.String("variable", name),
			slog.String("reason", name+"=console with the "+chosen.Store+" store: this channel's notifications go to the console and their sent records into the shared store, where they suppress the real ones for IDEMPOTENCY_TTL; for a test lab only"))
	}
	if cfg.AllowInsecureTransport {
		m.logger.Warn("insecure_transport_allowed",
			slog.String("reason", "ALLOW_INSECURE_TRANSPORT=true: credentials may cross the network in clear text (http:// TWILIO_API_URL, OTLP headers to an http:// endpoint, SASL PLAIN without TLS); for a test lab only"))
	}
	return nil
}

// openPorts returns the store and the notifiers chosen, or given, each
// measured by the metrics and traced.
func (m *Main) openPorts(ctx context.Context, chosen choice) (ports.IdempotencyStore, map[ports.Channel]ports.Notifier, error) {
	store := m.Deps.Store
	if store == nil {
		var err error
		if store, err = stores[chosen.Store].open(m, ctx); err != nil {
			return nil, nil, err
		}
	}
	m.adapters["store"] = chosen.Store
	// Outside the breaker, so its refusals count as the store unavailable
	// (and show in the trace).
	store = m.tracer.Store(m.metrics.InstrumentStore(store))
	notifiers := map[ports.Channel]ports.Notifier{}
	for _, ch := range channels {
		if !slices.ContainsFunc(m.channels, func(c route) bool { return c.Name == ch.Name }) {
			m.adapters[string(ch.Name)] = "off (" + ch.Provider.Variable + " unset, and " + ch.Provider.Name + " not configured)"
			continue
		}
		name := chosen.Notifiers[ch.Name]
		notifier := m.Deps.Notifiers[ch.Name]
		if notifier == nil {
			var err error
			if notifier, err = m.openNotifier(ch, name); err != nil {
				return nil, nil, err
			}
		}
		notifiers[ch.Name] = notifier
		m.adapters[string(ch.Name)] = name
	}
	return store, notifiers, nil
}

// openService builds the domain service on store and notifiers, each
// notifier measured and traced, pacing the channels paces names on
// limiter; the reconcilers are taken before the decorators hide what else
// the adapters implement.
func (m *Main) openService(store ports.IdempotencyStore, notifiers map[ports.Channel]ports.Notifier, limiter ports.RateLimiter, paces map[ports.Channel]domain.Pace) (*domain.Service, error) {
	cfg := m.Config
	reconcilers := map[ports.Channel]ports.Reconciler{}
	for ch, n := range notifiers {
		if rc, ok := n.(ports.Reconciler); ok {
			reconcilers[ch] = rc
		}
		notifiers[ch] = m.tracer.Notifier(ch, m.adapters[string(ch)], m.metrics.InstrumentNotifier(ch, n))
	}
	var overrides fs.FS
	if cfg.TemplatesDir != "" {
		overrides = os.DirFS(cfg.TemplatesDir)
	}
	templates, err := domain.LoadTemplates(overrides, domainChannels(m.channels)...)
	if err != nil && cfg.TemplatesDir != "" {
		// LoadWorker checked them for the built-in channels only.
		return nil, m.configError("TEMPLATES_DIR", cfg.TemplatesDir, err.Error())
	}
	if err != nil {
		return nil, err
	}
	svc, err := domain.NewService(domain.Config{
		Store:             store,
		Notifiers:         notifiers,
		Templates:         templates,
		TTL:               cfg.Idempotency.TTL,
		MaxEventAge:       cfg.MaxEventAge,
		MaxEventAgeByType: cfg.MaxEventAgeByType,
		ClaimTTL:          cfg.Idempotency.ClaimTTL,
		StoreTimeout:      cfg.Idempotency.Timeout,
		SendTimeout:       cfg.SendTimeout,
		FailureMode:       domain.FailureMode(cfg.Idempotency.FailureMode),
		LedgerSize:        cfg.Idempotency.LedgerSize,
		Reconcilers:       reconcilers,
		ReconcileFor:      cfg.ReconcileTimeout,
		UnknownPolicy:     domain.UnknownPolicy(cfg.UnknownOutcomePolicy),
		Reconciled:        m.metrics.Reconciled,
		OwedLost:          m.metrics.OwedRecordsLost,
		RateLimiter:       limiter,
		Paces:             paces,
		RateWaited:        m.metrics.RateWaited,
		RateLimited:       m.metrics.RateLimited,
		Logger:            m.logger,
		Observer:          observers(m.metrics, m.Deps.Observer),
	})
	if err != nil {
		return nil, err
	}
	// The final attempt at the owed records takes what is left of
	// SHUTDOWN_TIMEOUT after the consumer let its records finish.
	m.closers = append(m.closers, func() { svc.CloseBy(m.shutdownDeadline()) })
	m.metrics.TrackLedger(svc.Owed)
	return svc, nil
}

// openConsumer builds the consumer on brokers and the handler it runs: h
// behind the record policy. A handler call running longer than stallAfter
// is hung, and /healthz says so.
func (m *Main) openConsumer(brokers []string, h ports.Handler, stallAfter time.Duration) error {
	// Kafka's own settings, with the worker's budgets, retry backoff and
	// shutdown time.
	c, kcfg := m.Config, m.kafka
	kcfg.Brokers, kcfg.StallAfter = brokers, stallAfter
	kcfg.MaxInFlight, kcfg.MaxBufferedBytes = c.MaxInFlight, c.MaxBufferedBytes
	kcfg.RetryInitialBackoff, kcfg.RetryMaxBackoff = c.RetryInitialBackoff, c.RetryMaxBackoff
	kcfg.ShutdownTimeout = c.ShutdownTimeout
	kcfg.Logger, kcfg.Metrics = m.logger, m.metrics
	var err error
	if m.consumer, err = kafka.NewConsumer(kcfg); err != nil {
		return err
	}
	m.kafka, m.handler = kcfg, h
	m.policy, err = m.recordPolicy(m.consumer.DeadLetterSink())
	return err
}

// openTracing returns the tracer the ports are decorated with: over
// Main.TracerProvider when set, else exporting over OTLP when the
// configuration names an endpoint, else nil (tracing off: nothing is
// decorated). The provider built here is shut down by Close, after the
// consumer, so the last records' spans are exported.
func (m *Main) openTracing(ctx context.Context) (*otel.Tracer, error) {
	switch url := m.Config.TracesURL(); {
	case m.Deps.TracerProvider != nil:
		m.adapters["tracing"] = "given"
		return otel.New(m.Deps.TracerProvider), nil
	case url != "":
		tp, err := otel.NewProvider(ctx, otel.ExportConfig{
			URL: url, ServiceName: m.Config.Tracing.ServiceName, ServiceVersion: release(), Logger: m.logger,
		})
		if err != nil {
			return nil, err
		}
		m.closers = append(m.closers, func() {
			if err := tp.Shutdown(); err != nil {
				m.logger.Warn("tracing_shutdown_incomplete", slog.String("error", err.Error()))
			}
		})
		m.adapters["tracing"] = "otlp " + url
		return otel.New(tp), nil
	}
	m.adapters["tracing"] = "off (OTEL_EXPORTER_OTLP_ENDPOINT is empty)"
	return nil, nil
}

// openHTTP starts /healthz, /readyz and /metrics on HTTP_ADDR, last in Open:
// the handlers read what Open built, and Close stops the server first.
func (m *Main) openHTTP() error {
	if m.Config.HTTPAddr == "" {
		m.adapters["http"] = "off (HTTP_ADDR is off: no probes, no /metrics)"
		return nil
	}
	h := httpapi.Handler(httpapi.Config{Ready: m.Ready, Live: m.Live, Status: m.status, Metrics: m.metrics.Handler()})
	srv, err := httpapi.Listen(m.Config.HTTPAddr, h, m.logger)
	if err != nil {
		return m.configError("HTTP_ADDR", m.Config.HTTPAddr, err.Error())
	}
	m.http = srv
	m.closers = append(m.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			m.logger.Warn("http_shutdown_incomplete", slog.String("error", err.Error()))
		}
	})
	m.adapters["http"] = "http://" + srv.Addr().String() + " (/healthz, /readyz, /metrics: prometheus)"
	return nil
}

// HTTPAddr returns the address the HTTP server is bound to, or "" when
// HTTP_ADDR is off or Open has not started it.
func (m *Main) HTTPAddr() string {
	if m.http == nil {
		return ""
	}
	return m.http.Addr().String()
}

// status is /readyz's body: what the consumer and the store are doing, and
// the lag of the partitions it holds, read from the broker. A
// store outage shows here without making the worker unready: it fails open.
func (m *Main) status() map[string]string {
	consumer := consumerStopped
	switch {
	case !m.Live():
		consumer = consumerWedged
	case m.Ready() && m.consumer.Assigned() > 0:
		consumer = consumerAssigned
	case m.Ready():
		consumer = consumerSpare
	case m.running.Load():
		consumer = consumerJoining
	}
	store := m.metrics.StoreStatus()
	if m.breaker != nil && m.breaker.State() == breaker.StateOpen {
		store = storeOpenCircuit
	}
	var lag int64
	if m.consumer != nil {
		lag = m.consumer.Lag()
	}
	return map[string]string{"consumer": consumer, "store": store, "lag": strconv.FormatInt(lag, 10)}
}

// Run tries the brokers until they answer, for what is left of
// STARTUP_TIMEOUT from Open's start (reach), then consumes until ctx is
// done, and returns once the consumer has committed what was handled. It
// fails only when the consumer cannot connect to the brokers: a
// *startError.
func (m *Main) Run(ctx context.Context) error {
	if m.consumer == nil {
		return errors.New("worker: Run before Open")
	}
	m.running.Store(true)
	defer m.running.Store(false)
	stopWatch := context.AfterFunc(ctx, func() {
		now := time.Now()
		m.stopping.Store(&now)
	})
	defer stopWatch()
	err := m.reach(ctx, "kafka", func(ctx context.Context) error { return kafka.Reach(ctx, m.kafka) })
	if err == nil {
		err = m.consumer.RunPolicy(ctx, m.handler, m.policy...)
	}
	var se *startError
	switch {
	case ctx.Err() != nil:
	case errors.As(err, &se):
		return err
	case err != nil:
		return &startError{Dependency: "kafka", Err: err, Attempts: 1}
	}
	m.logger.Info("worker_stopped")
	return nil
}

// configError is a setting found wrong once the worker used it: as bad
// configuration, with the problem against name, whose value was value.
func (m *Main) configError(name, value, reason string) *config.Error {
	return &config.Error{Problems: []config.Problem{{Var: name, Value: value, Reason: reason}}, LogFormat: m.Config.LogFormat}
}

// shutdownDeadline is when SHUTDOWN_TIMEOUT ends: counted from when Run's
// context was done, or from now when it never was (Run failed, or never ran).
func (m *Main) shutdownDeadline() time.Time {
	from := time.Now()
	if t := m.stopping.Load(); t != nil {
		from = *t
	}
	return from.Add(m.Config.ShutdownTimeout)
}

// Ready reports whether the worker is a member of its consumer group, with
// or without partitions, and is not wedged (kafka.Consumer.Ready): what a
// readiness probe asks, so that a replica beyond the partition count does
// not hold up a rollout or count against a PodDisruptionBudget.
func (m *Main) Ready() bool { return m.consumer != nil && m.consumer.Ready() }

// Live reports whether the worker can make progress: false once a handler
// call has hung for StallAfter, or calls abandoned at a rebalance or
// shutdown hold every MAX_IN_FLIGHT slot (see kafka.Consumer.Wedged), which
// only a restart is sure to fix.
func (m *Main) Live() bool { return m.consumer == nil || !m.consumer.Wedged() }

// Close releases everything Open built, in reverse order: the HTTP server
// first (letting a scrape in progress finish, for up to
// httpShutdownTimeout), the store and the embedded broker last.
func (m *Main) Close() {
	for i := len(m.closers) - 1; i >= 0; i-- {
		m.closers[i]()
	}
	m.closers = nil
}

// recordPolicy returns the record policy, the middlewares listed in the
// order a record meets them, the handler last. The consumer only delivers,
// orders, commits and holds one of its MAX_IN_FLIGHT slots for each call of
// the handler (each attempt): what a failure means is decided here.
func (m *Main) recordPolicy(sink ports.DeadLetterSink) ([]ports.Middleware, error) {
	c := m.Config
	pcfg := policy.Config{
		MaxRecordBytes:      c.MaxRecordBytes,
		RetryMaxAttempts:    c.RetryMaxAttempts,
		RetryInitialBackoff: c.RetryInitialBackoff,
		RetryMaxBackoff:     c.RetryMaxBackoff,
		Logger:              m.logger,
		Metrics:             m.metrics,
	}
	if err := pcfg.Validate(); err != nil {
		return nil, err
	}
	return []ports.Middleware{
		// With tracing on, the record's trace context, for every line
		// logged about it below, between attempts too.
		m.tracer.Delivery,
		// What the middlewares below give up on is written to the dead
		// letter topic, and then the record is finished.
		policy.DeadLetter(sink, pcfg),
		// A record over MAX_RECORD_BYTES is never handled.
		policy.MaxBytes(pcfg),
		// A panic is a permanent failure, not a crash.
		policy.Recover(pcfg),
		// Retryable failures are tried RETRY_MAX_ATTEMPTS times, Unavailable
		// and Paced ones for as long as the partition is held, all carrying
		// one DeliveryID.
		policy.Retry(pcfg),
	}, nil
}

func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// observers returns an Observer telling each non-nil one in turn.
func observers(obs ...ports.Observer) ports.Observer {
	return multiObserver(slices.DeleteFunc(obs, func(o ports.Observer) bool { return o == nil }))
}

type multiObserver []ports.Observer

func (all multiObserver) Observe(ch ports.Channel, o ports.Outcome) {
	for _, x := range all {
		x.Observe(ch, o)
	}
}
