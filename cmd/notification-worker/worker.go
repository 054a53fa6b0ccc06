package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/httpapi"
	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/otel"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/domain"
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
	consumerAssigned   = "assigned"   // in the group, holding partitions: ready
	consumerUnassigned = "unassigned" // running, but joining, rebalancing, or given no partition
	consumerStopped    = "stopped"    // Run not started, or returned
	consumerWedged     = "wedged"     // hung handler calls stop the worker: not live
)

// storeOpenCircuit is /readyz's "store" while the circuit breaker refuses
// calls; otherwise it shows prometheus.StoreStatus.
const storeOpenCircuit = "open-circuit"

// Main is the worker: Open builds the adapters the configuration names and
// starts the HTTP endpoints, Run consumes until its context is done, Close
// stops the endpoints and releases what Open built. The demo and the
// end-to-end tests use it as main does.
type Main struct {
	Config config.Config
	// Stdout receives the JSON logs and, where no provider is configured,
	// the console notifier's lines.
	Stdout io.Writer
	// Logger overrides the logger built from Config (nil: built).
	Logger *slog.Logger
	// Store overrides the store built from Config. The demo passes one store
	// to two workers: it stands in for Redis, which outlives a restart.
	Store ports.IdempotencyStore
	// Notifiers overrides the notifiers built from Config, per channel.
	Notifiers map[ports.Channel]ports.Notifier
	// Observer and ConsumerMetrics, when set, are told what the domain and
	// the consumer report, besides the worker's own metrics.
	Observer        ports.Observer
	ConsumerMetrics kafka.Metrics
	// Metrics overrides the metrics built by Open (nil: a fresh set). Tests
	// pass one to two workers in turn, as they pass one Store, to read
	// counts that span a restart.
	Metrics *prometheus.Metrics
	// TracerProvider overrides the tracing the configuration asks for (nil:
	// OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, else none). Tests pass one
	// that keeps the spans in memory.
	TracerProvider trace.TracerProvider

	logger   *slog.Logger
	metrics  *prometheus.Metrics
	breaker  *breaker.Breaker // nil without Redis
	consumer *kafka.Consumer
	handler  ports.Handler
	http     *httpapi.Server // nil when HTTP_ADDR is off
	running  atomic.Bool     // Run is consuming
	closers  []func()
}

// Open builds every adapter and the domain service, each store and notifier
// measured by the metrics, and serves /healthz, /readyz and /metrics on
// Config.HTTPAddr (unless it is empty). /readyz answers 503 until Run has
// joined the group. On error, what was built so far is closed by Close; a
// port in use is such an error.
func (m *Main) Open(ctx context.Context) error {
	cfg := m.Config
	m.logger = m.Logger
	if m.logger == nil {
		m.logger = newLogger(m.Stdout, cfg.LogLevel, cfg.LogFormat)
	}
	wired := map[string]string{}
	m.metrics = m.Metrics
	if m.metrics == nil {
		m.metrics = prometheus.New()
	}
	m.metrics.KnowTopic(cfg.Kafka.Topic)
	m.metrics.SetVersion(version)
	tracer, err := m.openTracing(ctx, wired)
	if err != nil {
		return err
	}

	brokers := cfg.Kafka.Brokers
	if len(brokers) == 0 {
		emb, err := kafka.StartEmbedded(embeddedPartitions, cfg.Kafka.Topic, cfg.Kafka.DLQTopic)
		if err != nil {
			return err
		}
		m.closers = append(m.closers, emb.Close)
		brokers = emb.Brokers()
		wired["kafka"] = "embedded in-process broker (KAFKA_BROKERS is empty; nothing survives a restart)"
	} else {
		wired["kafka"] = "sarama"
	}

	store, err := m.openStore(ctx, wired)
	if err != nil {
		return err
	}
	// Outside the breaker, so its refusals count as the store unavailable
	// (and show in the trace).
	store = tracer.Store(m.metrics.InstrumentStore(store))
	notifiers, err := m.openNotifiers(wired)
	if err != nil {
		return err
	}
	// The providers that can be asked what they accepted, taken before the
	// decorators hide what else the adapters implement.
	reconcilers := map[ports.Channel]ports.Reconciler{}
	for ch, n := range notifiers {
		if rc, ok := n.(ports.Reconciler); ok {
			reconcilers[ch] = rc
		}
		notifiers[ch] = tracer.Notifier(ch, wired[string(ch)], m.metrics.InstrumentNotifier(ch, n))
	}
	templates, err := domain.LoadTemplates(cfg.TemplatesDir)
	if err != nil {
		return err
	}
	svc, err := domain.NewService(domain.Config{
		Store:         store,
		Notifiers:     notifiers,
		Templates:     templates,
		TTL:           cfg.Idempotency.TTL,
		ClaimTTL:      cfg.Idempotency.ClaimTTL,
		StoreTimeout:  cfg.Idempotency.Timeout,
		SendTimeout:   cfg.SendTimeout,
		FailureMode:   domain.FailureMode(cfg.Idempotency.FailureMode),
		LedgerSize:    cfg.Idempotency.LedgerSize,
		Reconcilers:   reconcilers,
		ReconcileFor:  cfg.ReconcileTimeout,
		UnknownPolicy: domain.UnknownPolicy(cfg.UnknownOutcomePolicy),
		Reconciled:    m.metrics.Reconciled,
		Logger:        m.logger,
		Observer:      observers(m.metrics, m.Observer),
	})
	if err != nil {
		return err
	}
	m.handler = tracer.Handler(svc)
	m.closers = append(m.closers, svc.Close)
	m.metrics.TrackLedger(svc.Owed)

	kcfg, err := m.kafkaConfig(brokers)
	if err != nil {
		return err
	}
	// Twice the longest a record can take with every dependency at its
	// timeout (about 5 minutes by default): a call running that long is
	// hung, and /healthz says so.
	kcfg.StallAfter = 2 * svc.LongestHandle()
	m.consumer, err = kafka.NewConsumer(kcfg)
	if err != nil {
		return err
	}

	if err := m.openHTTP(wired); err != nil {
		return err
	}
	m.logger.Info("worker_starting", slog.String("version", version), slog.Any("config", cfg), slog.Any("adapters", wired))
	if cfg.AllowInsecureTransport {
		m.logger.Warn("insecure_transport_allowed",
			slog.String("reason", "ALLOW_INSECURE_TRANSPORT=true: credentials may cross the network in clear text (http:// TWILIO_API_URL, SASL PLAIN without TLS); for a test lab only"))
	}
	return nil
}

// openTracing returns the tracer the ports are decorated with: over
// Main.TracerProvider when set, else exporting over OTLP when the
// configuration names an endpoint, else nil (tracing off: nothing is
// decorated). The provider built here is shut down by Close, after the
// consumer, so the last records' spans are exported.
func (m *Main) openTracing(ctx context.Context, wired map[string]string) (*otel.Tracer, error) {
	switch url := m.Config.TracesURL(); {
	case m.TracerProvider != nil:
		wired["tracing"] = "given"
		return otel.New(m.TracerProvider), nil
	case url != "":
		tp, err := otel.NewProvider(ctx, otel.ExportConfig{
			URL: url, ServiceName: m.Config.Tracing.ServiceName, ServiceVersion: version, Logger: m.logger,
		})
		if err != nil {
			return nil, err
		}
		m.closers = append(m.closers, func() {
			if err := tp.Shutdown(); err != nil {
				m.logger.Warn("tracing_shutdown_incomplete", slog.String("error", err.Error()))
			}
		})
		wired["tracing"] = "otlp " + url
		return otel.New(tp), nil
	}
	wired["tracing"] = "off (OTEL_EXPORTER_OTLP_ENDPOINT is empty)"
	return nil, nil
}

// openHTTP starts /healthz, /readyz and /metrics on HTTP_ADDR, last in Open:
// the handlers read what Open built, and Close stops the server first.
func (m *Main) openHTTP(wired map[string]string) error {
	if m.Config.HTTPAddr == "" {
		wired["http"] = "off (HTTP_ADDR is off: no probes, no /metrics)"
		return nil
	}
	h := httpapi.Handler(httpapi.Config{Ready: m.Ready, Live: m.Live, Status: m.status, Metrics: m.metrics.Handler()})
	srv, err := httpapi.Listen(m.Config.HTTPAddr, h, m.logger)
	if err != nil {
		return err
	}
	m.http = srv
	m.closers = append(m.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			m.logger.Warn("http_shutdown_incomplete", slog.String("error", err.Error()))
		}
	})
	wired["http"] = "http://" + srv.Addr().String() + " (/healthz, /readyz, /metrics: prometheus)"
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
	case m.Ready():
		consumer = consumerAssigned
	case m.running.Load():
		consumer = consumerUnassigned
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

// Run consumes until ctx is done, then returns once the consumer has
// committed what was handled.
func (m *Main) Run(ctx context.Context) error {
	if m.consumer == nil {
		return errors.New("worker: Run before Open")
	}
	m.running.Store(true)
	err := m.consumer.Run(ctx, m.handler)
	m.running.Store(false)
	m.logger.Info("worker_stopped")
	return err
}

// Ready reports whether the worker has joined its group and holds partitions.
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

func (m *Main) openStore(ctx context.Context, wired map[string]string) (ports.IdempotencyStore, error) {
	cfg := m.Config.Idempotency
	switch {
	case m.Store != nil:
		wired["store"] = "given"
		return m.Store, nil
	case cfg.RedisURL == "":
		wired["store"] = "memory (REDIS_URL is empty; forgets on restart)"
		return memory.New(nil), nil
	}
	// The breaker is the one layer that decides Redis is unavailable, and
	// it bounds what the handlers leave unanswered on a server that went
	// silent; the store's ring is sized to hold that bound, so no call
	// waits for a free slot past its deadline (see redis.Config).
	rcfg := redis.Config{URL: cfg.RedisURL.Reveal(), KeyPrefix: cfg.KeyPrefix, Timeout: cfg.Timeout, KeepAbandoned: cfg.TTL}
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		return nil, err
	}
	// The callers: MAX_IN_FLIGHT handlers, each making one store call at a
	// time, and the domain's one background writer of owed records.
	bcfg, maxUnanswered := breaker.ForCallers(
		breaker.Config{Failures: cfg.BreakerFailures, Cooldown: cfg.BreakerCooldown},
		m.Config.Kafka.MaxInFlight+1, unansweredFor)
	if maxUnanswered >= redis.MaxRing {
		return nil, fmt.Errorf("MAX_IN_FLIGHT=%d with IDEMPOTENCY_BREAKER_COOLDOWN=%v and the Redis URL's write_timeout (a command may wait %v for its answer) would leave up to %d commands awaiting Redis; the store holds fewer than %d: lower MAX_IN_FLIGHT or write_timeout, or raise the cooldown",
			m.Config.Kafka.MaxInFlight, cfg.BreakerCooldown, unansweredFor, maxUnanswered, redis.MaxRing)
	}
	rcfg.MaxUnanswered = maxUnanswered
	rs, err := redis.New(rcfg)
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, rs.Close)
	bcfg.Probe = rs.Ping
	b := breaker.New(rs, bcfg)
	m.closers = append(m.closers, b.Close)
	m.breaker = b
	m.metrics.WatchBreaker(func() bool { return b.State() == breaker.StateOpen })
	wired["store"] = "redis, behind a circuit breaker"
	return b, nil
}

func (m *Main) openNotifiers(wired map[string]string) (map[ports.Channel]ports.Notifier, error) {
	cfg := m.Config
	var con ports.Notifier = console.New(m.Stdout)
	n := map[ports.Channel]ports.Notifier{ports.ChannelSMS: con, ports.ChannelEmail: con}
	wired["sms"], wired["email"] = "console", "console"
	if cfg.TwilioEnabled() {
		tw, err := twilio.New(twilio.Config{
			AccountSID:          cfg.Twilio.AccountSID,
			AuthToken:           cfg.Twilio.AuthToken.Reveal(),
			From:                cfg.Twilio.FromNumber,
			MessagingServiceSID: cfg.Twilio.MessagingServiceSID,
			APIURL:              cfg.Twilio.APIURL,
			Timeout:             cfg.SendTimeout,
			ListLag:             cfg.Twilio.ListLag,
			// At most one SMS per record in flight: a connection each.
			MaxConns: cfg.Kafka.MaxInFlight,
		})
		if err != nil {
			return nil, err
		}
		n[ports.ChannelSMS], wired["sms"] = tw, "twilio"
	}
	if cfg.SMTPEnabled() {
		sm, err := smtp.New(smtp.Config{
			Host:      cfg.SMTP.Host,
			Port:      cfg.SMTP.Port,
			Username:  cfg.SMTP.Username,
			Password:  cfg.SMTP.Password.Reveal(),
			From:      cfg.SMTP.From,
			TLSPolicy: cfg.SMTP.TLSPolicy,
			Timeout:   cfg.SendTimeout,
		})
		if err != nil {
			return nil, err
		}
		n[ports.ChannelEmail], wired["email"] = sm, "smtp"
	}
	for ch, given := range m.Notifiers {
		n[ch], wired[string(ch)] = given, "given"
	}
	return n, nil
}

func (m *Main) kafkaConfig(brokers []string) (kafka.Config, error) {
	k := m.Config.Kafka
	kcfg := kafka.Config{
		Brokers:             brokers,
		Topic:               k.Topic,
		GroupID:             k.GroupID,
		DLQTopic:            k.DLQTopic,
		MaxInFlight:         k.MaxInFlight,
		MaxRecordBytes:      k.MaxRecordBytes,
		MaxBufferedBytes:    k.MaxBufferedBytes,
		RetryMaxAttempts:    k.RetryMaxAttempts,
		RetryInitialBackoff: k.RetryInitialBackoff,
		RetryMaxBackoff:     k.RetryMaxBackoff,
		ShutdownTimeout:     m.Config.ShutdownTimeout,
		SASLMechanism:       k.SASLMechanism,
		SASLUsername:        k.SASLUsername,
		SASLPassword:        k.SASLPassword.Reveal(),
		RebalanceStrategy:   k.RebalanceStrategy,
		GroupInstanceID:     k.GroupInstanceID,
		SessionTimeout:      k.SessionTimeout,
		Logger:              m.logger,
		Metrics:             consumerMetrics(m.metrics, m.ConsumerMetrics),
	}
	tlsCfg, err := kafkaTLS(m.Config)
	if err != nil {
		return kafka.Config{}, err
	}
	kcfg.TLS = tlsCfg
	return kcfg, nil
}

// kafkaTLS returns the TLS settings KAFKA_TLS and KAFKA_TLS_CA_FILE ask for,
// or nil for plaintext.
func kafkaTLS(cfg config.Config) (*tls.Config, error) {
	if !cfg.Kafka.TLS {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := cfg.Kafka.TLSCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("KAFKA_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("KAFKA_TLS_CA_FILE %s: no PEM certificate in it", f)
		}
		t.RootCAs = pool
	}
	return t, nil
}

func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// observers returns an Observer telling each non-nil one in turn.
func observers(obs ...ports.Observer) ports.Observer { return multiObserver(nonNil(obs)) }

type multiObserver []ports.Observer

func (all multiObserver) Observe(ch ports.Channel, o ports.Outcome) {
	for _, x := range all {
		x.Observe(ch, o)
	}
}

// consumerMetrics returns a kafka.Metrics telling each non-nil one in turn.
func consumerMetrics(ms ...kafka.Metrics) kafka.Metrics { return multiMetrics(nonNil(ms)) }

// nonNil returns the elements of xs that are not nil interfaces.
func nonNil[T comparable](xs []T) []T {
	var zero T
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		if x != zero {
			out = append(out, x)
		}
	}
	return out
}

type multiMetrics []kafka.Metrics

func (all multiMetrics) RecordDeadLettered(topic string, kind ports.Kind) {
	for _, m := range all {
		m.RecordDeadLettered(topic, kind)
	}
}

func (all multiMetrics) HandlerPanicked(topic string) {
	for _, m := range all {
		m.HandlerPanicked(topic)
	}
}

func (all multiMetrics) ConsumerLag(topic string, partition int32, lag int64) {
	for _, m := range all {
		m.ConsumerLag(topic, partition, lag)
	}
}

func (all multiMetrics) HandlersAbandoned(delta int) {
	for _, m := range all {
		m.HandlersAbandoned(delta)
	}
}

func (all multiMetrics) RecordRetried(topic string, kind ports.Kind) {
	for _, m := range all {
		m.RecordRetried(topic, kind)
	}
}
