// Package config reads the worker's configuration from the environment once,
// at start, so that no other package calls os.Getenv and a bad setting stops
// the worker before it consumes a single record. It composes the adapters
// (Providers), each of which declares, reads and checks its own settings,
// reads the worker's own settings into a typed Config, and checks only the
// rules that span adapters.
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
	"strconv"
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
// Each field's comment names its variable; Reference has the defaults. The
// providers' settings are read through Settings, by the adapter that
// declared them.
type Config struct {
	// Adapters names the adapter chosen for each port, as given; "" where
	// the variable is unset and its default depends on the others
	// (LoadWorker resolves it and refuses a contradiction).
	Adapters struct {
		EventSource string // EVENT_SOURCE: "kafka" or "embedded"
		Store       string // IDEMPOTENCY_STORE: "", "redis" or "memory"
		// Notifiers holds each channel's notifier by the variable that
		// chooses it (SMS_NOTIFIER, EMAIL_NOTIFIER, PUSH_NOTIFIER): its
		// provider's name, "console", or "" for a channel that is off.
		Notifiers map[string]string
	}
	MaxInFlight         int           // MAX_IN_FLIGHT
	MaxRecordBytes      int           // MAX_RECORD_BYTES
	MaxBufferedBytes    int64         // MAX_BUFFERED_BYTES
	RetryMaxAttempts    int           // RETRY_MAX_ATTEMPTS
	RetryInitialBackoff time.Duration // RETRY_INITIAL_BACKOFF
	RetryMaxBackoff     time.Duration // RETRY_MAX_BACKOFF
	// ExpectedReplicas is how many replicas of the worker share the
	// group: each paces by its share of a rate limit while the fleet's
	// limiter (Redis) cannot answer.
	ExpectedReplicas int // KAFKA_EXPECTED_REPLICAS
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
	// MaxEventAge and MaxEventAgeByType: MAX_EVENT_AGE, and
	// MAX_EVENT_AGE_OVERRIDES by event type (nil when unset).
	MaxEventAge       time.Duration
	MaxEventAgeByType map[string]time.Duration
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
	LogLevel  slog.Level // LOG_LEVEL
	LogFormat string     // LOG_FORMAT: "json" or "text"

	// UnknownVariables are the variables of the environment that start as
	// a setting does (KAFKA_, REDIS_, ...) but name none, nor a Kubernetes
	// service link: ignored, and logged at start (config_unknown_variable).
	// Only LoadWorkerEnviron, which sees the environment's names, sets it.
	UnknownVariables []string

	// settings are the variables the providers declared, in order, and
	// values what Load took for each (each printed masked, as a Secret:
	// which are secrets is the provider's word), for Settings and the
	// start-up line; enabled holds, by name, whether each notifier's
	// settings configure it.
	settings []Var
	values   map[string]Secret
	enabled  map[string]bool
}

// Enabled reports whether the settings of the notifier named provider
// ("twilio", "smtp") configure it; its channel then sends through it
// unless its variable asks for the console.
func (c Config) Enabled(provider string) bool { return c.enabled[provider] }

// Notifier returns the notifier chosen by variable, a channel's
// (SMS_NOTIFIER, a Provider's Variable), as LoadWorker resolved it; "" for
// a channel that is off, and for a variable that names no notifier.
func (c Config) Notifier(variable string) string { return c.Adapters.Notifiers[variable] }

// Settings returns the providers' settings, with the values Load accepted,
// for the adapters to read their own (their Open, a LoadSettings). What a
// getter refuses here is not reported: Load has.
func (c Config) Settings() ports.Settings {
	values := c.values
	return &loader{
		lookup:   func(name string) (string, bool) { v, ok := values[name]; return v.Reveal(), ok },
		declared: index(c.settings),
	}
}

// With returns a copy of c whose provider setting name holds value,
// unchecked: for a caller that sets what the environment does not give
// (the demo's embedded broker, a test's group).
func (c Config) With(name, value string) Config {
	c.values = maps.Clone(c.values)
	if c.values == nil {
		c.values = map[string]Secret{}
	}
	c.values[name] = Secret(value)
	return c
}

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

// LogValue implements slog.LogValuer: the effective configuration for the
// start-up line, so an operator can see what the worker actually runs with,
// defaults included. Secrets show as "***" (or "" when unset); REDIS_URL
// keeps its host and database and loses only its password. Durations are
// rendered as "10s" rather than nanoseconds, for people to read. Each
// provider's settings show as Load took them, in the group of their name
// (startupKey); the groups follow the top's attributes, by name.
func (c Config) LogValue() slog.Value {
	groups := map[string][]slog.Attr{
		"adapters":    c.adapterAttrs(),
		"kafka":       c.recordAttrs(),
		"idempotency": c.idempotencyAttrs(),
		"tracing": {
			slog.Bool("enabled", c.TracesURL() != ""),
			slog.String("traces_url", c.TracesURL()),
			slog.String("service_name", c.Tracing.ServiceName),
			slog.Any("headers", c.Tracing.Headers),
			slog.Any("traces_headers", c.Tracing.TracesHeaders),
		},
	}
	for name, on := range c.enabled {
		groups[name] = append(groups[name], slog.Bool("enabled", on))
	}
	top := c.workerAttrs()
	for _, v := range c.settings {
		group, key := startupKey(v.Name)
		if group == "" {
			top = append(top, slog.Attr{Key: key, Value: c.shown(v)})
		} else {
			groups[group] = append(groups[group], slog.Attr{Key: key, Value: c.shown(v)})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		top = append(top, slog.Attr{Key: name, Value: slog.GroupValue(groups[name]...)})
	}
	return slog.GroupValue(top...)
}

// String returns c as the start-up line shows it (LogValue), so that no
// fmt verb prints a secret; GoString does the same for %#v.
func (c Config) String() string   { return c.LogValue().String() }
func (c Config) GoString() string { return "config.Config" + c.String() }

// adapterAttrs are the start-up line's adapters: each port's as resolved,
// each channel's notifier by its variable's first word ("sms").
func (c Config) adapterAttrs() []slog.Attr {
	a := c.Adapters
	attrs := []slog.Attr{slog.String("event_source", a.EventSource), slog.String("store", a.Store)}
	for _, variable := range slices.Sorted(maps.Keys(a.Notifiers)) {
		word, _, _ := strings.Cut(strings.ToLower(variable), "_")
		attrs = append(attrs, slog.String(word, a.Notifiers[variable]))
	}
	return attrs
}

// recordAttrs are the start-up line's settings of how records are
// consumed and retried, in the kafka group.
func (c Config) recordAttrs() []slog.Attr {
	return []slog.Attr{
		slog.Int("max_in_flight", c.MaxInFlight),
		slog.Int("max_record_bytes", c.MaxRecordBytes),
		slog.Int64("max_buffered_bytes", c.MaxBufferedBytes),
		slog.Int("retry_max_attempts", c.RetryMaxAttempts),
		slog.String("retry_initial_backoff", c.RetryInitialBackoff.String()),
		slog.String("retry_max_backoff", c.RetryMaxBackoff.String()),
		slog.Int("expected_replicas", c.ExpectedReplicas),
	}
}

// idempotencyAttrs are the start-up line's settings of every store.
func (c Config) idempotencyAttrs() []slog.Attr {
	i := c.Idempotency
	return []slog.Attr{
		slog.String("ttl", i.TTL.String()),
		slog.String("claim_ttl", i.ClaimTTL.String()),
		slog.String("timeout", i.Timeout.String()),
		slog.String("failure_mode", i.FailureMode),
		slog.Int("breaker_failures", i.BreakerFailures),
		slog.String("breaker_cooldown", i.BreakerCooldown.String()),
		slog.Int("ledger_size", i.LedgerSize),
	}
}

// workerAttrs are the start-up line's other settings, at its top.
func (c Config) workerAttrs() []slog.Attr {
	return []slog.Attr{
		slog.Float64("sms_rate_limit", c.RateLimit.SMS.Rate),
		slog.Int("sms_rate_burst", c.RateLimit.SMS.Burst),
		slog.Float64("email_rate_limit", c.RateLimit.Email.Rate),
		slog.Int("email_rate_burst", c.RateLimit.Email.Burst),
		slog.Bool("allow_insecure_transport", c.AllowInsecureTransport),
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
		slog.String("log_level", c.LogLevel.String()),
		slog.String("log_format", c.LogFormat),
	}
}

// shown is a provider's setting v as the start-up line shows it: a
// secret masked, a value that reads as an integer or as true or false as
// one, any other as given.
func (c Config) shown(v Var) slog.Value {
	value := c.values[v.Name]
	switch s := value.Reveal(); {
	case v.MaskURL:
		return slog.StringValue(ports.MaskURL(s))
	case v.Secret:
		return slog.StringValue(value.String())
	case strings.EqualFold(s, "true") || strings.EqualFold(s, "false"):
		return slog.BoolValue(strings.EqualFold(s, "true"))
	default:
		if n, err := strconv.Atoi(s); err == nil {
			return slog.IntValue(n)
		}
		return slog.StringValue(s)
	}
}

// startupKey is where the start-up line shows a provider's setting: in the
// group of its name's first word, under the rest (KAFKA_TOPIC:
// kafka.topic), the Redis store's among the store's (REDIS_URL:
// idempotency.redis_url), a name of one word at the top (HOSTNAME).
func startupKey(name string) (group, key string) {
	lower := strings.ToLower(name)
	word, rest, ok := strings.Cut(lower, "_")
	switch {
	case !ok:
		return "", lower
	case word == "redis":
		return "idempotency", lower
	}
	return word, rest
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
