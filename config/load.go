package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// Load reads the configuration through lookup (pass os.LookupEnv), applies
// the defaults from Reference and validates the result: each provider's
// settings through its own Load, and the worker's own. It reads nothing
// but lookup and the files a provider's settings name (a CA file), so
// tests feed it a map.
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

// load reads and checks every variable, for Load and LoadWorker: the
// worker's own, and the settings of Providers and of more, through each
// one's Load. The loader holds the problems found.
func load(lookup func(string) (string, bool), more []ports.Provider) (*loader, Config) {
	providers := slices.Concat(Providers, more)
	l := &loader{lookup: lookup, declared: index(providerVars(more...)), configured: map[string]bool{}}
	var c Config
	l.placeholders()

	c.Adapters.EventSource = l.OneOf(ports.SourceVariable, append(names(providers, ports.SourceVariable), "embedded")...)
	c.Adapters.Store = l.OneOf(ports.StoreVariable, names(providers, ports.StoreVariable)...)
	l.providers(&c, providers)
	l.records(&c)
	l.idempotency(&c)
	c.RateLimit.SMS = l.rateLimit("SMS_RATE_LIMIT", "SMS_RATE_BURST")
	c.RateLimit.Email = l.rateLimit("EMAIL_RATE_LIMIT", "EMAIL_RATE_BURST")
	l.eventAge(&c)
	l.tracing(&c)

	c.AllowInsecureTransport = l.Bool("ALLOW_INSECURE_TRANSPORT")
	if !c.AllowInsecureTransport {
		l.refuseClearText(&c)
	}

	c.SendTimeout = l.Duration("SEND_TIMEOUT", positive)
	c.ReconcileTimeout = l.Duration("RECONCILE_TIMEOUT", positive)
	c.UnknownOutcomePolicy = l.OneOf("UNKNOWN_OUTCOME_POLICY", "resend", "dead_letter")
	c.ShutdownTimeout = l.Duration("SHUTDOWN_TIMEOUT", positive)
	c.StartupTimeout = l.Duration("STARTUP_TIMEOUT", time.Second)
	c.TemplatesDir = l.String("TEMPLATES_DIR")
	c.HTTPAddr = l.listenAddr("HTTP_ADDR")
	c.DebugAddr = l.debugAddr("DEBUG_ADDR")
	if err := c.LogLevel.UnmarshalText([]byte(l.value("LOG_LEVEL"))); err != nil {
		l.Fail("LOG_LEVEL", "want one of debug, info, warn, error")
	}
	c.LogFormat = l.OneOf("LOG_FORMAT", "json", "text")

	// Checked here, once every value is known.
	for _, v := range c.invariants() {
		l.Fail(v.Var, v.Reason)
	}
	return l, c
}

// names are the names of the providers chosen by variable.
func names(providers []ports.Provider, variable string) []string {
	var out []string
	for _, p := range providers {
		if p.Variable == variable {
			out = append(out, p.Name)
		}
	}
	return out
}

// providers reads each provider's settings through its Load, which checks
// them, and a notifier's variable as given, into c: the values, for
// Settings, and which notifiers are configured. The loader keeps whether
// each provider is configured, for LoadWorker's choices.
func (l *loader) providers(c *Config, providers []ports.Provider) {
	c.Adapters.Notifiers = map[string]string{}
	c.values, c.enabled = map[string]Secret{}, map[string]bool{}
	for _, p := range providers {
		l.configured[p.Name] = p.Load(l)
		if notifier(p) {
			c.Adapters.Notifiers[p.Variable] = l.OneOf(p.Variable, p.Name, "console")
			c.enabled[p.Name] = l.configured[p.Name]
		}
		for _, s := range p.Settings {
			c.values[s.Name] = Secret(l.value(s.Name))
		}
		c.settings = append(c.settings, p.Settings...)
	}
}

// records reads how records are consumed and retried.
func (l *loader) records(c *Config) {
	c.MaxInFlight = l.Int("MAX_IN_FLIGHT", 1, 4096)
	c.MaxRecordBytes = l.Int("MAX_RECORD_BYTES", 1<<10, 64<<20)
	c.MaxBufferedBytes = int64(l.Int("MAX_BUFFERED_BYTES", 1<<20, 1<<30))
	if c.MaxRecordBytes > 0 && c.MaxBufferedBytes > 0 && c.MaxBufferedBytes < int64(c.MaxRecordBytes) {
		// Still correct (a record larger than the budget is handled alone),
		// but a worker that handles its largest records one at a time is a
		// mistake to catch at start, not to find in a backlog.
		l.Fail("MAX_BUFFERED_BYTES", "must be at least MAX_RECORD_BYTES ("+strconv.Itoa(c.MaxRecordBytes)+"), or a record that size is handled alone, one at a time")
	}
	c.RetryMaxAttempts = l.Int("RETRY_MAX_ATTEMPTS", 1, 100)
	c.RetryInitialBackoff = l.Duration("RETRY_INITIAL_BACKOFF", positive)
	c.RetryMaxBackoff = l.Duration("RETRY_MAX_BACKOFF", positive)
	if c.RetryInitialBackoff > 0 && c.RetryMaxBackoff > 0 && policy.CheckBackoff(c.RetryInitialBackoff, c.RetryMaxBackoff) != nil {
		l.Fail("RETRY_MAX_BACKOFF", "must be at least RETRY_INITIAL_BACKOFF ("+c.RetryInitialBackoff.String()+")")
	}
	c.ExpectedReplicas = l.Int("KAFKA_EXPECTED_REPLICAS", 1, 10000)
}

// rateLimit reads a rate (sends per second, 0: no limit) and its burst.
// A Limit whose Rate is 0 stands for no limit.
func (l *loader) rateLimit(rate, burst string) ports.Limit {
	r, err := strconv.ParseFloat(l.value(rate), 64)
	if err != nil || math.IsNaN(r) || r < 0 || r > 1e6 {
		l.Fail(rate, "want messages per second, a number from 0 (no limit) to 1000000")
		return ports.Limit{}
	}
	b := l.Int(burst, 1, 1000000)
	lim := ports.Limit{Rate: r, Burst: b}
	if r > 0 && b > 0 && !lim.Valid() {
		l.Fail(burst, "with "+rate+"="+l.value(rate)+", the burst must fit in ten years of sends")
		return ports.Limit{}
	}
	return lim
}

// idempotency reads the settings of every store into c.Idempotency.
func (l *loader) idempotency(c *Config) {
	i := &c.Idempotency
	// Redis expiries (PX) count whole milliseconds: anything shorter would
	// be sent as 0, which Redis rejects.
	i.TTL = l.Duration("IDEMPOTENCY_TTL", time.Millisecond)
	i.ClaimTTL = l.Duration("IDEMPOTENCY_CLAIM_TTL", time.Millisecond)
	// Below a millisecond no Redis call can answer, and the worker would
	// fail open on every notification.
	i.Timeout = l.Duration("IDEMPOTENCY_TIMEOUT", time.Millisecond)
	i.FailureMode = l.OneOf("IDEMPOTENCY_FAILURE_MODE", "open", "closed")
	if l.value("IDEMPOTENCY_BREAKER_FAILURES") == "0" {
		// 0 would mean "no breaker", which is refused: the breaker is the
		// one layer that decides Redis is unavailable, and what bounds the
		// calls a silent Redis leaves waiting; without it, calls would hang
		// past IDEMPOTENCY_TIMEOUT.
		l.Fail("IDEMPOTENCY_BREAKER_FAILURES", "the circuit breaker can no longer be turned off: it is what keeps store calls within IDEMPOTENCY_TIMEOUT when Redis stops answering; want an integer from 1 to 1000")
	} else {
		i.BreakerFailures = l.Int("IDEMPOTENCY_BREAKER_FAILURES", 1, 1000)
	}
	i.BreakerCooldown = l.Duration("IDEMPOTENCY_BREAKER_COOLDOWN", positive)
	i.LedgerSize = l.Int("IDEMPOTENCY_LEDGER_SIZE", 1, 1000000)
}

// eventAge reads MAX_EVENT_AGE and its overrides, once c.Idempotency is
// read: neither may exceed IDEMPOTENCY_TTL.
func (l *loader) eventAge(c *Config) {
	i := &c.Idempotency
	// The default derives from IDEMPOTENCY_TTL; when that is bad, the one
	// problem is reported once, against the variable the operator set.
	if i.TTL > 0 || l.Set("MAX_EVENT_AGE") {
		c.MaxEventAge = l.Duration("MAX_EVENT_AGE", positive)
	}
	c.MaxEventAgeByType = l.ageOverrides("MAX_EVENT_AGE_OVERRIDES")
	if i.TTL <= 0 {
		return
	}
	if c.MaxEventAge > i.TTL {
		l.Fail("MAX_EVENT_AGE", "must be at most IDEMPOTENCY_TTL ("+i.TTL.String()+
			"): an older event may have been sent and its record forgotten, and a replay of it would be sent again")
	}
	for _, typ := range slices.Sorted(maps.Keys(c.MaxEventAgeByType)) {
		if d := c.MaxEventAgeByType[typ]; d > i.TTL {
			l.Fail("MAX_EVENT_AGE_OVERRIDES", fmt.Sprintf("%s=%v: must be at most IDEMPOTENCY_TTL (%v), or a replay after the store forgot an event could send it again", typ, d, i.TTL))
		}
	}
}

// tracing reads the OpenTelemetry variables into c.Tracing.
func (l *loader) tracing(c *Config) {
	tr := &c.Tracing
	tr.Endpoint = l.URL("OTEL_EXPORTER_OTLP_ENDPOINT")
	tr.TracesEndpoint = l.URL("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if tr.Protocol = l.String("OTEL_EXPORTER_OTLP_PROTOCOL"); tr.Protocol != "http/protobuf" {
		// Ignoring it would send HTTP to a gRPC port, and lose every span.
		l.Fail("OTEL_EXPORTER_OTLP_PROTOCOL", "only http/protobuf is supported (OTLP over HTTP, usually port 4318)")
		tr.Protocol = ""
	}
	tr.ServiceName = l.String("OTEL_SERVICE_NAME")
	tr.Headers = Secret(l.String("OTEL_EXPORTER_OTLP_HEADERS"))
	tr.TracesHeaders = Secret(l.String("OTEL_EXPORTER_OTLP_TRACES_HEADERS"))
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
// It passes over a URL already reported invalid. The opt-out spans the
// adapters, so the rule is the worker's: it reads the Twilio and Kafka
// settings by name.
func (l *loader) refuseClearText(c *Config) {
	if !l.bad("TWILIO_API_URL") && clearTextToAnotherHost(l.value("TWILIO_API_URL")) {
		l.refuse("TWILIO_API_URL", "the Twilio auth token")
	}
	// The traces headers replace the general ones when both are set.
	headers := "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
	if !l.Set(headers) {
		headers = "OTEL_EXPORTER_OTLP_HEADERS"
	}
	if l.Set(headers) && clearTextToAnotherHost(c.TracesURL()) {
		endpoint := "OTEL_EXPORTER_OTLP_ENDPOINT"
		if c.Tracing.TracesEndpoint != "" {
			endpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		}
		l.refuse(endpoint, headers)
	}
	tlsOn, _ := strconv.ParseBool(l.value("KAFKA_TLS"))
	if l.Set("KAFKA_BROKERS") && strings.EqualFold(l.value("KAFKA_SASL_MECHANISM"), "PLAIN") && !tlsOn {
		l.Fail("KAFKA_SASL_MECHANISM", "PLAIN without KAFKA_TLS=true would send the SASL password in clear text; set KAFKA_TLS=true, "+insecureOptOut)
	}
}

// insecureOptOut ends every reason refuseClearText gives.
const insecureOptOut = "or, in a test lab only, set ALLOW_INSECURE_TRANSPORT=true"

// refuse reports name, whose http:// URL to a host that is not loopback
// would carry credential in clear text.
func (l *loader) refuse(name, credential string) {
	l.Fail(name, "http:// to a host that is not loopback (127.0.0.0/8, ::1, localhost) would send "+credential+" in clear text; use https://, "+insecureOptOut)
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
// Load reports every bad variable rather than the first. It is the
// ports.Settings the providers read their own settings through.
type loader struct {
	lookup    func(string) (string, bool)
	problems  []Problem
	placeheld map[string]bool // variables holding the placeholder
	// declared are the variables providers declared, besides Reference.
	declared map[string]Var
	// configured holds, by name, whether each provider's settings
	// configure it (its Load's answer).
	configured map[string]bool
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

// The loader's getters (Set, String, Bool, Int, Duration, OneOf,
// HostPorts, URL) and Fail are ports.Settings', as documented there.

func (l *loader) Set(name string) bool { return l.explicit(name) != "" }

// value returns name's effective value: the environment's, or else the
// default from Reference with ${NAME} references expanded.
func (l *loader) value(name string) string {
	if v := l.explicit(name); v != "" {
		return v
	}
	return os.Expand(l.varOf(name).Default, l.value)
}

// placeholder marks a value a manifest ships for the operator to replace
// (deploy/k8s writes REPLACE_ME). Such a value can parse (REPLACE_ME:9092
// is a host:port), so it is refused by name, wherever it stands.
const placeholder = "REPLACE_ME"

// placeholders reports each variable whose value holds the placeholder.
// Fail reports nothing more against such a variable: what else is wrong
// with it is the placeholder.
func (l *loader) placeholders() {
	for _, v := range slices.Concat(Reference, slices.SortedFunc(maps.Values(l.declared), byName)) {
		if strings.Contains(l.explicit(v.Name), placeholder) {
			l.Fail(v.Name, "holds the placeholder "+placeholder+": set the real value")
			if l.placeheld == nil {
				l.placeheld = map[string]bool{}
			}
			l.placeheld[v.Name] = true
		}
	}
}

// Fail records a problem with name's effective value, masked if secret.
func (l *loader) Fail(name, reason string) {
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
	panic("config: " + name + " is read but missing from Reference and from every provider's Settings")
}

func (l *loader) String(name string) string { return l.value(name) }

func (l *loader) Bool(name string) bool {
	b, err := strconv.ParseBool(l.value(name))
	if err != nil {
		l.Fail(name, "want true or false")
	}
	return b
}

func (l *loader) Int(name string, lo, hi int) int {
	n, err := strconv.Atoi(l.value(name))
	if err != nil || n < lo || n > hi {
		l.Fail(name, fmt.Sprintf("want an integer from %d to %d", lo, hi))
		return 0
	}
	return n
}

// positive is the least duration that is not zero, for duration's lo.
const positive = time.Nanosecond

// Duration returns 0 for a bad value, which the cross-checks in Load take
// as "already reported".
func (l *loader) Duration(name string, lo time.Duration) time.Duration {
	d, err := time.ParseDuration(l.value(name))
	switch {
	case err != nil:
		l.Fail(name, "want a duration such as 500ms, 30s or 48h")
		return 0
	case d < lo && lo == positive:
		l.Fail(name, "must be positive")
		return 0
	case d < lo:
		l.Fail(name, "must be at least "+lo.String())
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
			l.Fail(name, fmt.Sprintf("entry %d (%q): want type=duration, such as shipment.out_for_delivery=6h", n+1, e))
		case err != nil || d <= 0:
			l.Fail(name, fmt.Sprintf("entry %d (%q): want a positive duration such as 6h after the =", n+1, e))
		case out[typ] != 0:
			l.Fail(name, fmt.Sprintf("entry %d (%q): type %s is given twice", n+1, e, typ))
		default:
			out[typ] = d
		}
	}
	return out
}

func (l *loader) OneOf(name string, allowed ...string) string {
	v := l.value(name)
	if v == "" || slices.Contains(allowed, v) {
		return v
	}
	l.Fail(name, "want one of "+strings.Join(allowed, ", "))
	return ""
}

func (l *loader) HostPorts(name string) []string {
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
				l.Fail(name, "want host:port")
			} else {
				l.Fail(name, fmt.Sprintf("want comma-separated host:port; entry %d (%q) is not", n+1, e))
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
		l.Fail(name, "want [host]:port, such as :8080, or off")
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
		l.Fail(name, "want [host]:port, such as :6060 (loopback) or 0.0.0.0:6060, or empty for off")
		return ""
	}
	if host, port, _ := net.SplitHostPort(v); host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return v
}

func (l *loader) URL(name string) string {
	v := l.value(name)
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		l.Fail(name, "want an absolute http:// or https:// URL")
		return ""
	}
	// Credentials in the URL would be printed wherever the URL is (the
	// start-up line, provider errors), and a query or fragment would be
	// dropped when request paths are joined on: refuse both.
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery {
		l.Fail(name, "want a URL without user info, query or fragment")
		if u.User != nil {
			// The user info may hold a password: do not echo it back.
			l.problems[len(l.problems)-1].Value = masked
		}
		return ""
	}
	return v
}

// byName orders variables by name.
func byName(a, b Var) int { return strings.Compare(a.Name, b.Name) }
