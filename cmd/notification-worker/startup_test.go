package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// setEnv sets kv in the process environment for the test, on top of
// clearEnv.
func setEnv(t *testing.T, kv map[string]string) {
	t.Helper()
	clearEnv(t)
	for k, v := range kv {
		t.Setenv(k, v)
	}
}

// Providers configured, as in production: Twilio and SMTP.
var providersEnv = map[string]string{
	"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef",
	"TWILIO_AUTH_TOKEN":  "0123456789abcdef0123456789abcdef",
	"TWILIO_FROM_NUMBER": "+15550001111",
	"SMTP_HOST":          "smtp.example.com",
	"SMTP_FROM":          "noreply@example.com",
}

func merged(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// A bad environment stops the worker before it builds anything, with exit
// 2 and every bad variable named in one message, however the problems are
// spread between the variables themselves and how they combine.
func TestRun_BadEnvironmentExits2NamingEveryVariable(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		vars []string
	}{
		{"EmptyBrokersAndABadValue",
			map[string]string{"IDEMPOTENCY_TTL": "forever"},
			[]string{"KAFKA_BROKERS", "IDEMPOTENCY_TTL"}},
		{"RedisStoreWithoutURL",
			map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "IDEMPOTENCY_STORE": "redis"},
			[]string{"REDIS_URL"}},
		{"ProvidersWithAnEmptyRedisURL",
			// An empty Secret value passes a secretKeyRef: the worker would
			// otherwise start on the in-memory store and resend whatever a
			// restart replays.
			merged(providersEnv, map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": ""}),
			[]string{"REDIS_URL"}},
		{"Placeholders",
			merged(providersEnv, map[string]string{
				"KAFKA_BROKERS": "REPLACE_ME:9092", "SMTP_HOST": "REPLACE_ME", "TWILIO_ACCOUNT_SID": "REPLACE_ME",
				"REDIS_URL": "redis://127.0.0.1:1",
			}),
			[]string{"KAFKA_BROKERS", "SMTP_HOST", "TWILIO_ACCOUNT_SID"}},
		{"NoBrokersAndConsoleBesideRedis",
			map[string]string{"REDIS_URL": "redis://127.0.0.1:1", "SMTP_PORT": "smtp"},
			[]string{"KAFKA_BROKERS", "SMS_NOTIFIER", "EMAIL_NOTIFIER", "SMTP_PORT"}},
		{"MissingKafkaCAFileAndABadValue",
			map[string]string{
				"KAFKA_BROKERS": "127.0.0.1:1", "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": "/nonexistent/ca.pem",
				"SMTP_PORT": "smtp",
			},
			[]string{"KAFKA_TLS_CA_FILE", "SMTP_PORT"}},
		{"KafkaCAFileWithoutACertificate",
			map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": "startup_test.go"},
			[]string{"KAFKA_TLS_CA_FILE"}},
		{"MissingTemplatesDirAndAMisspeltSetting",
			map[string]string{"EVENT_SOURCE": "embedded", "TEMPLATES_DIR": "/nonexistent/templates", "IDEMPOTENCY_FAILUR_MODE": "closed"},
			[]string{"TEMPLATES_DIR", "IDEMPOTENCY_FAILUR_MODE", "IDEMPOTENCY_FAILURE_MODE"}},
		{"UnboundedRedisQueueAndABadValue",
			merged(providersEnv, map[string]string{
				"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1?write_timeout=72h",
				"MAX_IN_FLIGHT": "4096", "RETRY_MAX_ATTEMPTS": "0",
			}),
			[]string{"MAX_IN_FLIGHT", "RETRY_MAX_ATTEMPTS"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setEnv(t, merged(map[string]string{"HTTP_ADDR": "off", "LOG_FORMAT": "text"}, tt.env))
			code, stdout, stderr := runCmd(t, "", "worker")
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstderr: %s\nstdout: %s", code, stderr, stdout)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Errorf("stderr has %d lines, want the one message:\n%s", n+1, stderr)
			}
			for _, v := range tt.vars {
				if !strings.Contains(stderr, v) {
					t.Errorf("stderr does not name %s: %s", v, stderr)
				}
			}
		})
	}
}

// With LOG_FORMAT=json (the default) the refusal is a JSON log line, as a
// log pipeline reads, listing each problem with its variable.
func TestRun_BadEnvironmentIsAJSONLogLine(t *testing.T) {
	setEnv(t, map[string]string{"LOG_FORMAT": "json", "IDEMPOTENCY_STORE": "redis", "SMTP_PORT": "smtp"})
	code, _, stderr := runCmd(t, "", "worker")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr: %s", code, stderr)
	}
	var line struct {
		Level    string `json:"level"`
		Msg      string `json:"msg"`
		Problems []struct {
			Variable, Reason string
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line); err != nil {
		t.Fatalf("stderr is not one JSON line (%v): %s", err, stderr)
	}
	if line.Msg != "config_invalid" || line.Level != "ERROR" {
		t.Errorf("msg %q level %q, want config_invalid at ERROR", line.Msg, line.Level)
	}
	named := map[string]bool{}
	for _, p := range line.Problems {
		named[p.Variable] = p.Reason != ""
	}
	for _, v := range []string{"KAFKA_BROKERS", "REDIS_URL", "SMTP_PORT"} {
		if !named[v] {
			t.Errorf("problems %+v lack %s with a reason", line.Problems, v)
		}
	}
}
