package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
)

var (
	twilioEnv = map[string]string{
		"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef",
		"TWILIO_AUTH_TOKEN":  twilioToken,
		"TWILIO_FROM_NUMBER": "+15550001111",
	}
	smtpEnv    = map[string]string{"SMTP_HOST": "smtp.internal", "SMTP_FROM": "noreply@example.com"}
	brokersEnv = map[string]string{"KAFKA_BROKERS": "k1.internal:9092"}
)

// mustProblems loads kv with LoadWorker and returns the variables named.
func mustProblems(t *testing.T, kv map[string]string) map[string]config.Problem {
	t.Helper()
	_, err := config.LoadWorker(env(kv))
	return mustNamed(t, err)
}

// mustNamed returns the problems of err, a *config.Error, by variable.
func mustNamed(t *testing.T, err error) map[string]config.Problem {
	t.Helper()
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("got %v, want a *config.Error", err)
	}
	named := map[string]config.Problem{}
	for _, p := range cerr.Problems {
		named[p.Var] = p
	}
	return named
}

// The in-memory store forgets every sent record on restart: it is used only
// when asked for, or when no notification can reach a customer.
func TestLoadWorker_MemoryStoreOnlyWhenAskedOrInDevelopment(t *testing.T) {
	for _, tt := range []struct {
		name       string
		env        map[string]string
		store      string // "" when refused
		sms, email string
	}{
		{"Development", brokersEnv, "memory", "console", "console"},
		{"TwilioWithoutRedisURL", with(brokersEnv, twilioEnv), "", "", ""},
		{"SMTPWithoutRedisURL", with(brokersEnv, smtpEnv), "", "", ""},
		{"EmptyRedisURL", with(with(brokersEnv, twilioEnv), map[string]string{"REDIS_URL": ""}), "", "", ""},
		{"TwilioNamedWithoutRedisURL", with(brokersEnv, with(twilioEnv, map[string]string{"SMS_NOTIFIER": "twilio", "EMAIL_NOTIFIER": "console"})), "", "", ""},
		{"MemoryAskedFor", with(with(brokersEnv, twilioEnv), map[string]string{"IDEMPOTENCY_STORE": "memory"}), "memory", "twilio", "console"},
		{"Production", with(with(with(brokersEnv, twilioEnv), smtpEnv), map[string]string{"REDIS_URL": "redis://redis.internal:6379"}), "redis", "twilio", "smtp"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.LoadWorker(env(tt.env))
			if tt.store == "" {
				if p := mustProblems(t, tt.env)["REDIS_URL"]; !strings.Contains(p.Reason, "in-memory store") {
					t.Fatalf("REDIS_URL problem %+v, want the in-memory store's refusal (err: %v)", p, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadWorker: %v", err)
			}
			if a := c.Adapters; a.Store != tt.store || c.Notifier("SMS_NOTIFIER") != tt.sms || c.Notifier("EMAIL_NOTIFIER") != tt.email || a.EventSource != "kafka" {
				t.Errorf("adapters %+v, want store %s, sms %s, email %s, event source kafka", a, tt.store, tt.sms, tt.email)
			}
		})
	}
}

// LoadWorker names the variables' own problems and the adapter choice's in
// one error.
func TestLoadWorker_ReportsEveryProblemAtOnce(t *testing.T) {
	named := mustProblems(t, with(twilioEnv, map[string]string{"IDEMPOTENCY_TTL": "forever", "SMTP_PORT": "smtp"}))
	for _, v := range []string{"KAFKA_BROKERS", "REDIS_URL", "IDEMPOTENCY_TTL", "SMTP_PORT"} {
		if _, ok := named[v]; !ok {
			t.Errorf("%s not named; problems: %v", v, named)
		}
	}
}

// The manifests' placeholder is refused wherever it stands, once a
// variable, even where it parses (a host:port, a host name); a secret's
// value stays masked. The check is case-sensitive, as the manifests write
// it.
func TestLoad_RefusesPlaceholders(t *testing.T) {
	kv := with(twilioEnv, map[string]string{
		"KAFKA_BROKERS":     "REPLACE_ME:9092",
		"SMTP_HOST":         "REPLACE_ME",
		"SMTP_FROM":         "noreply@example.com",
		"TWILIO_AUTH_TOKEN": "REPLACE_ME",
		"KAFKA_TOPIC":       "orders-REPLACE_ME",
	})
	_, err := config.Load(env(kv))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("Load: %v, want a *config.Error", err)
	}
	count := map[string]int{}
	for _, p := range cerr.Problems {
		count[p.Var]++
		if !strings.Contains(p.Reason, "REPLACE_ME") {
			t.Errorf("%s: reason %q does not name the placeholder", p.Var, p.Reason)
		}
		if p.Var == "TWILIO_AUTH_TOKEN" && p.Value != "***" {
			t.Errorf("TWILIO_AUTH_TOKEN shown as %q, want ***", p.Value)
		}
	}
	for _, v := range []string{"KAFKA_BROKERS", "SMTP_HOST", "TWILIO_AUTH_TOKEN", "KAFKA_TOPIC"} {
		if count[v] != 1 {
			t.Errorf("%s named %d times, want once; problems: %v", v, count[v], cerr.Problems)
		}
	}
	if len(count) != 4 {
		t.Errorf("problems %v, want only the four placeholders", cerr.Problems)
	}
	MustLoad(t, map[string]string{"SMTP_HOST": "replace_me", "SMTP_FROM": "noreply@example.com"})
}
