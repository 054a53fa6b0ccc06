package config

import (
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// Load reads the configuration through lookup (pass os.LookupEnv), applies
// the defaults from Reference and validates the result. It touches nothing
// but lookup, so tests feed it a map.
//
// A variable set to the empty string counts as unset: orchestrators often
// render an absent value as "", and that must not switch a feature to a
// broken empty setting. Surrounding white space is trimmed from every value
// but a secret's, whose characters are all taken as given, and a
// Kubernetes service link in a setting's variable (serviceLink) counts as
// unset. Variables Load does not know are ignored (LoadWorkerEnviron
// checks them).
//
// On invalid input Load returns a *Error listing every problem it found,
// and a zero Config.
//
// Load leaves Config.Adapters as given and does not check how the adapters
// combine: LoadWorker does, for the worker.
func Load(lookup func(string) (string, bool)) (Config, error) {
	l, c := load(lookup, nil)
	if len(l.problems) > 0 {
		return Config{}, &Error{Problems: l.problems, LogFormat: c.LogFormat}
	}
	return c, nil
}

// load reads and checks every variable, for Load and LoadWorker, and the
// variables declared by providers besides Reference (read by their own
// Load, in LoadWorker); the loader holds the problems found.
func load(lookup func(string) (string, bool), providers []ports.Provider) (*loader, Config) {
	l := &loader{lookup: lookup, declared: declared(providers)}
	var c Config
	l.placeholders()

	ad := &c.Adapters
	ad.EventSource = l.oneOf("EVENT_SOURCE", false, "kafka", "embedded")
	ad.Store = l.oneOf("IDEMPOTENCY_STORE", false, storeNames(providers)...)
	ad.SMS = l.oneOf("SMS_NOTIFIER", false, "twilio", "console")
	ad.Email = l.oneOf("EMAIL_NOTIFIER", false, "smtp", "console")

	l.kafka(&c)
	l.idempotency(&c)
	c.RateLimit.SMS = l.rateLimit("SMS_RATE_LIMIT", "SMS_RATE_BURST")
	c.RateLimit.Email = l.rateLimit("EMAIL_RATE_LIMIT", "EMAIL_RATE_BURST")
	l.eventAge(&c)
	l.providers(&c)

	tr := &c.Tracing
	tr.Endpoint = l.optionalHTTPURL("OTEL_EXPORTER_OTLP_ENDPOINT")
	tr.TracesEndpoint = l.optionalHTTPURL("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if tr.Protocol = l.str("OTEL_EXPORTER_OTLP_PROTOCOL"); tr.Protocol != "http/protobuf" {
		// Ignoring it would send HTTP to a gRPC port, and lose every span.
		l.fail("OTEL_EXPORTER_OTLP_PROTOCOL", "only http/protobuf is supported (OTLP over HTTP, usually port 4318)")
		tr.Protocol = ""
	}
	tr.ServiceName = l.str("OTEL_SERVICE_NAME")
	tr.Headers = Secret(l.str("OTEL_EXPORTER_OTLP_HEADERS"))
	tr.TracesHeaders = Secret(l.str("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))

	c.AllowInsecureTransport = l.boolean("ALLOW_INSECURE_TRANSPORT")
	if !c.AllowInsecureTransport {
		l.refuseClearText(&c)
	}

	c.SendTimeout = l.duration("SEND_TIMEOUT", positive)
	c.ReconcileTimeout = l.duration("RECONCILE_TIMEOUT", positive)
	c.UnknownOutcomePolicy = l.oneOf("UNKNOWN_OUTCOME_POLICY", false, "resend", "dead_letter")
	c.ShutdownTimeout = l.duration("SHUTDOWN_TIMEOUT", positive)
	c.StartupTimeout = l.duration("STARTUP_TIMEOUT", time.Second)
	c.TemplatesDir = l.str("TEMPLATES_DIR")
	c.HTTPAddr = l.listenAddr("HTTP_ADDR")
	c.DebugAddr = l.debugAddr("DEBUG_ADDR")
	c.LogLevel = l.level("LOG_LEVEL")
	c.LogFormat = l.oneOf("LOG_FORMAT", false, "json", "text")

	// Checked here, once every value is known.
	for _, v := range c.invariants() {
		l.fail(v.Var, v.Reason)
	}
	return l, c
}

// storeNames are the values IDEMPOTENCY_STORE takes: redis, and each
// store providers offer (memory among them for the worker).
func storeNames(providers []ports.Provider) []string {
	names := []string{"redis"}
	for _, p := range providers {
		if p.OpenStore != nil && !slices.Contains(names, p.Name) {
			names = append(names, p.Name)
		}
	}
	if !slices.Contains(names, "memory") {
		names = append(names, "memory")
	}
	return names
}

// kafka reads the Kafka variables into c.Kafka.
func (l *loader) kafka(c *Config) {
	k := &c.Kafka
	k.Brokers = l.hostPorts("KAFKA_BROKERS")
	k.Topic = l.topic("KAFKA_TOPIC")
	k.GroupID = l.str("KAFKA_GROUP_ID")
	c.Hostname = l.str("HOSTNAME")
	k.ClientID = l.str("KAFKA_CLIENT_ID")
	// The DLQ default derives from KAFKA_TOPIC; when that is bad, the one
	// problem is reported once, against the variable the operator set.
	if k.Topic != "" || l.set("KAFKA_DLQ_TOPIC") {
		k.DLQTopic = l.topic("KAFKA_DLQ_TOPIC")
	}
	if kafka.CheckDLQTopic(k.Topic, k.DLQTopic) != nil {
		l.fail("KAFKA_DLQ_TOPIC", "must differ from KAFKA_TOPIC, or dead-lettered records come straight back")
	}
	k.TLS = l.boolean("KAFKA_TLS")
	k.TLSCAFile = l.str("KAFKA_TLS_CA_FILE")
	k.SASLMechanism = strings.ToUpper(l.oneOf("KAFKA_SASL_MECHANISM", true, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))
	k.SASLUsername = l.str("KAFKA_SASL_USERNAME")
	k.SASLPassword = Secret(l.str("KAFKA_SASL_PASSWORD"))
	k.RebalanceStrategy = l.oneOf("KAFKA_REBALANCE_STRATEGY", true, "cooperative-sticky", "range", "cooperative-sticky,range")
	k.GroupInstanceID = l.groupInstanceID("KAFKA_GROUP_INSTANCE_ID")
	k.SessionTimeout = l.duration("KAFKA_SESSION_TIMEOUT", 6*time.Second)
	if k.SessionTimeout > 30*time.Minute {
		l.fail("KAFKA_SESSION_TIMEOUT", "must be at most 30m (the broker's group.max.session.timeout.ms default)")
	}
	k.MaxInFlight = l.intIn("MAX_IN_FLIGHT", 1, 4096)
	k.MaxRecordBytes = l.intIn("MAX_RECORD_BYTES", 1<<10, 64<<20)
	k.MaxBufferedBytes = int64(l.intIn("MAX_BUFFERED_BYTES", 1<<20, 1<<30))
	if k.MaxRecordBytes > 0 && k.MaxBufferedBytes > 0 && k.MaxBufferedBytes < int64(k.MaxRecordBytes) {
		// Still correct (a record larger than the budget is handled alone),
		// but a worker that handles its largest records one at a time is a
		// mistake to catch at start, not to find in a backlog.
		l.fail("MAX_BUFFERED_BYTES", "must be at least MAX_RECORD_BYTES ("+strconv.Itoa(k.MaxRecordBytes)+"), or a record that size is handled alone, one at a time")
	}
	k.RetryMaxAttempts = l.intIn("RETRY_MAX_ATTEMPTS", 1, 100)
	k.RetryInitialBackoff = l.duration("RETRY_INITIAL_BACKOFF", positive)
	k.RetryMaxBackoff = l.duration("RETRY_MAX_BACKOFF", positive)
	if k.RetryInitialBackoff > 0 && k.RetryMaxBackoff > 0 && policy.CheckBackoff(k.RetryInitialBackoff, k.RetryMaxBackoff) != nil {
		l.fail("RETRY_MAX_BACKOFF", "must be at least RETRY_INITIAL_BACKOFF ("+k.RetryInitialBackoff.String()+")")
	}
	k.ExpectedReplicas = l.intIn("KAFKA_EXPECTED_REPLICAS", 1, 10000)
	l.kafkaSecurity()
}

// rateLimit reads a rate (sends per second, 0: no limit) and its burst.
// A Limit whose Rate is 0 stands for no limit.
func (l *loader) rateLimit(rate, burst string) ports.Limit {
	r, err := strconv.ParseFloat(l.value(rate), 64)
	if err != nil || math.IsNaN(r) || r < 0 || r > 1e6 {
		l.fail(rate, "want messages per second, a number from 0 (no limit) to 1000000")
		return ports.Limit{}
	}
	b := l.intIn(burst, 1, 1000000)
	lim := ports.Limit{Rate: r, Burst: b}
	if r > 0 && b > 0 && !lim.Valid() {
		l.fail(burst, "with "+rate+"="+l.value(rate)+", the burst must fit in ten years of sends")
		return ports.Limit{}
	}
	return lim
}

// idempotency reads the store's variables: the generic ones into
// c.Idempotency, and the Redis store's into c.Redis through the adapter's
// own loader, which checks them.
func (l *loader) idempotency(c *Config) {
	l.redis(c)
	i := &c.Idempotency
	// Redis expiries (PX) count whole milliseconds: anything shorter would
	// be sent as 0, which Redis rejects.
	i.TTL = l.duration("IDEMPOTENCY_TTL", time.Millisecond)
	i.ClaimTTL = l.duration("IDEMPOTENCY_CLAIM_TTL", time.Millisecond)
	// Below a millisecond no Redis call can answer, and the worker would
	// fail open on every notification.
	i.Timeout = l.duration("IDEMPOTENCY_TIMEOUT", time.Millisecond)
	i.FailureMode = l.oneOf("IDEMPOTENCY_FAILURE_MODE", false, "open", "closed")
	if l.value("IDEMPOTENCY_BREAKER_FAILURES") == "0" {
		// 0 would mean "no breaker", which is refused: the breaker is the
		// one layer that decides Redis is unavailable, and what bounds the
		// calls a silent Redis leaves waiting; without it, calls would hang
		// past IDEMPOTENCY_TIMEOUT.
		l.fail("IDEMPOTENCY_BREAKER_FAILURES", "the circuit breaker can no longer be turned off: it is what keeps store calls within IDEMPOTENCY_TIMEOUT when Redis stops answering; want an integer from 1 to 1000")
	} else {
		i.BreakerFailures = l.intIn("IDEMPOTENCY_BREAKER_FAILURES", 1, 1000)
	}
	i.BreakerCooldown = l.duration("IDEMPOTENCY_BREAKER_COOLDOWN", positive)
	i.LedgerSize = l.intIn("IDEMPOTENCY_LEDGER_SIZE", 1, 1000000)
}

// redis reads the Redis store's variables into c.Redis: the adapter's
// loader (redis.LoadSettings) reads and checks them.
func (l *loader) redis(c *Config) {
	rc := redis.LoadSettings(settings{l})
	r := &c.Redis
	r.URL, r.MinReplicas, r.WaitAOF = Secret(rc.URL), rc.MinReplicas, rc.WaitAOF
	r.KeyFormat, r.CompactPrefix, r.KeyPrefix, r.ReadBothFormats = rc.Format.String(), rc.CompactPrefix, rc.KeyPrefix, rc.ReadBoth
	r.AllowEviction = rc.Health.AllowEviction
	r.SentinelAddrs, r.SentinelMaster = rc.SentinelAddrs, rc.SentinelMaster
	r.SentinelUsername, r.SentinelPassword = rc.SentinelUsername, Secret(rc.SentinelPassword)
}

// eventAge reads MAX_EVENT_AGE and its overrides, once c.Idempotency is
// read: neither may exceed IDEMPOTENCY_TTL.
func (l *loader) eventAge(c *Config) {
	i := &c.Idempotency
	// The default derives from IDEMPOTENCY_TTL; when that is bad, the one
	// problem is reported once, against the variable the operator set.
	if i.TTL > 0 || l.set("MAX_EVENT_AGE") {
		c.MaxEventAge = l.duration("MAX_EVENT_AGE", positive)
	}
	c.MaxEventAgeByType = l.ageOverrides("MAX_EVENT_AGE_OVERRIDES")
	if i.TTL > 0 {
		if c.MaxEventAge > i.TTL {
			l.fail("MAX_EVENT_AGE", "must be at most IDEMPOTENCY_TTL ("+i.TTL.String()+
				"): an older event may have been sent and its record forgotten, and a replay of it would be sent again")
		}
		for _, typ := range sortedKeys(c.MaxEventAgeByType) {
			if d := c.MaxEventAgeByType[typ]; d > i.TTL {
				l.fail("MAX_EVENT_AGE_OVERRIDES", fmt.Sprintf("%s=%v: must be at most IDEMPOTENCY_TTL (%v), or a replay after the store forgot an event could send it again", typ, d, i.TTL))
			}
		}
	}
}

// providers reads Twilio's and SMTP's variables into c.Twilio and c.SMTP,
// through each adapter's own loader, which checks them.
func (l *loader) providers(c *Config) {
	// The Twilio and SMTP adapters read and check their own settings.
	tc := twilio.LoadSettings(settings{l})
	t := &c.Twilio
	t.AccountSID, t.AuthToken, t.FromNumber, t.MessagingServiceSID = tc.AccountSID, Secret(tc.AuthToken), tc.From, tc.MessagingServiceSID
	t.APIURL, t.ListLag = tc.APIURL, tc.ListLag

	sc := smtp.LoadSettings(settings{l})
	s := &c.SMTP
	s.Host, s.Port, s.Username, s.Password, s.From, s.TLSPolicy = sc.Host, sc.Port, sc.Username, Secret(sc.Password), sc.From, sc.TLSPolicy
}

// kafkaSecurity rejects TLS and SASL settings that cannot take effect: on
// the embedded broker (which speaks neither), without their counterparts,
// or a CA file while TLS is off. Each is a deployment that believes it is
// secured and is not.
func (l *loader) kafkaSecurity() {
	tlsOn, tlsErr := strconv.ParseBool(l.value("KAFKA_TLS"))
	if !l.set("KAFKA_BROKERS") {
		if tlsErr == nil && tlsOn {
			l.fail("KAFKA_TLS", "true, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_TLS")
		}
		// KAFKA_TLS=false configures nothing, so it is left alone.
		for _, name := range []string{"KAFKA_TLS_CA_FILE", "KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"} {
			if l.set(name) {
				l.fail(name, "set, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset "+name)
			}
		}
		return
	}
	if l.set("KAFKA_TLS_CA_FILE") {
		if tlsErr == nil && !tlsOn {
			l.fail("KAFKA_TLS_CA_FILE", "set, but KAFKA_TLS is false; set KAFKA_TLS=true to use it")
		}
	}
	l.requiredWith("KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD")
}

// refuseClearText rejects the settings that would send a credential
// across the network unencrypted: an http:// Twilio API URL to a host
// that is not loopback, which carries the auth token in Basic auth; an
// http:// OTLP traces URL (Config.TracesURL) to such a host while OTLP
// headers are set,
// which usually carry the collector's API key; and SASL PLAIN to real
// brokers without TLS, which carries the password as it is. Load skips it
// when ALLOW_INSECURE_TRANSPORT is true.
//
// For OTLP the URL's scheme alone decides: the exporter takes its URL
// through WithEndpointURL, which sets TLS from the scheme and overrides
// OTEL_EXPORTER_OTLP_INSECURE and OTEL_EXPORTER_OTLP_TRACES_INSECURE, as
// the OpenTelemetry specification says of OTLP/HTTP. A header variable
// that is set is taken to hold a credential: which header is one cannot be
// told from its name.
//
// It reads the URLs from c as Load parsed them, "" where one was invalid
// (and reported already).
func (l *loader) refuseClearText(c *Config) {
	if clearTextToAnotherHost(c.Twilio.APIURL) {
		l.refuse("TWILIO_API_URL", "the Twilio auth token")
	}
	// The traces headers replace the general ones when both are set.
	if headers := l.firstSet("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"); headers != "" && clearTextToAnotherHost(c.TracesURL()) {
		endpoint := "OTEL_EXPORTER_OTLP_ENDPOINT"
		if c.Tracing.TracesEndpoint != "" {
			endpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		}
		l.refuse(endpoint, headers)
	}
	tlsOn, _ := strconv.ParseBool(l.value("KAFKA_TLS"))
	if l.set("KAFKA_BROKERS") && strings.EqualFold(l.value("KAFKA_SASL_MECHANISM"), "PLAIN") && !tlsOn {
		l.fail("KAFKA_SASL_MECHANISM", "PLAIN without KAFKA_TLS=true would send the SASL password in clear text; set KAFKA_TLS=true, "+insecureOptOut)
	}
}

// insecureOptOut ends every reason refuseClearText gives.
const insecureOptOut = "or, in a test lab only, set ALLOW_INSECURE_TRANSPORT=true"

// refuse reports name, whose http:// URL to a host that is not loopback
// would carry credential in clear text.
func (l *loader) refuse(name, credential string) {
	l.fail(name, "http:// to a host that is not loopback (127.0.0.0/8, ::1, localhost) would send "+credential+" in clear text; use https://, "+insecureOptOut)
}

// clearTextToAnotherHost reports whether rawURL is an http:// URL whose
// host is not loopback: what travels to it crosses the network
// unencrypted. "" reports false.
func clearTextToAnotherHost(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return rawURL != "" && err == nil && strings.EqualFold(u.Scheme, "http") && !loopback(u.Hostname())
}

// loopback reports whether host (without a port) names this machine:
// "localhost" or an address in 127.0.0.0/8 or ::1. Other names are not
// resolved: what a name resolves to can change after start.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loader reads variables through lookup and collects problems, so that one
// Load reports every bad variable rather than the first.
type loader struct {
	lookup    func(string) (string, bool)
	problems  []Problem
	placeheld map[string]bool // variables holding the placeholder
	// declared are the variables providers declared, besides Reference.
	declared map[string]Var
	// provided is set when a provider's notifier is chosen or configured
	// (see providers), for the store's choice.
	provided bool
	// stores are the store providers, by name, and whether each one's
	// settings configure it.
	stores map[string]storeProvided
}

// explicit returns the value the environment gives name, trimmed unless
// secret; "" when unset, or when it holds a Kubernetes service link (a
// Service named smtp puts SMTP_PORT=tcp://10.0.0.9:587 beside the
// worker's settings; an operator's value would replace it).
func (l *loader) explicit(name string) string {
	v, ok := l.lookup(name)
	if !ok || serviceLink(name, v) {
		return ""
	}
	if l.varOf(name).Secret {
		return v
	}
	return strings.TrimSpace(v)
}

// set reports whether the environment gives name a non-empty value.
func (l *loader) set(name string) bool { return l.explicit(name) != "" }

// value returns name's effective value: the environment's, or else the
// default from Reference with ${NAME} references expanded.
func (l *loader) value(name string) string {
	if v := l.explicit(name); v != "" {
		return v
	}
	return os.Expand(l.varOf(name).Default, l.value)
}

// firstSet returns the first of names that is set, or "".
func (l *loader) firstSet(names ...string) string {
	for _, n := range names {
		if l.set(n) {
			return n
		}
	}
	return ""
}

// requiredWith reports each of required that is unset while name is set.
func (l *loader) requiredWith(name string, required ...string) {
	for _, r := range required {
		if l.set(name) && !l.set(r) {
			l.fail(r, "required when "+name+" is set")
		}
	}
	// The reverse: credentials without a mechanism would be ignored.
	if !l.set(name) {
		if given := l.firstSet(required...); given != "" {
			l.fail(name, "required when "+given+" is set")
		}
	}
}

// placeholder marks a value a manifest ships for the operator to replace
// (deploy/k8s writes REPLACE_ME). Such a value can parse (REPLACE_ME:9092
// is a host:port), so it is refused by name, wherever it stands.
const placeholder = "REPLACE_ME"

// placeholders reports each variable whose value holds the placeholder.
// fail reports nothing more against such a variable: what else is wrong
// with it is the placeholder.
func (l *loader) placeholders() {
	vars := slices.Clone(Reference)
	for _, name := range slices.Sorted(maps.Keys(l.declared)) {
		vars = append(vars, l.declared[name])
	}
	for _, v := range vars {
		if strings.Contains(l.explicit(v.Name), placeholder) {
			l.fail(v.Name, "holds the placeholder "+placeholder+": set the real value")
			if l.placeheld == nil {
				l.placeheld = map[string]bool{}
			}
			l.placeheld[v.Name] = true
		}
	}
}

// fail records a problem with name's effective value, masked if secret.
func (l *loader) fail(name, reason string) {
	if l.placeheld[name] {
		return
	}
	v := l.value(name)
	if l.varOf(name).Secret && v != "" {
		v = masked
	}
	l.problems = append(l.problems, Problem{Var: name, Value: v, Reason: reason})
}

// varOf returns name's entry in Reference, or among the variables a
// provider declared. A name missing from both is a bug in this package or
// in the provider, caught by its tests, hence the panic.
func (l *loader) varOf(name string) Var {
	if v, ok := reference[name]; ok {
		return v
	}
	if v, ok := l.declared[name]; ok {
		return v
	}
	panic("config: " + name + " is read by Load but missing from Reference and from every provider's Settings")
}

func (l *loader) str(name string) string { return l.value(name) }

func (l *loader) boolean(name string) bool {
	b, err := strconv.ParseBool(l.value(name))
	if err != nil {
		l.fail(name, "want true or false")
	}
	return b
}

func (l *loader) intIn(name string, lo, hi int) int {
	n, err := strconv.Atoi(l.value(name))
	if err != nil || n < lo || n > hi {
		l.fail(name, fmt.Sprintf("want an integer from %d to %d", lo, hi))
		return 0
	}
	return n
}

// positive is the least duration that is not zero, for duration's lo.
const positive = time.Nanosecond

// duration parses a Go duration ("200ms", "48h") of at least lo. It returns
// 0 for a bad value, which the cross-checks in Load take as "already
// reported".
func (l *loader) duration(name string, lo time.Duration) time.Duration {
	d, err := time.ParseDuration(l.value(name))
	switch {
	case err != nil:
		l.fail(name, "want a duration such as 500ms, 30s or 48h")
		return 0
	case d < lo && lo == positive:
		l.fail(name, "must be positive")
		return 0
	case d < lo:
		l.fail(name, "must be at least "+lo.String())
		return 0
	}
	return d
}

// ageOverrides parses "type=duration,type=duration". Every entry must
// name a type and a positive duration, and no type may repeat; each bad
// entry is reported by its position and text. It returns nil when unset.
func (l *loader) ageOverrides(name string) map[string]time.Duration {
	v := l.value(name)
	if v == "" {
		return nil
	}
	out := map[string]time.Duration{}
	for n, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		typ, ds, ok := strings.Cut(e, "=")
		typ, ds = strings.TrimSpace(typ), strings.TrimSpace(ds)
		d, err := time.ParseDuration(ds)
		switch {
		case !ok || typ == "" || strings.ContainsAny(typ, " \t"):
			l.fail(name, fmt.Sprintf("entry %d (%q): want type=duration, such as shipment.out_for_delivery=6h", n+1, e))
		case err != nil || d <= 0:
			l.fail(name, fmt.Sprintf("entry %d (%q): want a positive duration such as 6h after the =", n+1, e))
		case out[typ] != 0:
			l.fail(name, fmt.Sprintf("entry %d (%q): type %s is given twice", n+1, e, typ))
		default:
			out[typ] = d
		}
	}
	return out
}

// sortedKeys returns m's keys in order, so problems are reported in a
// stable order.
func sortedKeys(m map[string]time.Duration) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// oneOf returns the value if it is one of allowed (compared case-insensitively
// when fold is set), or "" when unset with no default.
func (l *loader) oneOf(name string, fold bool, allowed ...string) string {
	v := l.value(name)
	if v == "" {
		return ""
	}
	for _, a := range allowed {
		if v == a || fold && strings.EqualFold(v, a) {
			return a
		}
	}
	l.fail(name, "want one of "+strings.Join(allowed, ", "))
	return ""
}

func (l *loader) level(name string) slog.Level {
	switch strings.ToLower(l.value(name)) {
	case "debug":
		return slog.LevelDebug
	case "info":
		return slog.LevelInfo
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	l.fail(name, "want one of debug, info, warn, error")
	return slog.LevelInfo
}

// hostPorts parses a comma-separated list of host:port.
func (l *loader) hostPorts(name string) []string {
	v := l.value(name)
	if v == "" {
		return nil
	}
	entries := strings.Split(v, ",")
	out := make([]string, 0, len(entries))
	for n, e := range entries {
		e = strings.TrimSpace(e)
		if !validHostPort(e, false) {
			if len(entries) == 1 {
				l.fail(name, "want host:port")
			} else {
				l.fail(name, fmt.Sprintf("want comma-separated host:port; entry %d (%q) is not", n+1, e))
			}
			continue
		}
		out = append(out, e)
	}
	return out
}

// validHostPort reports whether s is host:port with a port from 1 to 65535
// (0 too when listen is set: the system picks one) and, unless listen is
// set, a non-empty host.
func validHostPort(s string, listen bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || (host == "" && !listen) || strings.ContainsAny(host, " /") {
		return false
	}
	p, err := strconv.Atoi(port)
	lo := 1
	if listen {
		lo = 0
	}
	return err == nil && p >= lo && p <= 65535
}

// listenAddr parses HTTP_ADDR. "off" yields "", which disables the server:
// the empty string itself counts as unset and so yields the default.
func (l *loader) listenAddr(name string) string {
	v := l.value(name)
	if strings.EqualFold(v, "off") {
		return ""
	}
	if !validHostPort(v, true) {
		l.fail(name, "want [host]:port, such as :8080, or off")
		return ""
	}
	return v
}

// debugAddr parses DEBUG_ADDR: "" is off; an address without a host
// listens on loopback only, since what it serves (profiles, goroutine
// dumps with their arguments) is for an operator's port-forward, not the
// network.
func (l *loader) debugAddr(name string) string {
	v := l.value(name)
	if v == "" {
		return ""
	}
	if !validHostPort(v, true) {
		l.fail(name, "want [host]:port, such as :6060 (loopback) or 0.0.0.0:6060, or empty for off")
		return ""
	}
	if host, port, _ := net.SplitHostPort(v); host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return v
}

func (l *loader) topic(name string) string {
	v := l.value(name)
	if err := kafka.CheckTopicName(v); err != nil {
		l.fail(name, "want a Kafka topic name: it "+err.Error())
		return ""
	}
	return v
}

// groupInstanceID returns the value if Kafka accepts it as a
// group.instance.id: up to 249 of [a-zA-Z0-9._-], not "." or "..".
func (l *loader) groupInstanceID(name string) string {
	v := l.value(name)
	if v == "" {
		return ""
	}
	legal := v != "." && v != ".." && len(v) <= 249
	for _, r := range v {
		legal = legal && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}
	if !legal {
		l.fail(name, "want up to 249 letters, digits, '.', '_' or '-' (not \".\" or \"..\"), unique in the group")
		return ""
	}
	return v
}

func (l *loader) httpURL(name string) string {
	v := l.value(name)
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		l.fail(name, "want an absolute http:// or https:// URL")
		return ""
	}
	// Credentials in the URL would be printed wherever the URL is (the
	// start-up line, provider errors), and a query or fragment would be
	// dropped when request paths are joined on: refuse both.
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		l.fail(name, "want a URL without user info, query or fragment")
		if u.User != nil {
			// The user info may hold a password: do not echo it back.
			l.problems[len(l.problems)-1].Value = masked
		}
		return ""
	}
	return v
}

// optionalHTTPURL is httpURL for a variable that may be unset ("").
func (l *loader) optionalHTTPURL(name string) string {
	if l.value(name) == "" {
		return ""
	}
	return l.httpURL(name)
}
