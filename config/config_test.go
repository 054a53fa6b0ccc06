package config_test

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/config"
)

// Each provider's settings in a Config, as its adapter reads them.
func kafkaOf(c config.Config) kafka.Config   { return kafka.LoadSettings(c.Settings()) }
func redisOf(c config.Config) redis.Config   { return redis.LoadSettings(c.Settings()) }
func twilioOf(c config.Config) twilio.Config { return twilio.LoadSettings(c.Settings()) }
func smtpOf(c config.Config) smtp.Config     { return smtp.LoadSettings(c.Settings()) }

// env returns a lookup over kv, as os.LookupEnv would answer it.
func env(kv map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := kv[name]
		return v, ok
	}
}

// MustLoad loads kv and fails the test on any error.
func MustLoad(tb testing.TB, kv map[string]string) config.Config {
	tb.Helper()
	c, err := config.Load(env(kv))
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	return c
}

// MustFail loads kv and returns the *config.Error it must produce.
func MustFail(tb testing.TB, kv map[string]string) *config.Error {
	tb.Helper()
	_, err := config.Load(env(kv))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		tb.Fatalf("Load: got error %v, want a *config.Error", err)
	}
	return cerr
}

// with returns base plus kv; base is not modified.
func with(base map[string]string, kv map[string]string) map[string]string {
	m := maps.Clone(base)
	maps.Copy(m, kv)
	return m
}

// Secrets that look like the real thing, so a leak of any of them in any
// rendering is found by a plain substring search.
const (
	redisPassword = "r3dis-S3cret-pw"
	twilioToken   = "9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	smtpPassword  = "smtp-Pa55word "
	saslPassword  = "sasl-Pa55word!"
	otlpKey       = "otlp-K3y-0f-the-collector"
	pushKey       = "push-K3y-0f-the-gateway"
)

// fullEnv sets every variable in Reference to a valid value that differs from
// its default, the way a production deployment would.
var fullEnv = map[string]string{
	"EVENT_SOURCE":                   "embedded",
	"IDEMPOTENCY_STORE":              "redis",
	"SMS_NOTIFIER":                   "twilio",
	"EMAIL_NOTIFIER":                 "smtp",
	"KAFKA_BROKERS":                  "k1.internal:9092, k2.internal:9093",
	"KAFKA_TOPIC":                    "orders-v2",
	"KAFKA_GROUP_ID":                 "nw-test",
	"KAFKA_CLIENT_ID":                "nw-test-client",
	"HOSTNAME":                       "nw-test-0",
	"DEBUG_ADDR":                     ":6061",
	"KAFKA_DLQ_TOPIC":                "orders-v2-dead",
	"KAFKA_TLS":                      "true",
	"KAFKA_TLS_CA_FILE":              caFile,
	"KAFKA_SASL_MECHANISM":           "scram-sha-512",
	"KAFKA_SASL_USERNAME":            "nw",
	"KAFKA_SASL_PASSWORD":            saslPassword,
	"KAFKA_REBALANCE_STRATEGY":       "range",
	"KAFKA_GROUP_INSTANCE_ID":        "notification-worker-2",
	"KAFKA_SESSION_TIMEOUT":          "45s",
	"MAX_IN_FLIGHT":                  "17",
	"MAX_RECORD_BYTES":               "2097152",
	"MAX_BUFFERED_BYTES":             "8388608",
	"KAFKA_EXPECTED_REPLICAS":        "3",
	"SMS_RATE_LIMIT":                 "0.5",
	"SMS_RATE_BURST":                 "4",
	"EMAIL_RATE_LIMIT":               "20",
	"EMAIL_RATE_BURST":               "5",
	"RETRY_MAX_ATTEMPTS":             "9",
	"RETRY_INITIAL_BACKOFF":          "150ms",
	"RETRY_MAX_BACKOFF":              "45s",
	"REDIS_URL":                      "rediss://worker:" + redisPassword + "@redis.internal:6380/2",
	"IDEMPOTENCY_TTL":                "72h",
	"IDEMPOTENCY_CLAIM_TTL":          "90s",
	"IDEMPOTENCY_TIMEOUT":            "350ms",
	"IDEMPOTENCY_FAILURE_MODE":       "closed",
	"IDEMPOTENCY_KEY_PREFIX":         "nw-test:",
	"IDEMPOTENCY_KEY_FORMAT":         "readable",
	"IDEMPOTENCY_COMPACT_KEY_PREFIX": "x",
	"IDEMPOTENCY_READ_BOTH_FORMATS":  "false",
	"IDEMPOTENCY_MIN_REPLICAS":       "2",
	"IDEMPOTENCY_WAIT_AOF":           "true",
	"REDIS_SENTINEL_ADDRS":           "s1.internal:26379, s2.internal:26379",
	"REDIS_SENTINEL_MASTER":          "idem",
	"REDIS_SENTINEL_USERNAME":        "sentinel-user",
	"REDIS_SENTINEL_PASSWORD":        "sentinel-secret",
	"IDEMPOTENCY_BREAKER_FAILURES":   "7",
	"IDEMPOTENCY_BREAKER_COOLDOWN":   "3s",
	"IDEMPOTENCY_LEDGER_SIZE":        "2500",
	"IDEMPOTENCY_ALLOW_EVICTION":     "true",
	"MAX_EVENT_AGE":                  "36h",
	"MAX_EVENT_AGE_OVERRIDES":        "shipment.out_for_delivery=6h, shipment.delayed=12h",
	"TWILIO_ACCOUNT_SID":             "AC0123456789abcdef0123456789abcdef",
	"TWILIO_AUTH_TOKEN":              twilioToken,
	"TWILIO_FROM_NUMBER":             "+15557654321",
	"TWILIO_MESSAGING_SERVICE_SID":   "MG0123456789abcdef0123456789abcdef",
	"TWILIO_API_URL":                 "http://twilio-double:4010/",
	"TWILIO_LIST_LAG":                "90s",
	"SMTP_HOST":                      "smtp.internal",
	"SMTP_PORT":                      "2525",
	"SMTP_USERNAME":                  "mailer",
	"SMTP_PASSWORD":                  smtpPassword,
	"SMTP_FROM":                      "Harborlight <noreply@harborlight.example>",
	"SMTP_TLS_POLICY":                "opportunistic",
	"PUSH_NOTIFIER":                  "push",
	"PUSH_API_URL":                   "https://push.internal",
	"PUSH_API_KEY":                   pushKey,
	"PUSH_CA_FILE":                   caFile,
	"ALLOW_INSECURE_TRANSPORT":       "true", // TWILIO_API_URL is an http:// double
	"SEND_TIMEOUT":                   "7s",
	"RECONCILE_TIMEOUT":              "5m",
	"UNKNOWN_OUTCOME_POLICY":         "dead_letter",
	"SHUTDOWN_TIMEOUT":               "45s",
	"STARTUP_TIMEOUT":                "90s",
	"TEMPLATES_DIR":                  "/srv/templates",
	"HTTP_ADDR":                      "127.0.0.1:9090",
	"LOG_LEVEL":                      "DEBUG",
	"LOG_FORMAT":                     "text",
}

// field is how a test reads one variable's result out of a Config.
type field struct {
	get  func(config.Config) any
	full any // what fullEnv must yield
}

// fields maps every variable to the Config field it sets. TestReference
// checks that its keys are exactly Reference's names, so a variable added to
// Reference without a field here (or the reverse) fails that test.
var fields = map[string]field{
	"EVENT_SOURCE":                   {func(c config.Config) any { return c.Adapters.EventSource }, "embedded"},
	"IDEMPOTENCY_STORE":              {func(c config.Config) any { return c.Adapters.Store }, "redis"},
	"SMS_NOTIFIER":                   {func(c config.Config) any { return c.Notifier("SMS_NOTIFIER") }, "twilio"},
	"EMAIL_NOTIFIER":                 {func(c config.Config) any { return c.Notifier("EMAIL_NOTIFIER") }, "smtp"},
	"KAFKA_BROKERS":                  {func(c config.Config) any { return kafkaOf(c).Brokers }, []string{"k1.internal:9092", "k2.internal:9093"}},
	"KAFKA_TOPIC":                    {func(c config.Config) any { return kafkaOf(c).Topic }, "orders-v2"},
	"KAFKA_GROUP_ID":                 {func(c config.Config) any { return kafkaOf(c).GroupID }, "nw-test"},
	"KAFKA_CLIENT_ID":                {func(c config.Config) any { return kafkaOf(c).ClientID }, "nw-test-client"},
	"HOSTNAME":                       {func(c config.Config) any { return c.Settings().String("HOSTNAME") }, "nw-test-0"},
	"DEBUG_ADDR":                     {func(c config.Config) any { return c.DebugAddr }, "127.0.0.1:6061"},
	"KAFKA_DLQ_TOPIC":                {func(c config.Config) any { return kafkaOf(c).DLQTopic }, "orders-v2-dead"},
	"KAFKA_TLS":                      {func(c config.Config) any { return kafkaOf(c).TLS != nil }, true},
	"KAFKA_TLS_CA_FILE":              {func(c config.Config) any { return c.Settings().String("KAFKA_TLS_CA_FILE") }, caFile},
	"KAFKA_SASL_MECHANISM":           {func(c config.Config) any { return kafkaOf(c).SASLMechanism }, "SCRAM-SHA-512"},
	"KAFKA_SASL_USERNAME":            {func(c config.Config) any { return kafkaOf(c).SASLUsername }, "nw"},
	"KAFKA_SASL_PASSWORD":            {func(c config.Config) any { return kafkaOf(c).SASLPassword }, saslPassword},
	"KAFKA_REBALANCE_STRATEGY":       {func(c config.Config) any { return kafkaOf(c).RebalanceStrategy }, "range"},
	"KAFKA_GROUP_INSTANCE_ID":        {func(c config.Config) any { return kafkaOf(c).GroupInstanceID }, "notification-worker-2"},
	"KAFKA_SESSION_TIMEOUT":          {func(c config.Config) any { return kafkaOf(c).SessionTimeout }, 45 * time.Second},
	"MAX_IN_FLIGHT":                  {func(c config.Config) any { return c.MaxInFlight }, 17},
	"MAX_RECORD_BYTES":               {func(c config.Config) any { return c.MaxRecordBytes }, 2097152},
	"MAX_BUFFERED_BYTES":             {func(c config.Config) any { return c.MaxBufferedBytes }, int64(8388608)},
	"KAFKA_EXPECTED_REPLICAS":        {func(c config.Config) any { return c.ExpectedReplicas }, 3},
	"SMS_RATE_LIMIT":                 {func(c config.Config) any { return c.RateLimit.SMS.Rate }, 0.5},
	"SMS_RATE_BURST":                 {func(c config.Config) any { return c.RateLimit.SMS.Burst }, 4},
	"EMAIL_RATE_LIMIT":               {func(c config.Config) any { return c.RateLimit.Email.Rate }, 20.0},
	"EMAIL_RATE_BURST":               {func(c config.Config) any { return c.RateLimit.Email.Burst }, 5},
	"RETRY_MAX_ATTEMPTS":             {func(c config.Config) any { return c.RetryMaxAttempts }, 9},
	"RETRY_INITIAL_BACKOFF":          {func(c config.Config) any { return c.RetryInitialBackoff }, 150 * time.Millisecond},
	"RETRY_MAX_BACKOFF":              {func(c config.Config) any { return c.RetryMaxBackoff }, 45 * time.Second},
	"REDIS_URL":                      {func(c config.Config) any { return redisOf(c).URL }, "rediss://worker:" + redisPassword + "@redis.internal:6380/2"},
	"IDEMPOTENCY_TTL":                {func(c config.Config) any { return c.Idempotency.TTL }, 72 * time.Hour},
	"IDEMPOTENCY_CLAIM_TTL":          {func(c config.Config) any { return c.Idempotency.ClaimTTL }, 90 * time.Second},
	"IDEMPOTENCY_TIMEOUT":            {func(c config.Config) any { return c.Idempotency.Timeout }, 350 * time.Millisecond},
	"IDEMPOTENCY_FAILURE_MODE":       {func(c config.Config) any { return c.Idempotency.FailureMode }, "closed"},
	"IDEMPOTENCY_MIN_REPLICAS":       {func(c config.Config) any { return redisOf(c).MinReplicas }, 2},
	"IDEMPOTENCY_WAIT_AOF":           {func(c config.Config) any { return redisOf(c).WaitAOF }, true},
	"REDIS_SENTINEL_ADDRS":           {func(c config.Config) any { return redisOf(c).SentinelAddrs }, []string{"s1.internal:26379", "s2.internal:26379"}},
	"REDIS_SENTINEL_MASTER":          {func(c config.Config) any { return redisOf(c).SentinelMaster }, "idem"},
	"REDIS_SENTINEL_USERNAME":        {func(c config.Config) any { return redisOf(c).SentinelUsername }, "sentinel-user"},
	"REDIS_SENTINEL_PASSWORD":        {func(c config.Config) any { return redisOf(c).SentinelPassword }, "sentinel-secret"},
	"IDEMPOTENCY_KEY_PREFIX":         {func(c config.Config) any { return redisOf(c).KeyPrefix }, "nw-test:"},
	"IDEMPOTENCY_KEY_FORMAT":         {func(c config.Config) any { return redisOf(c).Format.String() }, "readable"},
	"IDEMPOTENCY_COMPACT_KEY_PREFIX": {func(c config.Config) any { return redisOf(c).CompactPrefix }, "x"},
	"IDEMPOTENCY_READ_BOTH_FORMATS":  {func(c config.Config) any { return redisOf(c).ReadBoth }, false},
	"IDEMPOTENCY_BREAKER_FAILURES":   {func(c config.Config) any { return c.Idempotency.BreakerFailures }, 7},
	"IDEMPOTENCY_BREAKER_COOLDOWN":   {func(c config.Config) any { return c.Idempotency.BreakerCooldown }, 3 * time.Second},
	"IDEMPOTENCY_LEDGER_SIZE":        {func(c config.Config) any { return c.Idempotency.LedgerSize }, 2500},
	"IDEMPOTENCY_ALLOW_EVICTION":     {func(c config.Config) any { return redisOf(c).Health.AllowEviction }, true},
	"MAX_EVENT_AGE":                  {func(c config.Config) any { return c.MaxEventAge }, 36 * time.Hour},
	"MAX_EVENT_AGE_OVERRIDES": {func(c config.Config) any { return c.MaxEventAgeByType }, map[string]time.Duration{
		"shipment.out_for_delivery": 6 * time.Hour, "shipment.delayed": 12 * time.Hour}},
	"TWILIO_ACCOUNT_SID":           {func(c config.Config) any { return twilioOf(c).AccountSID }, "AC0123456789abcdef0123456789abcdef"},
	"TWILIO_AUTH_TOKEN":            {func(c config.Config) any { return twilioOf(c).AuthToken }, twilioToken},
	"TWILIO_FROM_NUMBER":           {func(c config.Config) any { return twilioOf(c).From }, "+15557654321"},
	"TWILIO_MESSAGING_SERVICE_SID": {func(c config.Config) any { return twilioOf(c).MessagingServiceSID }, "MG0123456789abcdef0123456789abcdef"},
	"TWILIO_API_URL":               {func(c config.Config) any { return twilioOf(c).APIURL }, "http://twilio-double:4010"},
	"TWILIO_LIST_LAG":              {func(c config.Config) any { return twilioOf(c).ListLag }, 90 * time.Second},
	"SMTP_HOST":                    {func(c config.Config) any { return smtpOf(c).Host }, "smtp.internal"},
	"SMTP_PORT":                    {func(c config.Config) any { return smtpOf(c).Port }, 2525},
	"SMTP_USERNAME":                {func(c config.Config) any { return smtpOf(c).Username }, "mailer"},
	"SMTP_PASSWORD":                {func(c config.Config) any { return smtpOf(c).Password }, smtpPassword},
	"SMTP_FROM":                    {func(c config.Config) any { return smtpOf(c).From }, "Harborlight <noreply@harborlight.example>"},
	"SMTP_TLS_POLICY":              {func(c config.Config) any { return smtpOf(c).TLSPolicy }, "opportunistic"},
	"PUSH_NOTIFIER":                {func(c config.Config) any { return c.Notifier("PUSH_NOTIFIER") }, "push"},
	"PUSH_API_URL":                 {func(c config.Config) any { return c.Settings().URL("PUSH_API_URL") }, "https://push.internal"},
	"PUSH_API_KEY":                 {func(c config.Config) any { return c.Settings().String("PUSH_API_KEY") }, pushKey},
	"PUSH_CA_FILE":                 {func(c config.Config) any { return c.Settings().String("PUSH_CA_FILE") }, caFile},
	"ALLOW_INSECURE_TRANSPORT":     {func(c config.Config) any { return c.AllowInsecureTransport }, true},
	"SEND_TIMEOUT":                 {func(c config.Config) any { return c.SendTimeout }, 7 * time.Second},
	"RECONCILE_TIMEOUT":            {func(c config.Config) any { return c.ReconcileTimeout }, 5 * time.Minute},
	"UNKNOWN_OUTCOME_POLICY":       {func(c config.Config) any { return c.UnknownOutcomePolicy }, "dead_letter"},
	"SHUTDOWN_TIMEOUT":             {func(c config.Config) any { return c.ShutdownTimeout }, 45 * time.Second},
	"STARTUP_TIMEOUT":              {func(c config.Config) any { return c.StartupTimeout }, 90 * time.Second},
	"TEMPLATES_DIR":                {func(c config.Config) any { return c.TemplatesDir }, "/srv/templates"},
	"HTTP_ADDR":                    {func(c config.Config) any { return c.HTTPAddr }, "127.0.0.1:9090"},
	"LOG_LEVEL":                    {func(c config.Config) any { return c.LogLevel }, slog.LevelDebug},
	"LOG_FORMAT":                   {func(c config.Config) any { return c.LogFormat }, "text"},
}

// The tracing variables, added to fullEnv and fields in init.
var (
	tracingEnv = map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://otel-collector:4318/",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.internal/otlp/v1/traces",
		"OTEL_EXPORTER_OTLP_PROTOCOL":        "http/protobuf",
		"OTEL_SERVICE_NAME":                  "nw-test",
		"OTEL_EXPORTER_OTLP_HEADERS":         "api-key=" + otlpKey,
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  "x-api-key=" + otlpKey,
	}
	tracingFields = map[string]field{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        {func(c config.Config) any { return c.Tracing.Endpoint }, "http://otel-collector:4318/"},
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": {func(c config.Config) any { return c.Tracing.TracesEndpoint }, "https://traces.internal/otlp/v1/traces"},
		"OTEL_EXPORTER_OTLP_PROTOCOL":        {func(c config.Config) any { return c.Tracing.Protocol }, "http/protobuf"},
		"OTEL_SERVICE_NAME":                  {func(c config.Config) any { return c.Tracing.ServiceName }, "nw-test"},
		"OTEL_EXPORTER_OTLP_HEADERS":         {func(c config.Config) any { return c.Tracing.Headers }, config.Secret("api-key=" + otlpKey)},
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":  {func(c config.Config) any { return c.Tracing.TracesHeaders }, config.Secret("x-api-key=" + otlpKey)},
	}
)

func init() {
	maps.Copy(fullEnv, tracingEnv)
	maps.Copy(fields, tracingFields)
}

// caFile is a PEM file of a CA, for the variables that name one: written
// by TestMain, since a provider reads it with its settings.
var caFile = filepath.Join(os.TempDir(), fmt.Sprintf("config-test-ca-%d.pem", os.Getpid()))

func TestMain(m *testing.M) {
	srv := httptest.NewTLSServer(nil)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	srv.Close()
	if err := os.WriteFile(caFile, cert, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.Remove(caFile)
	os.Exit(code)
}

func referenceNames() []string {
	names := make([]string, 0, len(config.Reference))
	for _, v := range config.Reference {
		names = append(names, v.Name)
	}
	return names
}

// TestLoad_Defaults pins the defaults the README table documents and
// the cmd wiring rely on, written out by hand rather than derived from
// Reference, so a changed default is a visible decision.
func TestLoad_Defaults(t *testing.T) {
	c := MustLoad(t, nil)
	k, r, tw, sm := kafkaOf(c), redisOf(c), twilioOf(c), smtpOf(c)
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"KAFKA_BROKERS", k.Brokers, []string(nil)},
		{"EVENT_SOURCE", c.Adapters.EventSource, "kafka"},
		{"IDEMPOTENCY_STORE", c.Adapters.Store, ""},
		{"SMS_NOTIFIER", c.Notifier("SMS_NOTIFIER"), ""},
		{"EMAIL_NOTIFIER", c.Notifier("EMAIL_NOTIFIER"), ""},
		{"KAFKA_TOPIC", k.Topic, "shipment-events"},
		{"KAFKA_GROUP_ID", k.GroupID, "notification-worker"},
		{"KAFKA_CLIENT_ID", k.ClientID, "notification-worker"},
		{"DEBUG_ADDR", c.DebugAddr, ""},
		{"KAFKA_DLQ_TOPIC", k.DLQTopic, "shipment-events.dlq"},
		{"KAFKA_TLS", k.TLS != nil, false},
		{"KAFKA_TLS_CA_FILE", c.Settings().String("KAFKA_TLS_CA_FILE"), ""},
		{"KAFKA_SASL_MECHANISM", k.SASLMechanism, ""},
		{"KAFKA_SASL_USERNAME", k.SASLUsername, ""},
		{"KAFKA_SASL_PASSWORD", k.SASLPassword, ""},
		{"KAFKA_REBALANCE_STRATEGY", k.RebalanceStrategy, "cooperative-sticky"},
		{"KAFKA_GROUP_INSTANCE_ID", k.GroupInstanceID, ""},
		{"KAFKA_SESSION_TIMEOUT", k.SessionTimeout, 10 * time.Second},
		{"MAX_IN_FLIGHT", c.MaxInFlight, 64},
		{"MAX_RECORD_BYTES", c.MaxRecordBytes, 1048576},
		{"MAX_BUFFERED_BYTES", c.MaxBufferedBytes, int64(33554432)},
		{"KAFKA_EXPECTED_REPLICAS", c.ExpectedReplicas, 1},
		{"SMS_RATE_LIMIT", c.RateLimit.SMS.Rate, 0.0},
		{"SMS_RATE_BURST", c.RateLimit.SMS.Burst, 1},
		{"EMAIL_RATE_LIMIT", c.RateLimit.Email.Rate, 0.0},
		{"EMAIL_RATE_BURST", c.RateLimit.Email.Burst, 1},
		{"RETRY_MAX_ATTEMPTS", c.RetryMaxAttempts, 12},
		{"RETRY_INITIAL_BACKOFF", c.RetryInitialBackoff, 200 * time.Millisecond},
		{"RETRY_MAX_BACKOFF", c.RetryMaxBackoff, 10 * time.Second},
		{"REDIS_URL", r.URL, ""},
		{"IDEMPOTENCY_TTL", c.Idempotency.TTL, 48 * time.Hour},
		{"IDEMPOTENCY_CLAIM_TTL", c.Idempotency.ClaimTTL, 60 * time.Second},
		{"IDEMPOTENCY_TIMEOUT", c.Idempotency.Timeout, 200 * time.Millisecond},
		{"IDEMPOTENCY_FAILURE_MODE", c.Idempotency.FailureMode, "open"},
		{"IDEMPOTENCY_MIN_REPLICAS", r.MinReplicas, redis.AutoMinReplicas},
		{"IDEMPOTENCY_WAIT_AOF", r.WaitAOF, false},
		{"REDIS_SENTINEL_ADDRS", r.SentinelAddrs, []string(nil)},
		{"REDIS_SENTINEL_MASTER", r.SentinelMaster, ""},
		{"REDIS_SENTINEL_USERNAME", r.SentinelUsername, ""},
		{"REDIS_SENTINEL_PASSWORD", r.SentinelPassword, ""},
		{"IDEMPOTENCY_KEY_PREFIX", r.KeyPrefix, "notification-worker:idem:"},
		{"IDEMPOTENCY_KEY_FORMAT", r.Format.String(), "compact"},
		{"IDEMPOTENCY_COMPACT_KEY_PREFIX", r.CompactPrefix, "n"},
		{"IDEMPOTENCY_READ_BOTH_FORMATS", r.ReadBoth, true},
		{"IDEMPOTENCY_BREAKER_FAILURES", c.Idempotency.BreakerFailures, 5},
		{"IDEMPOTENCY_BREAKER_COOLDOWN", c.Idempotency.BreakerCooldown, time.Second},
		{"IDEMPOTENCY_LEDGER_SIZE", c.Idempotency.LedgerSize, 10000},
		{"IDEMPOTENCY_ALLOW_EVICTION", r.Health.AllowEviction, false},
		{"MAX_EVENT_AGE", c.MaxEventAge, 48 * time.Hour},
		{"MAX_EVENT_AGE_OVERRIDES", c.MaxEventAgeByType, map[string]time.Duration(nil)},
		{"TWILIO_ACCOUNT_SID", tw.AccountSID, ""},
		{"TWILIO_AUTH_TOKEN", tw.AuthToken, ""},
		{"TWILIO_FROM_NUMBER", tw.From, ""},
		{"TWILIO_MESSAGING_SERVICE_SID", tw.MessagingServiceSID, ""},
		{"TWILIO_API_URL", tw.APIURL, "https://api.twilio.com"},
		{"TWILIO_LIST_LAG", tw.ListLag, time.Minute},
		{"SMTP_HOST", sm.Host, ""},
		{"SMTP_PORT", sm.Port, 587},
		{"SMTP_USERNAME", sm.Username, ""},
		{"SMTP_PASSWORD", sm.Password, ""},
		{"SMTP_FROM", sm.From, ""},
		{"SMTP_TLS_POLICY", sm.TLSPolicy, "mandatory"},
		{"ALLOW_INSECURE_TRANSPORT", c.AllowInsecureTransport, false},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", c.Tracing.Endpoint, ""},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", c.Tracing.TracesEndpoint, ""},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", c.Tracing.Protocol, "http/protobuf"},
		{"OTEL_SERVICE_NAME", c.Tracing.ServiceName, "notification-worker"},
		{"OTEL_EXPORTER_OTLP_HEADERS", c.Tracing.Headers, config.Secret("")},
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", c.Tracing.TracesHeaders, config.Secret("")},
		{"TracesURL", c.TracesURL(), ""},
		{"SEND_TIMEOUT", c.SendTimeout, 10 * time.Second},
		{"RECONCILE_TIMEOUT", c.ReconcileTimeout, 2 * time.Minute},
		{"UNKNOWN_OUTCOME_POLICY", c.UnknownOutcomePolicy, "resend"},
		{"SHUTDOWN_TIMEOUT", c.ShutdownTimeout, 30 * time.Second},
		{"STARTUP_TIMEOUT", c.StartupTimeout, 60 * time.Second},
		{"TEMPLATES_DIR", c.TemplatesDir, ""},
		{"HTTP_ADDR", c.HTTPAddr, ":8080"},
		{"LOG_LEVEL", c.LogLevel, slog.LevelInfo},
		{"LOG_FORMAT", c.LogFormat, "json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("got %#v, want %#v", tt.got, tt.want)
			}
		})
	}
	t.Run("ProvidersOff", func(t *testing.T) {
		if c.Enabled("twilio") || c.Enabled("smtp") {
			t.Errorf("Enabled twilio=%v smtp=%v with an empty environment, want both false", c.Enabled("twilio"), c.Enabled("smtp"))
		}
	})
}

// TestLoad_EveryVariableParsed sets every variable to a distinctive valid
// value and finds each in the Config.
func TestLoad_EveryVariableParsed(t *testing.T) {
	c := MustLoad(t, fullEnv)
	for _, name := range referenceNames() {
		t.Run(name, func(t *testing.T) {
			f, ok := fields[name]
			if !ok {
				t.Fatalf("no field for %s in the test's fields table", name)
			}
			if got := f.get(c); !reflect.DeepEqual(got, f.full) {
				t.Errorf("%s=%q: got %#v, want %#v", name, fullEnv[name], got, f.full)
			}
		})
	}
	t.Run("ProvidersOn", func(t *testing.T) {
		if !c.Enabled("twilio") || !c.Enabled("smtp") {
			t.Errorf("Enabled twilio=%v smtp=%v, want both true", c.Enabled("twilio"), c.Enabled("smtp"))
		}
	})
}

// TestReference keeps Reference, Load and the test tables from drifting
// apart: Load reads exactly the variables Reference lists, each one lands in
// a field, and each documented default is the value Load produces.
func TestReference(t *testing.T) {
	names := referenceNames()

	t.Run("NamesUniqueAndDocumented", func(t *testing.T) {
		seen := map[string]bool{}
		for _, v := range config.Reference {
			if seen[v.Name] {
				t.Errorf("%s listed twice", v.Name)
			}
			seen[v.Name] = true
			if strings.TrimSpace(v.Meaning) == "" {
				t.Errorf("%s has no meaning", v.Name)
			}
		}
	})

	t.Run("LoadReadsExactlyReference", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			env  map[string]string
		}{{"EmptyEnv", nil}, {"FullEnv", fullEnv}} {
			t.Run(tt.name, func(t *testing.T) {
				read := map[string]bool{}
				_, _ = config.Load(func(name string) (string, bool) {
					read[name] = true
					return env(tt.env)(name)
				})
				if got, want := slices.Sorted(maps.Keys(read)), slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
					t.Errorf("Load read %v,\nReference lists %v", got, want)
				}
			})
		}
	})

	t.Run("EveryVariableHasAField", func(t *testing.T) {
		if got, want := slices.Sorted(maps.Keys(fields)), slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
			t.Errorf("fields table has %v,\nReference lists %v", got, want)
		}
	})

	t.Run("DefaultIsWhatLoadProduces", func(t *testing.T) {
		c := MustLoad(t, nil)
		defaults := map[string]string{}
		for _, v := range config.Reference {
			defaults[v.Name] = v.Default
		}
		for _, v := range config.Reference {
			t.Run(v.Name, func(t *testing.T) {
				f, ok := fields[v.Name]
				if !ok {
					t.Skip("no field; reported by EveryVariableHasAField")
				}
				got := f.get(c)
				want, ok := unsetValues[v.Name]
				if !ok {
					want = parseAs(t, got, os.Expand(v.Default, func(n string) string { return defaults[n] }))
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Reference says default %q (%#v), Load produced %#v", v.Default, want, got)
				}
			})
		}
	})
}

// unsetValues are what Load produces for the variables whose unset value
// is no value an operator could write, and so documented as none.
var unsetValues = map[string]any{
	// The store chooses at start, by the primary's replicas.
	"IDEMPOTENCY_MIN_REPLICAS": redis.AutoMinReplicas,
}

// parseAs parses the documented default s into the type of like, the way an
// operator reads the README table.
func parseAs(t *testing.T, like any, s string) any {
	t.Helper()
	var (
		v   any
		err error
	)
	switch like.(type) {
	case string:
		v = s
	case config.Secret:
		v = config.Secret(s)
	case []string:
		if s != "" {
			v = strings.Split(s, ",")
		} else {
			v = []string(nil)
		}
	case bool:
		v, err = strconv.ParseBool(s)
	case int:
		v, err = strconv.Atoi(s)
	case int64:
		v, err = strconv.ParseInt(s, 10, 64)
	case float64:
		v, err = strconv.ParseFloat(s, 64)
	case time.Duration:
		v, err = time.ParseDuration(s)
	case map[string]time.Duration:
		if s != "" {
			t.Fatalf("parseAs: no rule for a non-empty %T default", like)
		}
		v = map[string]time.Duration(nil)
	case slog.Level:
		var l slog.Level
		err = l.UnmarshalText([]byte(s))
		v = l
	default:
		t.Fatalf("parseAs: no rule for %T", like)
	}
	if err != nil {
		t.Fatalf("default %q does not parse as %T: %v", s, like, err)
	}
	return v
}

// TestLoad_EmptyAndUnknown covers the rules that apply to every variable.
func TestLoad_EmptyAndUnknown(t *testing.T) {
	t.Run("EmptyCountsAsUnset", func(t *testing.T) {
		kv := map[string]string{}
		for _, name := range referenceNames() {
			kv[name] = ""
		}
		got, want := MustLoad(t, kv), MustLoad(t, nil)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("every variable set to \"\": got %+v, want the defaults %+v", got, want)
		}
	})
	t.Run("WhiteSpaceTrimmed", func(t *testing.T) {
		c := MustLoad(t, map[string]string{"KAFKA_TOPIC": "  orders \n", "MAX_IN_FLIGHT": " 8 ", "SMTP_HOST": "   "})
		if kafkaOf(c).Topic != "orders" || c.MaxInFlight != 8 || smtpOf(c).Host != "" {
			t.Errorf("got topic %q, max in flight %d, SMTP host %q", kafkaOf(c).Topic, c.MaxInFlight, smtpOf(c).Host)
		}
	})
	t.Run("SecretsKeptVerbatim", func(t *testing.T) {
		c := MustLoad(t, map[string]string{"SMTP_HOST": "smtp.internal", "SMTP_FROM": "a@example.com", "SMTP_USERNAME": "u", "SMTP_PASSWORD": " pw "})
		if got := smtpOf(c).Password; got != " pw " {
			t.Errorf("password %q, want \" pw \": a secret's spaces are its own", got)
		}
	})
	t.Run("UnknownIgnored", func(t *testing.T) {
		c := MustLoad(t, map[string]string{"KAFKA_TOPICS": "typo", "PATH": "/bin", "NOTIFICATION_WORKER_X": "1"})
		if got := kafkaOf(c).Topic; got != "shipment-events" {
			t.Errorf("topic %q", got)
		}
	})
	t.Run("DLQFollowsTopic", func(t *testing.T) {
		c := MustLoad(t, map[string]string{"KAFKA_TOPIC": "orders"})
		if got := kafkaOf(c).DLQTopic; got != "orders.dlq" {
			t.Errorf("DLQ topic %q, want orders.dlq", got)
		}
	})
	t.Run("HTTPAddrOff", func(t *testing.T) {
		if c := MustLoad(t, map[string]string{"HTTP_ADDR": "off"}); c.HTTPAddr != "" {
			t.Errorf("HTTP_ADDR=off: HTTPAddr %q, want \"\" (server disabled)", c.HTTPAddr)
		}
	})
	t.Run("MessagingServiceInsteadOfFrom", func(t *testing.T) {
		c := MustLoad(t, map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": "tok", "TWILIO_MESSAGING_SERVICE_SID": "MG1"})
		if !c.Enabled("twilio") {
			t.Error("Enabled(twilio) false with a messaging service SID and no from number")
		}
	})
	t.Run("SMTPWithoutAuth", func(t *testing.T) {
		c := MustLoad(t, map[string]string{"SMTP_HOST": "10.0.0.5", "SMTP_FROM": "noreply@example.com", "SMTP_TLS_POLICY": "none"})
		if !c.Enabled("smtp") || smtpOf(c).Username != "" {
			t.Errorf("Enabled(smtp) %v, username %q", c.Enabled("smtp"), smtpOf(c).Username)
		}
	})
}

// TracesURL follows the OpenTelemetry specification: the signal's own
// endpoint as given, else the base endpoint with /v1/traces; neither: off.
func TestConfig_TracesURL(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"Off", nil, ""},
		{"Base", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http://collector:4318/v1/traces"},
		{"BaseWithPath", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://gw.internal/otlp/"}, "https://gw.internal/otlp/v1/traces"},
		{"TracesWins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/custom"}, "http://other:4318/custom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := MustLoad(t, tt.env).TracesURL(); got != tt.want {
				t.Errorf("TracesURL() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLoad_Invalid names, for each bad value, the variable and the reason
// an operator reads. Each case is the only problem in its environment.
func TestLoad_Invalid(t *testing.T) {
	for _, tt := range []struct {
		name   string
		env    map[string]string
		want   string // the whole problem, as Problem.String renders it
		wantIn string // or, for long reasons, a part of it
	}{
		{name: "BrokerWithoutPort", env: map[string]string{"KAFKA_BROKERS": "x"}, want: `KAFKA_BROKERS="x": want host:port`},
		{name: "BrokerListEntry", env: map[string]string{"KAFKA_BROKERS": "a:9092,b"}, want: `KAFKA_BROKERS="a:9092,b": want comma-separated host:port; entry 2 ("b") is not`},
		{name: "BrokerPortRange", env: map[string]string{"KAFKA_BROKERS": "a:99999"}, want: `KAFKA_BROKERS="a:99999": want host:port`},
		{name: "TopicName", env: map[string]string{"KAFKA_TOPIC": "ship events"}, wantIn: `KAFKA_TOPIC="ship events": want a Kafka topic name`},
		{name: "DLQIsTopic", env: map[string]string{"KAFKA_DLQ_TOPIC": "shipment-events"}, wantIn: `KAFKA_DLQ_TOPIC="shipment-events": must differ from KAFKA_TOPIC`},
		{name: "TLSNotBool", env: map[string]string{"KAFKA_BROKERS": "a:1", "KAFKA_TLS": "yes"}, want: `KAFKA_TLS="yes": want true or false`},
		{name: "SASLMechanism", env: map[string]string{"KAFKA_BROKERS": "a:1", "KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "p"}, want: `KAFKA_SASL_MECHANISM="GSSAPI": want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512`},
		{name: "CAFileWithoutTLS", env: map[string]string{"KAFKA_BROKERS": "a:1", "KAFKA_TLS_CA_FILE": "/ca.pem"}, want: `KAFKA_TLS_CA_FILE="/ca.pem": set, but KAFKA_TLS is false; set KAFKA_TLS=true to use it`},
		{name: "RebalanceStrategy", env: map[string]string{"KAFKA_REBALANCE_STRATEGY": "sticky"}, want: `KAFKA_REBALANCE_STRATEGY="sticky": want one of cooperative-sticky, range, cooperative-sticky,range`},
		{name: "RebalanceStrategyEagerFirst", env: map[string]string{"KAFKA_REBALANCE_STRATEGY": "range,cooperative-sticky"}, want: `KAFKA_REBALANCE_STRATEGY="range,cooperative-sticky": want one of cooperative-sticky, range, cooperative-sticky,range`},
		{name: "GroupInstanceIDIllegal", env: map[string]string{"KAFKA_GROUP_INSTANCE_ID": "worker/0"}, wantIn: `KAFKA_GROUP_INSTANCE_ID="worker/0": want up to 249 letters, digits`},
		{name: "SessionTimeoutShort", env: map[string]string{"KAFKA_SESSION_TIMEOUT": "2s"}, want: `KAFKA_SESSION_TIMEOUT="2s": must be at least 6s`},
		{name: "SessionTimeoutLong", env: map[string]string{"KAFKA_SESSION_TIMEOUT": "1h"}, wantIn: `KAFKA_SESSION_TIMEOUT="1h": must be at most 30m`},
		{name: "MaxInFlightZero", env: map[string]string{"MAX_IN_FLIGHT": "0"}, want: `MAX_IN_FLIGHT="0": want an integer from 1 to 4096`},
		{name: "MaxRecordBytesNotInt", env: map[string]string{"MAX_RECORD_BYTES": "1MB"}, want: `MAX_RECORD_BYTES="1MB": want an integer from 1024 to 67108864`},
		{name: "SMSRateLimitNegative", env: map[string]string{"SMS_RATE_LIMIT": "-1"}, want: `SMS_RATE_LIMIT="-1": want messages per second, a number from 0 (no limit) to 1000000`},
		{name: "EmailRateLimitNotANumber", env: map[string]string{"EMAIL_RATE_LIMIT": "fast"}, want: `EMAIL_RATE_LIMIT="fast": want messages per second, a number from 0 (no limit) to 1000000`},
		{name: "SMSRateBurstZero", env: map[string]string{"SMS_RATE_BURST": "0"}, want: `SMS_RATE_BURST="0": want an integer from 1 to 1000000`},
		{name: "ExpectedReplicasZero", env: map[string]string{"KAFKA_EXPECTED_REPLICAS": "0"}, want: `KAFKA_EXPECTED_REPLICAS="0": want an integer from 1 to 10000`},
		{name: "MaxBufferedBytesRange", env: map[string]string{"MAX_BUFFERED_BYTES": "1000"}, want: `MAX_BUFFERED_BYTES="1000": want an integer from 1048576 to 1073741824`},
		{name: "MaxBufferedBelowRecord", env: map[string]string{"MAX_RECORD_BYTES": "4194304", "MAX_BUFFERED_BYTES": "2097152"}, wantIn: `MAX_BUFFERED_BYTES="2097152": must be at least MAX_RECORD_BYTES (4194304)`},
		{name: "RetryAttempts", env: map[string]string{"RETRY_MAX_ATTEMPTS": "-1"}, want: `RETRY_MAX_ATTEMPTS="-1": want an integer from 1 to 100`},
		{name: "BackoffNoUnit", env: map[string]string{"RETRY_INITIAL_BACKOFF": "200"}, want: `RETRY_INITIAL_BACKOFF="200": want a duration such as 500ms, 30s or 48h`},
		{name: "MaxBelowInitialBackoff", env: map[string]string{"RETRY_MAX_BACKOFF": "100ms"}, want: `RETRY_MAX_BACKOFF="100ms": must be at least RETRY_INITIAL_BACKOFF (200ms)`},
		{name: "RedisScheme", env: map[string]string{"REDIS_URL": "http://redis:6379"}, want: `REDIS_URL="***": want a redis:// or rediss:// (TLS) URL`},
		{name: "RedisNoHost", env: map[string]string{"REDIS_URL": "redis://"}, wantIn: `REDIS_URL="***": want a host`},
		{name: "RedisDB", env: map[string]string{"REDIS_URL": "redis://redis:6379/cache"}, wantIn: `REDIS_URL="***": want a database number`},
		{name: "MinReplicasRange", env: map[string]string{"IDEMPOTENCY_MIN_REPLICAS": "-1"}, want: `IDEMPOTENCY_MIN_REPLICAS="-1": want an integer from 0 to 100`},
		{name: "WaitAOFWithoutReplicas", env: map[string]string{"IDEMPOTENCY_WAIT_AOF": "true"}, wantIn: `IDEMPOTENCY_WAIT_AOF="true": needs IDEMPOTENCY_MIN_REPLICAS above 0`},
		{name: "SentinelAddrs", env: map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_SENTINEL_ADDRS": "s1", "REDIS_SENTINEL_MASTER": "m"}, want: `REDIS_SENTINEL_ADDRS="s1": want host:port`},
		{name: "SentinelWithClusterSeeds", env: map[string]string{"REDIS_URL": "redis://r:6379?addr=r2:6379", "REDIS_SENTINEL_ADDRS": "s1:26379", "REDIS_SENTINEL_MASTER": "m"}, wantIn: `REDIS_SENTINEL_ADDRS="s1:26379": cannot be used with Redis Cluster seeds`},
		{name: "MaxEventAgeAboveTTL", env: map[string]string{"MAX_EVENT_AGE": "72h"}, wantIn: `MAX_EVENT_AGE="72h": must be at most IDEMPOTENCY_TTL (48h0m0s)`},
		{name: "MaxEventAgeFollowsTTL", env: map[string]string{"IDEMPOTENCY_TTL": "24h", "MAX_EVENT_AGE": "36h"}, wantIn: `MAX_EVENT_AGE="36h": must be at most IDEMPOTENCY_TTL (24h0m0s)`},
		{name: "MaxEventAgeNotDuration", env: map[string]string{"MAX_EVENT_AGE": "2d"}, want: `MAX_EVENT_AGE="2d": want a duration such as 500ms, 30s or 48h`},
		{name: "AgeOverrideWithoutEquals", env: map[string]string{"MAX_EVENT_AGE_OVERRIDES": "shipment.delayed=12h,shipment.out_for_delivery:6h"}, wantIn: `entry 2 ("shipment.out_for_delivery:6h"): want type=duration`},
		{name: "AgeOverrideBadDuration", env: map[string]string{"MAX_EVENT_AGE_OVERRIDES": "shipment.delayed=12"}, wantIn: `entry 1 ("shipment.delayed=12"): want a positive duration`},
		{name: "AgeOverrideZero", env: map[string]string{"MAX_EVENT_AGE_OVERRIDES": "shipment.delayed=0s"}, wantIn: `entry 1 ("shipment.delayed=0s"): want a positive duration`},
		{name: "AgeOverrideRepeated", env: map[string]string{"MAX_EVENT_AGE_OVERRIDES": "a=1h,a=2h"}, wantIn: `entry 2 ("a=2h"): type a is given twice`},
		{name: "AgeOverrideAboveTTL", env: map[string]string{"MAX_EVENT_AGE_OVERRIDES": "shipment.delivered=72h"}, wantIn: `shipment.delivered=72h0m0s: must be at most IDEMPOTENCY_TTL (48h0m0s)`},
		{name: "TTLZero", env: map[string]string{"IDEMPOTENCY_TTL": "0s"}, want: `IDEMPOTENCY_TTL="0s": must be at least 1ms`},
		{name: "TTLBelowClaimTTL", env: map[string]string{"IDEMPOTENCY_TTL": "30s"}, wantIn: `IDEMPOTENCY_TTL="30s": must be at least IDEMPOTENCY_CLAIM_TTL (1m0s)`},
		{name: "ClaimTTLNotAboveSendTimeout", env: map[string]string{"IDEMPOTENCY_CLAIM_TTL": "10s"}, wantIn: `IDEMPOTENCY_CLAIM_TTL="10s": must exceed SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT + 100ms (10.5s): a claim must outlive its own round trip, the send, the round trip of the write that records it, and the clock skew between workers`},
		{name: "ClaimTTLNotAboveSendAndRecord", env: map[string]string{"IDEMPOTENCY_CLAIM_TTL": "10200ms"}, wantIn: `IDEMPOTENCY_CLAIM_TTL="10200ms": must exceed SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT + 100ms (10.5s)`},
		{name: "ClaimTTLAtTheBound", env: map[string]string{"IDEMPOTENCY_CLAIM_TTL": "10500ms"}, wantIn: `IDEMPOTENCY_CLAIM_TTL="10500ms": must exceed SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT + 100ms (10.5s)`},
		{name: "SendTimeoutOutlivesDefaultClaim", env: map[string]string{"SEND_TIMEOUT": "2m", "SHUTDOWN_TIMEOUT": "5m"}, wantIn: `IDEMPOTENCY_CLAIM_TTL="60s": must exceed SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT + 100ms (2m0.5s)`},
		{name: "ShutdownShorterThanSend", env: map[string]string{"SHUTDOWN_TIMEOUT": "5s"}, wantIn: `SHUTDOWN_TIMEOUT="5s": must be at least SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT (10.4s)`},
		{name: "ShutdownWithoutTheClaimRoundTrip", env: map[string]string{"SHUTDOWN_TIMEOUT": "10200ms"}, wantIn: `SHUTDOWN_TIMEOUT="10200ms": must be at least SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT (10.4s)`},
		{name: "TimeoutNegative", env: map[string]string{"IDEMPOTENCY_TIMEOUT": "-1s"}, want: `IDEMPOTENCY_TIMEOUT="-1s": must be at least 1ms`},
		{name: "TimeoutBelowAMillisecond", env: map[string]string{"IDEMPOTENCY_TIMEOUT": "1ns"}, want: `IDEMPOTENCY_TIMEOUT="1ns": must be at least 1ms`},
		{name: "TwilioAPIURLWithQuery", env: map[string]string{"TWILIO_API_URL": "https://api.twilio.com?x=1"}, want: `TWILIO_API_URL="https://api.twilio.com?x=1": want a URL without user info, query or fragment`},
		{name: "TwilioAPIURLWithUserInfo", env: map[string]string{"TWILIO_API_URL": "https://u:hunter2@proxy.internal"}, want: `TWILIO_API_URL="***": want a URL without user info, query or fragment`},
		{name: "FailureMode", env: map[string]string{"IDEMPOTENCY_FAILURE_MODE": "OPEN"}, want: `IDEMPOTENCY_FAILURE_MODE="OPEN": want one of open, closed`},
		{name: "BreakerFailures", env: map[string]string{"IDEMPOTENCY_BREAKER_FAILURES": "-1"}, want: `IDEMPOTENCY_BREAKER_FAILURES="-1": want an integer from 1 to 1000`},
		{name: "BreakerOff", env: map[string]string{"IDEMPOTENCY_BREAKER_FAILURES": "0"}, want: `IDEMPOTENCY_BREAKER_FAILURES="0": the circuit breaker can no longer be turned off: it is what keeps store calls within IDEMPOTENCY_TIMEOUT when Redis stops answering; want an integer from 1 to 1000`},
		{name: "LedgerSizeZero", env: map[string]string{"IDEMPOTENCY_LEDGER_SIZE": "0"}, want: `IDEMPOTENCY_LEDGER_SIZE="0": want an integer from 1 to 1000000`},
		{name: "BreakerCooldown", env: map[string]string{"IDEMPOTENCY_BREAKER_COOLDOWN": "0"}, want: `IDEMPOTENCY_BREAKER_COOLDOWN="0": must be positive`},
		{name: "TwilioSIDQuoted", env: map[string]string{"TWILIO_ACCOUNT_SID": `"AC1"`, "TWILIO_AUTH_TOKEN": "tok", "TWILIO_FROM_NUMBER": "+15551234567"}, wantIn: `TWILIO_ACCOUNT_SID="\"AC1\"": want letters and digits only (Twilio rejects anything else with error 21222)`},
		{name: "TwilioTokenNewline", env: map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": "tok\n", "TWILIO_FROM_NUMBER": "+15551234567"}, wantIn: `TWILIO_AUTH_TOKEN="***": want letters and digits only`},
		{name: "TwilioFromNotE164", env: map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": "tok", "TWILIO_FROM_NUMBER": "555-1234"}, want: `TWILIO_FROM_NUMBER="555-1234": want an E.164 phone number such as +15551234567`},
		{name: "TwilioAPIURLRelative", env: map[string]string{"TWILIO_API_URL": "api.twilio.com"}, want: `TWILIO_API_URL="api.twilio.com": want an absolute http:// or https:// URL`},
		{name: "TwilioAPIURLScheme", env: map[string]string{"TWILIO_API_URL": "ftp://api.twilio.com"}, want: `TWILIO_API_URL="ftp://api.twilio.com": want an absolute http:// or https:// URL`},
		{name: "SMTPHostWithPort", env: map[string]string{"SMTP_HOST": "smtp.internal:587", "SMTP_FROM": "a@example.com"}, want: `SMTP_HOST="smtp.internal:587": want a host name without a port; put the port in SMTP_PORT`},
		{name: "SMTPPort", env: map[string]string{"SMTP_PORT": "0"}, want: `SMTP_PORT="0": want an integer from 1 to 65535`},
		{name: "SMTPFrom", env: map[string]string{"SMTP_HOST": "smtp.internal", "SMTP_FROM": "Harborlight noreply"}, wantIn: `SMTP_FROM="Harborlight noreply": want an email address`},
		{name: "SMTPTLSPolicy", env: map[string]string{"SMTP_TLS_POLICY": "starttls"}, want: `SMTP_TLS_POLICY="starttls": want one of mandatory, opportunistic, none`},
		{name: "OTLPEndpointNotURL", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, want: `OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318": want an absolute http:// or https:// URL`},
		{name: "OTLPTracesEndpointUserInfo", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://u:hunter2@collector/v1/traces"}, want: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="***": want a URL without user info, query or fragment`},
		{name: "OTLPProtocolGRPC", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": only http/protobuf is supported (OTLP over HTTP, usually port 4318)`},
		{name: "ReconcileNotAboveListLag", env: map[string]string{"RECONCILE_TIMEOUT": "1m"}, wantIn: `RECONCILE_TIMEOUT="1m": must exceed TWILIO_LIST_LAG (1m0s)`},
		{name: "UnknownOutcomePolicy", env: map[string]string{"UNKNOWN_OUTCOME_POLICY": "drop"}, want: `UNKNOWN_OUTCOME_POLICY="drop": want one of resend, dead_letter`},
		{name: "SendTimeoutZero", env: map[string]string{"SEND_TIMEOUT": "0s"}, want: `SEND_TIMEOUT="0s": must be positive`},
		{name: "ShutdownTimeout", env: map[string]string{"SHUTDOWN_TIMEOUT": "soon"}, want: `SHUTDOWN_TIMEOUT="soon": want a duration such as 500ms, 30s or 48h`},
		{name: "StartupTimeoutTooShort", env: map[string]string{"STARTUP_TIMEOUT": "100ms"}, want: `STARTUP_TIMEOUT="100ms": must be at least 1s`},
		{name: "HTTPAddr", env: map[string]string{"HTTP_ADDR": "8080"}, want: `HTTP_ADDR="8080": want [host]:port, such as :8080, or off`},
		{name: "LogLevel", env: map[string]string{"LOG_LEVEL": "verbose"}, want: `LOG_LEVEL="verbose": want one of debug, info, warn, error`},
		{name: "LogFormat", env: map[string]string{"LOG_FORMAT": "logfmt"}, want: `LOG_FORMAT="logfmt": want one of json, text`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cerr := MustFail(t, tt.env)
			if len(cerr.Problems) != 1 {
				t.Fatalf("want exactly one problem, got %d: %v", len(cerr.Problems), cerr)
			}
			got := cerr.Problems[0].String()
			if tt.want != "" && got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if tt.wantIn != "" && !strings.Contains(got, tt.wantIn) {
				t.Errorf("got %s\nwant it to contain %s", got, tt.wantIn)
			}
			if msg := cerr.Error(); msg != "invalid configuration: "+got {
				t.Errorf("Error() = %q, want the problem after \"invalid configuration: \"", msg)
			}
		})
	}
}

// TestLoad_ReportsEveryBadVariable: an operator fixes a broken deployment in
// one round, because one error names every bad variable.
func TestLoad_ReportsEveryBadVariable(t *testing.T) {
	bad := map[string]string{
		"KAFKA_BROKERS":            "x",
		"IDEMPOTENCY_TTL":          "forever",
		"IDEMPOTENCY_FAILURE_MODE": "maybe",
		"SMTP_TLS_POLICY":          "sometimes",
		"LOG_LEVEL":                "loud",
	}
	cerr := MustFail(t, bad)
	msg := cerr.Error()
	if !strings.HasPrefix(msg, "invalid configuration: ") {
		t.Errorf("Error() = %q, want the prefix \"invalid configuration: \"", msg)
	}
	var named []string
	for _, p := range cerr.Problems {
		named = append(named, p.Var)
	}
	for name, value := range bad {
		t.Run(name, func(t *testing.T) {
			if !slices.Contains(named, name) {
				t.Errorf("Problems name %v, not %s", named, name)
			}
			if want := fmt.Sprintf("%s=%q: ", name, value); !strings.Contains(msg, want) {
				t.Errorf("Error() = %q\nwant it to contain %q", msg, want)
			}
		})
	}
	if len(cerr.Problems) != len(bad) {
		t.Errorf("%d problems, want %d: %v", len(cerr.Problems), len(bad), cerr)
	}
}

// TestLoad_HalfConfigured: credentials for a provider or a security feature
// that cannot take effect are errors naming what is missing, never a silent
// fallback to the console or to plaintext.
func TestLoad_HalfConfigured(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want []string // every problem, in order
	}{
		{
			name: "TwilioSIDOnly",
			env:  map[string]string{"TWILIO_ACCOUNT_SID": "AC1"},
			want: []string{
				"TWILIO_AUTH_TOKEN: required when TWILIO_ACCOUNT_SID is set",
				"TWILIO_FROM_NUMBER: required (or TWILIO_MESSAGING_SERVICE_SID) when TWILIO_ACCOUNT_SID is set",
			},
		},
		{
			name: "TwilioTokenOnly",
			env:  map[string]string{"TWILIO_AUTH_TOKEN": twilioToken},
			want: []string{
				"TWILIO_ACCOUNT_SID: required when TWILIO_AUTH_TOKEN is set",
				"TWILIO_FROM_NUMBER: required (or TWILIO_MESSAGING_SERVICE_SID) when TWILIO_AUTH_TOKEN is set",
			},
		},
		{
			name: "TwilioNoSender",
			env:  map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": twilioToken},
			want: []string{"TWILIO_FROM_NUMBER: required (or TWILIO_MESSAGING_SERVICE_SID) when TWILIO_ACCOUNT_SID is set"},
		},
		{
			name: "TwilioFromOnly",
			env:  map[string]string{"TWILIO_FROM_NUMBER": "+15551234567"},
			want: []string{
				"TWILIO_ACCOUNT_SID: required when TWILIO_FROM_NUMBER is set",
				"TWILIO_AUTH_TOKEN: required when TWILIO_FROM_NUMBER is set",
			},
		},
		{
			name: "SentinelAddrsOnly",
			env:  map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_SENTINEL_ADDRS": "s1:26379"},
			want: []string{"REDIS_SENTINEL_MASTER: required with REDIS_SENTINEL_ADDRS: set both REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER, or neither"},
		},
		{
			name: "SentinelMasterOnly",
			env:  map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_SENTINEL_MASTER": "m"},
			want: []string{"REDIS_SENTINEL_ADDRS: required with REDIS_SENTINEL_MASTER: set both REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER, or neither"},
		},
		{
			name: "SentinelWithoutRedisURL",
			env:  map[string]string{"REDIS_SENTINEL_ADDRS": "s1:26379", "REDIS_SENTINEL_MASTER": "m"},
			want: []string{"REDIS_URL: required with REDIS_SENTINEL_ADDRS: its scheme (rediss for TLS), user, password and database apply to the primary the Sentinels name; its host is not dialled"},
		},
		{
			name: "SentinelPasswordOnly",
			env:  map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_SENTINEL_PASSWORD": "x"},
			want: []string{`REDIS_SENTINEL_PASSWORD="***": set, but REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER are not: it authenticates to the Sentinels`},
		},
		{
			name: "SMTPHostWithoutFrom",
			env:  map[string]string{"SMTP_HOST": "smtp.internal"},
			want: []string{"SMTP_FROM: required when SMTP_HOST is set"},
		},
		{
			name: "SMTPFromWithoutHost",
			env:  map[string]string{"SMTP_FROM": "noreply@example.com"},
			want: []string{"SMTP_HOST: required when SMTP_FROM is set (without it, email goes to the console)"},
		},
		{
			name: "SMTPPasswordWithoutUsername",
			env:  map[string]string{"SMTP_HOST": "smtp.internal", "SMTP_FROM": "noreply@example.com", "SMTP_PASSWORD": smtpPassword},
			want: []string{"SMTP_USERNAME: required when SMTP_PASSWORD is set"},
		},
		{
			name: "SMTPUsernameWithoutPassword",
			env:  map[string]string{"SMTP_HOST": "smtp.internal", "SMTP_FROM": "noreply@example.com", "SMTP_USERNAME": "mailer"},
			want: []string{"SMTP_PASSWORD: required when SMTP_USERNAME is set"},
		},
		{
			name: "SASLMechanismWithoutCredentials",
			env:  map[string]string{"KAFKA_BROKERS": "k1:9092", "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256"},
			want: []string{
				"KAFKA_SASL_USERNAME: required when KAFKA_SASL_MECHANISM is set",
				"KAFKA_SASL_PASSWORD: required when KAFKA_SASL_MECHANISM is set",
			},
		},
		{
			name: "SASLCredentialsWithoutMechanism",
			env:  map[string]string{"KAFKA_BROKERS": "k1:9092", "KAFKA_SASL_USERNAME": "nw", "KAFKA_SASL_PASSWORD": saslPassword},
			want: []string{"KAFKA_SASL_MECHANISM: required when KAFKA_SASL_USERNAME is set"},
		},
		{
			name: "SecurityOnEmbeddedBroker",
			env:  map[string]string{"KAFKA_TLS": "true", "KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "nw", "KAFKA_SASL_PASSWORD": saslPassword},
			want: []string{
				`KAFKA_TLS="true": true, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_TLS`,
				`KAFKA_SASL_MECHANISM="PLAIN": set, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_SASL_MECHANISM`,
				`KAFKA_SASL_USERNAME="nw": set, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_SASL_USERNAME`,
				`KAFKA_SASL_PASSWORD="***": set, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_SASL_PASSWORD`,
			},
		},
		{
			name: "CAFileOnEmbeddedBroker",
			env:  map[string]string{"KAFKA_TLS_CA_FILE": "/ca.pem"},
			want: []string{`KAFKA_TLS_CA_FILE="/ca.pem": set, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_TLS_CA_FILE`},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cerr := MustFail(t, tt.env)
			var got []string
			for _, p := range cerr.Problems {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	t.Run("TLSFalseOnEmbeddedBroker", func(t *testing.T) {
		// false configures nothing, so it is no reason to refuse to start.
		MustLoad(t, map[string]string{"KAFKA_TLS": "false"})
	})
	t.Run("APIURLAloneIsNotTwilio", func(t *testing.T) {
		if c := MustLoad(t, map[string]string{"TWILIO_API_URL": "http://localhost:4010"}); c.Enabled("twilio") {
			t.Error("Enabled(twilio) with only TWILIO_API_URL set")
		}
	})
}

// TestLoad_ClearTextCredentials: a setting that would send a credential
// unencrypted stops the worker at start, naming the variable, unless
// ALLOW_INSECURE_TRANSPORT=true says this is a test lab.
func TestLoad_ClearTextCredentials(t *testing.T) {
	twilio := func(apiURL string) map[string]string {
		return map[string]string{"TWILIO_ACCOUNT_SID": "AC1", "TWILIO_AUTH_TOKEN": "tok", "TWILIO_FROM_NUMBER": "+15551234567", "TWILIO_API_URL": apiURL}
	}
	plain := func(tls string) map[string]string {
		env := map[string]string{"KAFKA_BROKERS": "k1.internal:9092", "KAFKA_SASL_MECHANISM": "plain", "KAFKA_SASL_USERNAME": "nw", "KAFKA_SASL_PASSWORD": saslPassword}
		if tls != "" {
			env["KAFKA_TLS"] = tls
		}
		return env
	}
	// otlp exports traces to endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) with
	// the headers variable set.
	otlp := func(endpoint, headers string) map[string]string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, headers: "authorization=Bearer%20" + otlpKey}
	}
	with := func(env map[string]string, k, v string) map[string]string {
		out := maps.Clone(env)
		out[k] = v
		return out
	}
	const (
		refusedTwilio = "http:// to a host that is not loopback (127.0.0.0/8, ::1, localhost) would send the Twilio auth token in clear text; use https://, or, in a test lab only, set ALLOW_INSECURE_TRANSPORT=true"
		refusedPLAIN  = "PLAIN without KAFKA_TLS=true would send the SASL password in clear text; set KAFKA_TLS=true, or, in a test lab only, set ALLOW_INSECURE_TRANSPORT=true"
		refusedOTLP   = "http:// to a host that is not loopback (127.0.0.0/8, ::1, localhost) would send OTEL_EXPORTER_OTLP_HEADERS in clear text; use https://, or, in a test lab only, set ALLOW_INSECURE_TRANSPORT=true"
		refusedTraces = "http:// to a host that is not loopback (127.0.0.0/8, ::1, localhost) would send OTEL_EXPORTER_OTLP_TRACES_HEADERS in clear text; use https://, or, in a test lab only, set ALLOW_INSECURE_TRANSPORT=true"
	)
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"TwilioHTTPToAHostName", twilio("http://twilio-double:8089"), `TWILIO_API_URL="http://twilio-double:8089": ` + refusedTwilio},
		{"TwilioHTTPToAnAddress", twilio("http://10.0.0.7"), `TWILIO_API_URL="http://10.0.0.7": ` + refusedTwilio},
		{"TwilioHTTPToANameEndingInLocalhost", twilio("http://localhost.evil.example"), `TWILIO_API_URL="http://localhost.evil.example": ` + refusedTwilio},
		{"TwilioHTTPWithoutCredentials", map[string]string{"TWILIO_API_URL": "http://proxy.internal"}, `TWILIO_API_URL="http://proxy.internal": ` + refusedTwilio},
		{"SASLPlainWithoutTLS", plain(""), `KAFKA_SASL_MECHANISM="plain": ` + refusedPLAIN},
		{"SASLPlainWithTLSFalse", plain("false"), `KAFKA_SASL_MECHANISM="plain": ` + refusedPLAIN},
		{"OptOutNotABoolean", with(plain(""), "ALLOW_INSECURE_TRANSPORT", "yes"), `ALLOW_INSECURE_TRANSPORT="yes": want true or false`},
		{"OTLPHeadersOverHTTP", otlp("http://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS"), `OTEL_EXPORTER_OTLP_ENDPOINT="http://otel-collector:4318": ` + refusedOTLP},
		{"OTLPTracesHeadersOverHTTP", otlp("http://10.0.0.7:4318", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"), `OTEL_EXPORTER_OTLP_ENDPOINT="http://10.0.0.7:4318": ` + refusedTraces},
		// The traces endpoint wins over the base one, so its scheme is the
		// one that counts, and it is the variable named.
		{"OTLPHeadersOverHTTPTracesEndpoint", with(otlp("https://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS"), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces.internal/v1/traces"),
			`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://traces.internal/v1/traces": ` + refusedOTLP},
		// The exporter takes the scheme from the URL and ignores
		// OTEL_EXPORTER_OTLP_INSECURE on OTLP/HTTP: "false" does not
		// make http:// encrypted.
		{"OTLPHeadersOverHTTPInsecureFalse", with(otlp("http://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS"), "OTEL_EXPORTER_OTLP_INSECURE", "false"), `OTEL_EXPORTER_OTLP_ENDPOINT="http://otel-collector:4318": ` + refusedOTLP},
	} {
		t.Run("Refused/"+tt.name, func(t *testing.T) {
			cerr := MustFail(t, tt.env)
			if got := cerr.Problems[0].String(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if strings.Contains(cerr.Error(), saslPassword) || strings.Contains(cerr.Error(), "tok\"") || strings.Contains(cerr.Error(), otlpKey) {
				t.Errorf("error shows a credential: %v", cerr)
			}
		})
	}
	t.Run("OptOutNotABoolean/StillRefuses", func(t *testing.T) {
		cerr := MustFail(t, with(plain(""), "ALLOW_INSECURE_TRANSPORT", "yes"))
		if len(cerr.Problems) != 2 || cerr.Problems[1].Var != "KAFKA_SASL_MECHANISM" {
			t.Errorf("problems %v, want the bad opt-out and the refusal it did not lift", cerr.Problems)
		}
	})

	for _, tt := range []struct {
		name string
		env  map[string]string
	}{
		{"TwilioHTTPS", twilio("https://proxy.internal")},
		{"TwilioHTTPToLocalhost", twilio("http://localhost:8089")},
		{"TwilioHTTPToLocalhostUpperCase", twilio("http://LOCALHOST:8089")},
		{"TwilioHTTPTo127", twilio("http://127.0.0.1:8089")},
		{"TwilioHTTPTo127Slash8", twilio("http://127.5.6.7:8089")},
		{"TwilioHTTPToIPv6Loopback", twilio("http://[::1]:8089")},
		{"SASLPlainWithTLS", plain("true")},
		{"SASLScramWithoutTLS", with(plain(""), "KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")},
		{"OptOutTwilio", with(twilio("http://twilio-double:8089"), "ALLOW_INSECURE_TRANSPORT", "true")},
		{"OptOutSASLPlain", with(plain(""), "ALLOW_INSECURE_TRANSPORT", "true")},
		{"OTLPHeadersOverHTTPS", otlp("https://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS")},
		{"OTLPHeadersOverHTTPToLocalhost", otlp("http://localhost:4318", "OTEL_EXPORTER_OTLP_HEADERS")},
		{"OTLPTracesHeadersOverHTTPTo127", otlp("http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")},
		{"OTLPHeadersOverHTTPSTracesEndpoint", with(otlp("http://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS"), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.internal/v1/traces")},
		{"OTLPHeadersOverHTTPSInsecureTrue", with(otlp("https://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS"), "OTEL_EXPORTER_OTLP_INSECURE", "true")},
		{"OTLPHTTPWithoutHeaders", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector:4318"}},
		{"OTLPHeadersWithTracingOff", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=" + otlpKey}},
		{"OptOutOTLPHeaders", with(otlp("http://otel-collector:4318", "OTEL_EXPORTER_OTLP_HEADERS"), "ALLOW_INSECURE_TRANSPORT", "true")},
	} {
		t.Run("Accepted/"+tt.name, func(t *testing.T) {
			c := MustLoad(t, tt.env)
			if got, want := c.AllowInsecureTransport, tt.env["ALLOW_INSECURE_TRANSPORT"] == "true"; got != want {
				t.Errorf("AllowInsecureTransport = %v, want %v", got, want)
			}
		})
	}
}

// TestSecretsNeverShown renders a Config and a config Error every way a
// program might, and looks for the secrets in the output.
func TestSecretsNeverShown(t *testing.T) {
	secrets := []string{redisPassword, twilioToken, strings.TrimSpace(smtpPassword), saslPassword, otlpKey, pushKey}
	assertNoSecret := func(t *testing.T, what, out string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s shows secret %q:\n%s", what, s, out)
			}
		}
	}

	c := MustLoad(t, fullEnv)
	renderings := map[string]func() string{
		"SlogJSON": func() string {
			var b bytes.Buffer
			slog.New(slog.NewJSONHandler(&b, nil)).Info("config", "config", c)
			return b.String()
		},
		"SlogText": func() string {
			var b bytes.Buffer
			slog.New(slog.NewTextHandler(&b, nil)).Info("config", "config", c)
			return b.String()
		},
		"FmtV":      func() string { return fmt.Sprintf("%v", c) },
		"FmtPlusV":  func() string { return fmt.Sprintf("%+v", c) },
		"FmtSharpV": func() string { return fmt.Sprintf("%#v", c) },
		"FmtSecretS": func() string {
			return fmt.Sprintf("%s %q %x", c.Tracing.Headers, c.Tracing.Headers, c.Tracing.Headers)
		},
		"JSONMarshal": func() string { b, _ := json.Marshal(c); return string(b) },
	}
	for name, render := range renderings {
		t.Run(name, func(t *testing.T) { assertNoSecret(t, name, render()) })
	}

	t.Run("LogValueShowsRedisURLMasked", func(t *testing.T) {
		var b bytes.Buffer
		slog.New(slog.NewJSONHandler(&b, nil)).Info("config", "config", c)
		var line struct {
			Config struct {
				Idempotency struct{ RedisURL, Store string } `json:"idempotency"`
				Twilio      struct{ AuthToken string }       `json:"twilio"`
			} `json:"config"`
		}
		// encoding/json matches keys case-insensitively but not across "_".
		out := strings.NewReplacer("redis_url", "redisurl", "auth_token", "authtoken").Replace(b.String())
		if err := json.Unmarshal([]byte(out), &line); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got, want := line.Config.Idempotency.RedisURL, "rediss://worker:***@redis.internal:6380/2"; got != want {
			t.Errorf("redis_url %q, want %q", got, want)
		}
		if got := line.Config.Twilio.AuthToken; got != "***" {
			t.Errorf("auth_token %q, want ***", got)
		}
	})

	t.Run("Error", func(t *testing.T) {
		// Each secret is invalid or half-configured here, so each one is
		// in the error by name, and its value must not be.
		cerr := MustFail(t, map[string]string{
			"REDIS_URL":           "http://worker:" + redisPassword + "@redis.internal:6379",
			"TWILIO_ACCOUNT_SID":  "AC1",
			"TWILIO_AUTH_TOKEN":   twilioToken + "-",
			"SMTP_PASSWORD":       smtpPassword,
			"KAFKA_SASL_PASSWORD": saslPassword,
		})
		assertNoSecret(t, "Error()", cerr.Error())
		for _, p := range cerr.Problems {
			assertNoSecret(t, "Problem "+p.Var, p.Value+" "+p.Reason)
		}
		for _, want := range []string{`REDIS_URL="***"`, `TWILIO_AUTH_TOKEN="***"`, `KAFKA_SASL_PASSWORD="***"`, "required when SMTP_PASSWORD is set"} {
			if !strings.Contains(cerr.Error(), want) {
				t.Errorf("Error() does not contain %s:\n%s", want, cerr)
			}
		}
	})

	t.Run("UnparsableRedisURL", func(t *testing.T) {
		// url.Parse's own error quotes the URL; it must not be passed on.
		cerr := MustFail(t, map[string]string{"REDIS_URL": "redis://worker:" + redisPassword + "@redis internal:6379"})
		assertNoSecret(t, "Error()", cerr.Error())
		if !strings.Contains(cerr.Error(), `REDIS_URL="***": not a valid URL`) {
			t.Errorf("Error() = %s", cerr)
		}
	})
}

func TestSecret(t *testing.T) {
	for _, tt := range []struct {
		name   string
		secret config.Secret
		shown  string
	}{
		{"Set", config.Secret("hunter2"), "***"},
		{"Empty", config.Secret(""), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.secret.String(); got != tt.shown {
				t.Errorf("String() = %q, want %q", got, tt.shown)
			}
			if got := tt.secret.LogValue().String(); got != tt.shown {
				t.Errorf("LogValue() = %q, want %q", got, tt.shown)
			}
			if got := tt.secret.Reveal(); got != string(tt.secret) {
				t.Errorf("Reveal() = %q, want the value", got)
			}
		})
	}
}

func TestConfig_LogValueRedisURL(t *testing.T) {
	for _, tt := range []struct{ name, url, want string }{
		{"UserAndPassword", "redis://worker:" + redisPassword + "@redis:6379/0", "redis://worker:***@redis:6379/0"},
		{"PasswordOnly", "redis://:" + redisPassword + "@redis:6379", "redis://:***@redis:6379"},
		{"EscapedPassword", "rediss://u:" + redisPassword + "%40x@redis:6380", "rediss://u:***@redis:6380"},
		{"NoPassword", "redis://redis:6379/1", "redis://redis:6379/1"},
		{"PasswordQuery", "redis://redis:6379/0?password=" + redisPassword, "redis://redis:6379/0?password=***"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := MustLoad(t, map[string]string{"REDIS_URL": tt.url})
			var got string
			for _, a := range c.LogValue().Group() {
				if a.Key != "idempotency" {
					continue
				}
				for _, b := range a.Value.Group() {
					if b.Key == "redis_url" {
						got = b.Value.String()
					}
				}
			}
			if got != tt.want {
				t.Errorf("redis_url %q, want %q", got, tt.want)
			}
		})
	}
}
