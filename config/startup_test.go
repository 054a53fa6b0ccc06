package config_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
)

// startupField is where the start-up line (worker_starting, which logs
// Config.LogValue) shows a variable, as a path of JSON keys under "config".
// A variable's field is found by its prefix: KAFKA_X is kafka.x,
// IDEMPOTENCY_X idempotency.x, REDIS_X idempotency.redis_x, TWILIO_X
// twilio.x, SMTP_X smtp.x, PUSH_X push.x, anything else x at the top;
// startupFields names the exceptions.
func startupField(name string) []string {
	if path, ok := startupFields[name]; ok {
		return path
	}
	lower := strings.ToLower(name)
	for prefix, group := range map[string]string{"kafka_": "kafka", "idempotency_": "idempotency", "twilio_": "twilio", "smtp_": "smtp", "push_": "push"} {
		if rest, ok := strings.CutPrefix(lower, prefix); ok {
			return []string{group, rest}
		}
	}
	if strings.HasPrefix(lower, "redis_") {
		return []string{"idempotency", lower}
	}
	return []string{lower}
}

var startupFields = map[string][]string{
	"EVENT_SOURCE":                       {"adapters", "event_source"},
	"IDEMPOTENCY_STORE":                  {"adapters", "store"},
	"SMS_NOTIFIER":                       {"adapters", "sms"},
	"EMAIL_NOTIFIER":                     {"adapters", "email"},
	"PUSH_NOTIFIER":                      {"adapters", "push"},
	"MAX_IN_FLIGHT":                      {"kafka", "max_in_flight"},
	"MAX_RECORD_BYTES":                   {"kafka", "max_record_bytes"},
	"MAX_BUFFERED_BYTES":                 {"kafka", "max_buffered_bytes"},
	"RETRY_MAX_ATTEMPTS":                 {"kafka", "retry_max_attempts"},
	"RETRY_INITIAL_BACKOFF":              {"kafka", "retry_initial_backoff"},
	"RETRY_MAX_BACKOFF":                  {"kafka", "retry_max_backoff"},
	"OTEL_EXPORTER_OTLP_ENDPOINT":        {"tracing", "traces_url"},
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": {"tracing", "traces_url"},
	"OTEL_SERVICE_NAME":                  {"tracing", "service_name"},
}

// startupOmitted are the variables the start-up line need not show, each
// with the reason. Secrets are omitted too (the line shows them as "***").
var startupOmitted = map[string]string{
	"OTEL_EXPORTER_OTLP_PROTOCOL": "one value is accepted, any other is refused at start: it changes nothing",
}

// TestLogValue_ShowsEveryBehaviourSetting fails when a variable of
// config.Reference that changes what the worker does is missing from the
// start-up line, so that an operator reading it sees every setting in
// force. A new variable needs its field in Config.LogValue (or, when it
// cannot change behaviour, an entry in startupOmitted saying why).
func TestLogValue_ShowsEveryBehaviourSetting(t *testing.T) {
	var b bytes.Buffer
	slog.New(slog.NewJSONHandler(&b, nil)).Info("worker_starting", "config", MustLoad(t, fullEnv))
	var line struct{ Config map[string]any }
	if err := json.Unmarshal(b.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, &b)
	}
	for _, v := range config.Reference {
		if _, ok := startupOmitted[v.Name]; ok || v.Secret {
			continue
		}
		path := startupField(v.Name)
		var at any = line.Config
		for _, k := range path {
			m, _ := at.(map[string]any)
			at = m[k]
		}
		if at == nil {
			t.Errorf("%s: the start-up line has no config.%s", v.Name, strings.Join(path, "."))
		}
	}
}
