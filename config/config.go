// Package config reads the worker's configuration from the environment once,
// at start, into a typed Config, so that no other package calls os.Getenv and
// a bad setting stops the worker before it consumes a single record.
//
// Reference is the one list of variables: Load takes its defaults from it and
// the README's configuration table is generated from it, so the code and the
// documentation cannot disagree.
package config

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Secret is a configuration value that must never reach a log line or an
// error message: a password, a token, a URL that may embed a password.
// Every way of printing it (fmt verbs, slog, encoding/json) shows "***";
// only Reveal returns the value, so handing it to a client is a deliberate,
// greppable act.
type Secret string

const masked = "***"

// Reveal returns the secret value itself, for the client that needs it.
func (s Secret) Reveal() string { return string(s) }

// String returns "***", or "" when the secret is empty, so a log line still
// tells an operator whether it was set.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return masked
}

// GoString masks the %#v form too, which would otherwise print the value
// as a Go literal.
func (s Secret) GoString() string { return fmt.Sprintf("config.Secret(%q)", s.String()) }

// LogValue implements slog.LogValuer with the masked form.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText masks the secret for encoding/json and every other text
// encoder, so a JSON dump of a Config is as safe as a log line.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Config is the worker's whole configuration. The zero value is not useful;
// get one from Load, which fills in every default and validates the result.
// Each field's comment names its variable; Reference has the defaults.
type Config struct {
	// Adapters names the adapter chosen for each port, as given; "" where
	// the variable is unset and its default depends on the others (the
	// worker's adapter registry resolves it and refuses a contradiction).
	Adapters struct {
		EventSource string // EVENT_SOURCE: "kafka" or "embedded"
		Store       string // IDEMPOTENCY_STORE: "", "redis" or "memory"
		SMS         string // SMS_NOTIFIER: "", "twilio" or "console"
		Email       string // EMAIL_NOTIFIER: "", "smtp" or "console"
		// Provided holds, by its Variable, the notifier of each channel
		// whose provider LoadWorker was given (ports.Provider): its
		// name, "console", or "" for a channel that is off.
		Provided map[string]string
	}
	Kafka struct {
		// Brokers is empty for the embedded in-process broker.
		Brokers             []string      // KAFKA_BROKERS
		Topic               string        // KAFKA_TOPIC
		GroupID             string        // KAFKA_GROUP_ID
		ClientID            string        // KAFKA_CLIENT_ID, HOSTNAME by default
		DLQTopic            string        // KAFKA_DLQ_TOPIC
		TLS                 bool          // KAFKA_TLS
		TLSCAFile           string        // KAFKA_TLS_CA_FILE
		SASLMechanism       string        // KAFKA_SASL_MECHANISM: "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
		SASLUsername        string        // KAFKA_SASL_USERNAME
		SASLPassword        Secret        // KAFKA_SASL_PASSWORD
		RebalanceStrategy   string        // KAFKA_REBALANCE_STRATEGY: cooperative-sticky, range or cooperative-sticky,range
		GroupInstanceID     string        // KAFKA_GROUP_INSTANCE_ID: "" for a dynamic member
		SessionTimeout      time.Duration // KAFKA_SESSION_TIMEOUT
		MaxInFlight         int           // MAX_IN_FLIGHT
		MaxRecordBytes      int           // MAX_RECORD_BYTES
		MaxBufferedBytes    int64         // MAX_BUFFERED_BYTES
		RetryMaxAttempts    int           // RETRY_MAX_ATTEMPTS
		RetryInitialBackoff time.Duration // RETRY_INITIAL_BACKOFF
		RetryMaxBackoff     time.Duration // RETRY_MAX_BACKOFF
		// ExpectedReplicas is how many replicas of the worker share the
		// group: each paces by its share of a rate limit while the
		// fleet's limiter (Redis) cannot answer.
		ExpectedReplicas int // KAFKA_EXPECTED_REPLICAS
	}
	// RateLimit paces each channel's sender, shared by every replica (on
	// the Redis store; on the memory store, per process). A Rate of 0: no
	// limit; otherwise the Limit is Valid.
	RateLimit struct {
		SMS   ports.Limit // SMS_RATE_LIMIT, SMS_RATE_BURST
		Email ports.Limit // EMAIL_RATE_LIMIT, EMAIL_RATE_BURST
	}
	// Idempotency holds the settings of whichever store is chosen.
	Idempotency struct {
		TTL             time.Duration // IDEMPOTENCY_TTL
		ClaimTTL        time.Duration // IDEMPOTENCY_CLAIM_TTL
		Timeout         time.Duration // IDEMPOTENCY_TIMEOUT
		FailureMode     string        // IDEMPOTENCY_FAILURE_MODE: "open" or "closed"
		BreakerFailures int           // IDEMPOTENCY_BREAKER_FAILURES
		BreakerCooldown time.Duration // IDEMPOTENCY_BREAKER_COOLDOWN
		LedgerSize      int           // IDEMPOTENCY_LEDGER_SIZE
	}
	// Redis holds the Redis store's settings (redis.Settings), as
	// redis.LoadSettings read and checked them.
	Redis struct {
		// URL is empty for another store. It is a Secret because a
		// redis:// URL may carry the password.
		URL             Secret // REDIS_URL
		MinReplicas     int    // IDEMPOTENCY_MIN_REPLICAS
		WaitAOF         bool   // IDEMPOTENCY_WAIT_AOF
		KeyFormat       string // IDEMPOTENCY_KEY_FORMAT: "compact" or "readable"
		CompactPrefix   string // IDEMPOTENCY_COMPACT_KEY_PREFIX
		KeyPrefix       string // IDEMPOTENCY_KEY_PREFIX
		ReadBothFormats bool   // IDEMPOTENCY_READ_BOTH_FORMATS
		AllowEviction   bool   // IDEMPOTENCY_ALLOW_EVICTION
		// SentinelAddrs and SentinelMaster are both set or both empty.
		SentinelAddrs    []string // REDIS_SENTINEL_ADDRS
		SentinelMaster   string   // REDIS_SENTINEL_MASTER
		SentinelUsername string   // REDIS_SENTINEL_USERNAME
		SentinelPassword Secret   // REDIS_SENTINEL_PASSWORD
	}
	// MaxEventAge and MaxEventAgeByType: MAX_EVENT_AGE, and
	// MAX_EVENT_AGE_OVERRIDES by event type (nil when unset).
	MaxEventAge       time.Duration
	MaxEventAgeByType map[string]time.Duration
	Twilio            struct {
		AccountSID          string        // TWILIO_ACCOUNT_SID
		AuthToken           Secret        // TWILIO_AUTH_TOKEN
		FromNumber          string        // TWILIO_FROM_NUMBER, E.164
		MessagingServiceSID string        // TWILIO_MESSAGING_SERVICE_SID
		APIURL              string        // TWILIO_API_URL, without a trailing slash
		ListLag             time.Duration // TWILIO_LIST_LAG
	}
	SMTP struct {
		// Host is empty when email goes to the console.
		Host      string // SMTP_HOST
		Port      int    // SMTP_PORT
		Username  string // SMTP_USERNAME
		Password  Secret // SMTP_PASSWORD
		From      string // SMTP_FROM, as given (display name allowed)
		TLSPolicy string // SMTP_TLS_POLICY: "mandatory", "opportunistic" or "none"
	}
	// AllowInsecureTransport lifts Load's refusal of clear-text credentials
	// (see ALLOW_INSECURE_TRANSPORT), for a test lab.
	AllowInsecureTransport bool // ALLOW_INSECURE_TRANSPORT
	// Tracing is OpenTelemetry's trace export, off unless an endpoint is
	// set. The exporter reads the other standard OTEL_EXPORTER_OTLP_*
	// variables (headers, timeout, compression, certificates) itself, and
	// the SDK OTEL_TRACES_SAMPLER and OTEL_RESOURCE_ATTRIBUTES.
	Tracing struct {
		Endpoint       string // OTEL_EXPORTER_OTLP_ENDPOINT: base URL, "/v1/traces" is added
		TracesEndpoint string // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: full URL, wins over Endpoint
		Protocol       string // OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf", the only one supported
		ServiceName    string // OTEL_SERVICE_NAME
		// Headers and TracesHeaders are read so that Load can refuse to
		// send them in clear text; the exporter reads them itself, from the
		// same environment, and TracesHeaders replaces Headers when both
		// are set.
		Headers       Secret // OTEL_EXPORTER_OTLP_HEADERS
		TracesHeaders Secret // OTEL_EXPORTER_OTLP_TRACES_HEADERS
	}
	SendTimeout time.Duration // SEND_TIMEOUT, per provider call
	// ReconcileTimeout and UnknownOutcomePolicy: RECONCILE_TIMEOUT,
	// UNKNOWN_OUTCOME_POLICY ("resend" or "dead_letter").
	ReconcileTimeout     time.Duration
	UnknownOutcomePolicy string
	ShutdownTimeout      time.Duration // SHUTDOWN_TIMEOUT
	StartupTimeout       time.Duration // STARTUP_TIMEOUT
	TemplatesDir         string        // TEMPLATES_DIR; empty: embedded templates only
	HTTPAddr             string        // HTTP_ADDR; empty (HTTP_ADDR=off) disables the HTTP server
	// DebugAddr is DEBUG_ADDR with a missing host made 127.0.0.1; empty:
	// no debug server.
	DebugAddr string
	// Hostname is HOSTNAME, the pod's name in Kubernetes.
	Hostname  string
	LogLevel  slog.Level // LOG_LEVEL
	LogFormat string     // LOG_FORMAT: "json" or "text"

	// UnknownVariables are the variables of the environment that start as
	// a setting does (KAFKA_, REDIS_, ...) but name none, nor a Kubernetes
	// service link: ignored, and logged at start (config_unknown_variable).
	// Only LoadWorkerEnviron, which sees the environment's names, sets it.
	UnknownVariables []string

	// declared and values are the variables the providers given to
	// LoadWorker declared, and their values (each printed masked, as a
	// Secret: which are secrets is the provider's word), for Settings.
	declared map[string]Var
	values   map[string]Secret
}

// TwilioEnabled reports whether SMS goes through Twilio: the account SID,
// the auth token and a sender (from number or messaging service) are all
// set. Load rejects a partial set, so otherwise SMS goes to the console.
func (c Config) TwilioEnabled() bool { return c.TwilioConfig().Configured() }

// TracesURL returns the URL spans are exported to over OTLP/HTTP:
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, else
// OTEL_EXPORTER_OTLP_ENDPOINT with "/v1/traces" appended to its path (as
// the OpenTelemetry specification says), else "": tracing is off.
func (c Config) TracesURL() string {
	t := c.Tracing
	switch {
	case t.TracesEndpoint != "":
		return t.TracesEndpoint
	case t.Endpoint != "":
		return strings.TrimRight(t.Endpoint, "/") + "/v1/traces"
	}
	return ""
}

// SMTPEnabled reports whether email goes through SMTP (SMTP_HOST is set);
// otherwise email goes to the console.
func (c Config) SMTPEnabled() bool { return c.SMTP.Host != "" }

// LogValue implements slog.LogValuer: the effective configuration for the
// start-up line, so an operator can see what the worker actually runs with,
// defaults included. Secrets show as "***" (or "" when unset); REDIS_URL
// keeps its host and database and loses only its password. Durations are
// rendered as "10s" rather than nanoseconds, for people to read.
func (c Config) LogValue() slog.Value {
	k, i, r, t, s, a := c.Kafka, c.Idempotency, c.Redis, c.Twilio, c.SMTP, c.Adapters
	return slog.GroupValue(
		slog.Group("adapters",
			slog.String("event_source", a.EventSource),
			slog.String("store", a.Store),
			slog.String("sms", a.SMS),
			slog.String("email", a.Email),
		),
		slog.Group("kafka",
			slog.String("brokers", strings.Join(k.Brokers, ",")),
			slog.String("topic", k.Topic),
			slog.String("group_id", k.GroupID),
			slog.String("client_id", k.ClientID),
			slog.String("dlq_topic", k.DLQTopic),
			slog.Bool("tls", k.TLS),
			slog.String("tls_ca_file", k.TLSCAFile),
			slog.String("sasl_mechanism", k.SASLMechanism),
			slog.String("sasl_username", k.SASLUsername),
			slog.Any("sasl_password", k.SASLPassword),
			slog.String("rebalance_strategy", k.RebalanceStrategy),
			slog.String("group_instance_id", k.GroupInstanceID),
			slog.String("session_timeout", k.SessionTimeout.String()),
			slog.Int("max_in_flight", k.MaxInFlight),
			slog.Int("max_record_bytes", k.MaxRecordBytes),
			slog.Int64("max_buffered_bytes", k.MaxBufferedBytes),
			slog.Int("retry_max_attempts", k.RetryMaxAttempts),
			slog.String("retry_initial_backoff", k.RetryInitialBackoff.String()),
			slog.String("retry_max_backoff", k.RetryMaxBackoff.String()),
			slog.Int("expected_replicas", k.ExpectedReplicas),
		),
		slog.Float64("sms_rate_limit", c.RateLimit.SMS.Rate),
		slog.Int("sms_rate_burst", c.RateLimit.SMS.Burst),
		slog.Float64("email_rate_limit", c.RateLimit.Email.Rate),
		slog.Int("email_rate_burst", c.RateLimit.Email.Burst),
		// The start-up line keeps the store's settings in one group.
		slog.Group("idempotency",
			slog.String("redis_url", ports.MaskURL(r.URL.Reveal())),
			slog.String("ttl", i.TTL.String()),
			slog.String("claim_ttl", i.ClaimTTL.String()),
			slog.String("timeout", i.Timeout.String()),
			slog.String("failure_mode", i.FailureMode),
			slog.String("key_format", r.KeyFormat),
			slog.String("compact_key_prefix", r.CompactPrefix),
			slog.String("key_prefix", r.KeyPrefix),
			slog.Bool("read_both_formats", r.ReadBothFormats),
			slog.Int("breaker_failures", i.BreakerFailures),
			slog.String("breaker_cooldown", i.BreakerCooldown.String()),
			slog.Int("ledger_size", i.LedgerSize),
			slog.Bool("allow_eviction", r.AllowEviction),
			slog.Int("min_replicas", r.MinReplicas),
			slog.Bool("wait_aof", r.WaitAOF),
			slog.String("redis_sentinel_addrs", strings.Join(r.SentinelAddrs, ",")),
			slog.String("redis_sentinel_master", r.SentinelMaster),
			slog.String("redis_sentinel_username", r.SentinelUsername),
			slog.Any("redis_sentinel_password", r.SentinelPassword),
		),
		slog.Group("twilio",
			slog.Bool("enabled", c.TwilioEnabled()),
			slog.String("account_sid", t.AccountSID),
			slog.Any("auth_token", t.AuthToken),
			slog.String("from_number", t.FromNumber),
			slog.String("messaging_service_sid", t.MessagingServiceSID),
			slog.String("api_url", t.APIURL),
			slog.String("list_lag", t.ListLag.String()),
		),
		slog.Group("smtp",
			slog.Bool("enabled", c.SMTPEnabled()),
			slog.String("host", s.Host),
			slog.Int("port", s.Port),
			slog.String("username", s.Username),
			slog.Any("password", s.Password),
			slog.String("from", s.From),
			slog.String("tls_policy", s.TLSPolicy),
		),
		slog.Bool("allow_insecure_transport", c.AllowInsecureTransport),
		slog.Group("tracing",
			slog.Bool("enabled", c.TracesURL() != ""),
			slog.String("traces_url", c.TracesURL()),
			slog.String("service_name", c.Tracing.ServiceName),
			slog.Any("headers", c.Tracing.Headers),
			slog.Any("traces_headers", c.Tracing.TracesHeaders),
		),
		slog.String("max_event_age", c.MaxEventAge.String()),
		slog.String("max_event_age_overrides", maxAgeOverrides(c.MaxEventAgeByType)),
		slog.String("send_timeout", c.SendTimeout.String()),
		slog.String("reconcile_timeout", c.ReconcileTimeout.String()),
		slog.String("unknown_outcome_policy", c.UnknownOutcomePolicy),
		slog.String("shutdown_timeout", c.ShutdownTimeout.String()),
		slog.String("startup_timeout", c.StartupTimeout.String()),
		slog.String("templates_dir", c.TemplatesDir),
		slog.String("http_addr", c.HTTPAddr),
		slog.String("debug_addr", c.DebugAddr),
		slog.String("hostname", c.Hostname),
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", c.LogFormat),
	)
}

// maxAgeOverrides writes MAX_EVENT_AGE_OVERRIDES as an operator would,
// sorted by type: "shipment.delayed=12h0m0s,shipment.out_for_delivery=6h0m0s".
func maxAgeOverrides(byType map[string]time.Duration) string {
	parts := make([]string, 0, len(byType))
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		parts = append(parts, typ+"="+byType[typ].String())
	}
	return strings.Join(parts, ",")
}

// Error is returned by Load when the environment is invalid. It lists every
// problem at once, so an operator fixes a deployment in one round rather than
// one variable per restart.
type Error struct {
	Problems []Problem
	// LogFormat is LOG_FORMAT as given, "" when it was unset or bad: the
	// format the caller should report the error in ("json" by default).
	LogFormat string
}

// Error returns every problem in one line:
//
//	invalid configuration: KAFKA_BROKERS="x": want host:port; IDEMPOTENCY_TTL="0s": must be positive
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid configuration: ")
	for n, p := range e.Problems {
		if n > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// Problem is one invalid variable. Value is what the variable held (the
// default, if it was unset and the problem lies in how it combines with
// another); for a secret it is "***", never the value.
type Problem struct {
	Var    string `json:"variable"`
	Value  string `json:"value,omitempty"`
	Reason string `json:"reason"`
}

// String returns `VAR="value": reason`, or `VAR: reason` when there is no
// value to show (a required variable that is missing).
func (p Problem) String() string {
	if p.Value == "" {
		return p.Var + ": " + p.Reason
	}
	return fmt.Sprintf("%s=%q: %s", p.Var, p.Value, p.Reason)
}
