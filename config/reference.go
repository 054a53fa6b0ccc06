package config

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/push"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// Var is one environment variable the worker reads, a provider's setting
// or one of the worker's own; an empty Default means the feature it
// configures is off, which Meaning (Markdown, for the README) explains.
type Var = ports.Setting

// Providers are the adapters built into the worker, each declaring,
// reading and checking its own settings (ports.Provider): the event
// source, the stores, the notifiers. Load reads every one's settings; the
// worker's channel table and stores name the same values.
var Providers = []ports.Provider{kafka.Provider, redis.Provider, memory.Provider, twilio.Provider, smtp.Provider, push.Provider}

// Reference lists every variable Load reads, in the order the README
// shows them: the adapters' choice, Kafka's settings (the first
// provider's), the worker's own for records and their store, the other
// providers' settings, then the rest. Load takes its defaults from here,
// and the README table is rendered from here (the comment above the table
// says how), so a new variable is its entry, a provider's or the worker's,
// plus its reading.
var Reference = slices.Concat([]Var{
	{Name: "EVENT_SOURCE", Default: "kafka", Meaning: "Where events come from: `kafka` (the brokers in `KAFKA_BROKERS`, which must be set) or `embedded` (an in-process broker for development, which loses everything on restart; `KAFKA_BROKERS` must be empty; only a development build, `-tags devbroker` as `make run` builds, has one: the production binary refuses it with exit 2)."},
	{Name: "IDEMPOTENCY_STORE", Meaning: "Where sent records are kept: `redis` (`REDIS_URL`, which must be set) or `memory` (this process only, forgotten on restart; `REDIS_URL` must be empty). Empty: `redis` when `REDIS_URL` is set; else `memory` when no real provider is configured (SMS and email both on the console: the development run); else refused at start, naming `REDIS_URL`: with Twilio or SMTP configured, an in-memory store would send again whatever a restart replays. Set to `memory` beside Twilio or SMTP, it is used, for a test lab, and the worker starts with the warning `memory_store_with_real_providers`."},
	{Name: "SMS_NOTIFIER", Meaning: "How SMS is sent: `twilio` (the `TWILIO_*` variables, which must be set) or `console` (printed, reaching no customer). Empty: `twilio` when Twilio is configured, else `console`, which is refused with the `redis` store: its sent records would suppress the real SMS for `IDEMPOTENCY_TTL` once Twilio is configured. Setting `console` with `redis` is allowed, for a test lab, and logged (`console_notifier_shared_store`)."},
	{Name: "EMAIL_NOTIFIER", Meaning: "How email is sent: `smtp` (`SMTP_HOST`, which must be set) or `console`. Empty: `smtp` when `SMTP_HOST` is set, else `console`, refused with the `redis` store as for `SMS_NOTIFIER`."},
}, providerVars(Providers[:1]...), []Var{
	{Name: "MAX_IN_FLIGHT", Default: "64", Meaning: "Most records this worker handles at once, across all its partitions (1 to 4096). Records with the same key (one shipment) still go one at a time, in order. It also sizes the pool of connections kept open to Twilio."},
	{Name: "MAX_RECORD_BYTES", Default: strconv.Itoa(policy.DefaultMaxRecordBytes), Meaning: "Largest record value handled (1 KiB to 64 MiB); a larger one is poison and goes to the dead letter topic."},
	{Name: "MAX_BUFFERED_BYTES", Default: "33554432", Meaning: "Most bytes of records this worker holds, across all its partitions: fetched and not yet handled, in the handler included (1 MiB to 1 GiB, at least `MAX_RECORD_BYTES`). Once spent, the worker stops fetching until records finish; Kafka's read-ahead is sized from it. The default (32 MiB) keeps a worker under 192 MiB whatever the backlog; see docs/capacity.md."},
	{Name: "RETRY_MAX_ATTEMPTS", Default: strconv.Itoa(policy.DefaultRetryMaxAttempts), Meaning: "Attempts at a record whose send failed in a retryable way before it is dead-lettered (1 to 100; 1: no retry). The default rides out about a minute of provider errors with the default backoff."},
	{Name: "RETRY_INITIAL_BACKOFF", Default: policy.DefaultRetryInitialBackoff.String(), Meaning: "Wait before the first retry; it doubles on each retry."},
	{Name: "RETRY_MAX_BACKOFF", Default: policy.DefaultRetryMaxBackoff.String(), Meaning: "Cap on the wait between retries. At least `RETRY_INITIAL_BACKOFF`."},
	{Name: "KAFKA_EXPECTED_REPLICAS", Default: "1", Meaning: "How many replicas of the worker share the consumer group (1 to 10000): while Redis cannot answer the rate limiter, each replica paces a sender at `SMS_RATE_LIMIT` (or `EMAIL_RATE_LIMIT`) divided by it, logged `rate_limit_fallback`. Set it to the Deployment's replica count."},
	{Name: "SMS_RATE_LIMIT", Default: "0", Meaning: "SMS per second the sender (`TWILIO_FROM_NUMBER`, or `TWILIO_MESSAGING_SERVICE_SID`) may send, shared by every replica through Redis (with the memory store, per process); a number, fractions allowed (0.5: one every 2 s). 0: no limit. A notification takes its turn after its claim and waits for it at most 5 s (less when `IDEMPOTENCY_CLAIM_TTL` leaves less); without a turn its record waits and is tried again later, spending no retry."},
	{Name: "SMS_RATE_BURST", Default: "1", Meaning: "SMS the sender may send at once after an idle spell, beyond `SMS_RATE_LIMIT`'s steady pace (1 to 1000000)."},
	{Name: "EMAIL_RATE_LIMIT", Default: "0", Meaning: "Emails per second through the SMTP relay (`SMTP_HOST`), as `SMS_RATE_LIMIT`. 0: no limit."},
	{Name: "EMAIL_RATE_BURST", Default: "1", Meaning: "Emails the relay may take at once after an idle spell (1 to 1000000)."},
	{Name: "IDEMPOTENCY_TTL", Default: durationText(domain.DefaultTTL), Meaning: "How long a sent record suppresses a replay (ADR-0006). At least `IDEMPOTENCY_CLAIM_TTL`."},
	{Name: "MAX_EVENT_AGE", Default: "${IDEMPOTENCY_TTL}", Meaning: "Age past which an event is stale: skipped before any claim or send, logged `stale_event_skipped`, counted, and acknowledged (not dead-lettered). Its age runs from `occurred_at`, or from the Kafka record's timestamp when the event has none. At most `IDEMPOTENCY_TTL`, so that a replay after the store forgot an event cannot send it again. An `occurred_at` more than 5 minutes ahead of the worker's clock is poison."},
	{Name: "MAX_EVENT_AGE_OVERRIDES", Meaning: "Per-type maximum ages, comma-separated `type=duration` (`shipment.out_for_delivery=6h,shipment.delayed=12h`); each positive and at most `IDEMPOTENCY_TTL`. Types not named take `MAX_EVENT_AGE`."},
	{Name: "IDEMPOTENCY_CLAIM_TTL", Default: durationText(domain.DefaultClaimTTL), Meaning: "How long an in-flight claim lives, so one left by a crashed worker expires. Must exceed `SEND_TIMEOUT` + 2 × `IDEMPOTENCY_TIMEOUT` + " + durationText(domain.LeaseClockSkew) + ": the lease starts before the claim's round trip and must outlive it, the send it guards, the round trip of the write that records it, and the clock skew allowed between workers."},
	{Name: "IDEMPOTENCY_TIMEOUT", Default: durationText(domain.DefaultStoreTimeout), Meaning: "Limit on each store call (at least 1ms); past it the failure mode applies."},
	{Name: "IDEMPOTENCY_FAILURE_MODE", Default: string(domain.FailOpen), Meaning: "When the store cannot answer: `open` sends anyway and logs `idempotency_check_unavailable` (a duplicate is possible); `closed` retries the record later (a notification is delayed)."},
	{Name: "IDEMPOTENCY_BREAKER_FAILURES", Default: "5", Meaning: "Consecutive store failures that open the circuit breaker, after which the failure mode applies without waiting for the timeout (1 to 1000). The breaker cannot be turned off: it also opens once more than `MAX_IN_FLIGHT` + this many calls failed within the time Redis may keep an unanswered command (13 s by default), which keeps every store call within `IDEMPOTENCY_TIMEOUT` when Redis stops answering."},
	{Name: "IDEMPOTENCY_BREAKER_COOLDOWN", Default: "1s", Meaning: "How long the open breaker waits before it tests whether the store has recovered (a `PING` to every Redis node, which closes it): a store that answers again is used again within one cooldown."},
	{Name: "IDEMPOTENCY_LEDGER_SIZE", Default: strconv.Itoa(domain.DefaultLedgerSize), Meaning: "Most sent records the worker owes the store before it stops taking records (1 to 1000000). While the store cannot take a sent record, the worker keeps it, suppresses its replays and writes it when the store answers again; once this many are owed, a new record waits, unsent and retried without spending its retries, until the store takes some, while the records already taken finish, so what they still send may be owed beyond it. Nothing owed is dropped. About 200 bytes each."},
}, providerVars(Providers[1:]...), []Var{
	{Name: "ALLOW_INSECURE_TRANSPORT", Default: "false", Meaning: "`true` lets credentials cross the network in clear text, which the worker otherwise refuses at start: an `http://` `TWILIO_API_URL` whose host is not loopback (127.0.0.0/8, ::1, `localhost`), OTLP headers (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TRACES_HEADERS`) to an `http://` traces endpoint whose host is not loopback, and `KAFKA_SASL_MECHANISM=PLAIN` without `KAFKA_TLS=true`. For a test lab only; the worker logs `insecure_transport_allowed` at start."},
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Meaning: "Base `http(s)` URL of an OTLP/HTTP receiver (a collector, port 4318); traces go to its `/v1/traces`. Empty (and `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` empty): tracing is off, at no cost. The scheme alone decides TLS: `OTEL_EXPORTER_OTLP_INSECURE` has no effect on OTLP/HTTP. The exporter reads the other standard `OTEL_EXPORTER_OTLP_*` variables (timeout, compression, certificates), the SDK `OTEL_TRACES_SAMPLER` and `OTEL_RESOURCE_ATTRIBUTES`."},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Meaning: "Full `http(s)` URL traces are sent to, path included; wins over `OTEL_EXPORTER_OTLP_ENDPOINT`."},
	{Name: "OTEL_EXPORTER_OTLP_HEADERS", Meaning: "Headers sent with every export, `key=value` pairs separated by commas (usually the collector's API key). Refused at start with an `http://` traces endpoint whose host is not loopback (see `ALLOW_INSECURE_TRANSPORT`).", Secret: true},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_HEADERS", Meaning: "Headers for traces only; replace `OTEL_EXPORTER_OTLP_HEADERS` when set. Refused the same way.", Secret: true},
	{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Default: "http/protobuf", Meaning: "OTLP transport; `http/protobuf` is the only one this worker speaks (gRPC is refused at start rather than ignored)."},
	{Name: "OTEL_SERVICE_NAME", Default: "notification-worker", Meaning: "`service.name` of the traces."},
	{Name: "SEND_TIMEOUT", Default: durationText(domain.DefaultSendTimeout), Meaning: "Limit on each provider call (Twilio request, SMTP session)."},
	{Name: "RECONCILE_TIMEOUT", Default: durationText(domain.DefaultReconcileFor), Meaning: "How long after a send whose outcome is unknown (the provider may have it; no answer came) a provider whose list could not tell is asked a last time, the record waiting meanwhile, before `UNKNOWN_OUTCOME_POLICY` applies."},
	{Name: "UNKNOWN_OUTCOME_POLICY", Default: string(domain.PolicyResend), Meaning: "What to do with a send whose outcome nobody can tell (SMTP, which cannot be asked; Twilio past `RECONCILE_TIMEOUT`): `resend` (logged `unknown_outcome_resent`; an email keeps its Message-ID) or `dead_letter`."},
	{Name: "SHUTDOWN_TIMEOUT", Default: "30s", Meaning: "After SIGTERM (or a rebalance), how long in-flight sends may take to finish before the worker exits; at SIGTERM, what is left of it after they finished goes to a final attempt at the sent records still owed to the store (at least one try), and those still owed then are logged `owed_records_lost`. At least `SEND_TIMEOUT` + 2 × `IDEMPOTENCY_TIMEOUT`, so a record in hand can claim, send and be recorded."},
	{Name: "STARTUP_TIMEOUT", Default: "60s", Meaning: "How long the worker keeps trying, at start, to reach Redis and Kafka (at least 1s): each failed attempt is logged `worker_start_waiting` and tried again with backoff. Past it the worker logs `worker_start_failed`, naming the dependency and what to check, and exits 3. A Redis attempt under way when it ends is let finish (a few seconds: its dial timeout)."},
	{Name: "TEMPLATES_DIR", Meaning: "Directory of templates overriding the embedded ones, checked at start with the other variables (a directory that cannot be read, or templates that do not parse or lack a channel's text, are refused). Empty: embedded templates only."},
	{Name: "HTTP_ADDR", Default: ":8080", Meaning: "Listen address of `/healthz`, `/readyz` and `/metrics`. `off` disables the HTTP server."},
	{Name: "DEBUG_ADDR", Meaning: "Listen address of a debug server serving Go's `net/http/pprof` under `/debug/pprof/` (goroutine dumps, CPU and heap profiles: the image has no shell for `kill -QUIT`), on its own listener, never on `HTTP_ADDR`. Empty: off. Without a host (`:6060`) it listens on loopback only (127.0.0.1), reached with `kubectl port-forward`; give a host to listen elsewhere."},
	{Name: "LOG_LEVEL", Default: "info", Meaning: "`debug`, `info`, `warn` or `error`."},
	{Name: "LOG_FORMAT", Default: "json", Meaning: "`json` (JSON lines on stdout) or `text`."},
})

// providerVars returns the variables providers declare, in their order:
// the Variable of a notifier whose channel is off unless configured, then
// each one's Settings. The other choices' variables (EVENT_SOURCE,
// IDEMPOTENCY_STORE, SMS_NOTIFIER, EMAIL_NOTIFIER) are the worker's own:
// Reference documents them with the rules that resolve them.
func providerVars(providers ...ports.Provider) []Var {
	var out []Var
	for _, p := range providers {
		if notifier(p) && !p.AlwaysOn {
			out = append(out, Var{Name: p.Variable, Meaning: "How the " + p.Name + " channel's notifications are sent: `" + p.Name + "` or `console`; unset, `" + p.Name + "` when configured, else the channel is off."})
		}
		out = append(out, p.Settings...)
	}
	return out
}

// notifier reports whether p is a channel's notifier.
func notifier(p ports.Provider) bool {
	return p.Variable != ports.SourceVariable && p.Variable != ports.StoreVariable
}

// reference indexes Reference by name for Load.
var reference = index(Reference)

// index returns vars by name.
func index(vars []Var) map[string]Var {
	m := make(map[string]Var, len(vars))
	for _, v := range vars {
		m[v.Name] = v
	}
	return m
}

// durationText writes d as an operator would: "48h", "2m", "60s", "200ms",
// not time.Duration's "48h0m0s".
func durationText(d time.Duration) string {
	if d < 2*time.Minute && d >= time.Second && d%time.Second == 0 {
		return strconv.Itoa(int(d/time.Second)) + "s"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
