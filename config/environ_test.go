package config_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
)

// environ writes kv as os.Environ does, "NAME=value".
func environ(kv map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		out = append(out, k+"="+kv[k])
	}
	return out
}

// A name within two letters of a setting is refused, naming the setting,
// with the other problems of the environment in the same error; the value
// is never shown, for it may be a secret.
func TestLoadWorkerEnviron_MisspeltSettingsRefused(t *testing.T) {
	kv := with(brokersEnv, map[string]string{
		"IDEMPOTENCY_FAILUR_MODE": "closed",
		"KAFKA_BROKER":            "k9.internal:9092",
		"log_level":               "debug",
		"REDIS_ULR":               "redis://:" + redisPassword + "@redis.internal:6379",
		"IDEMPOTENCY_TTL":         "forever",
	})
	_, err := config.LoadWorkerEnviron(environ(kv))
	named := mustNamed(t, err)
	for typo, setting := range map[string]string{
		"IDEMPOTENCY_FAILUR_MODE": "IDEMPOTENCY_FAILURE_MODE",
		"KAFKA_BROKER":            "KAFKA_BROKERS",
		"log_level":               "LOG_LEVEL",
		"REDIS_ULR":               "REDIS_URL",
	} {
		if !strings.Contains(named[typo].Reason, setting) {
			t.Errorf("%s: problem %+v, want one naming %s", typo, named[typo], setting)
		}
	}
	if _, ok := named["IDEMPOTENCY_TTL"]; !ok {
		t.Errorf("problems %v lack IDEMPOTENCY_TTL: the names are checked in the same pass as the values", named)
	}
	if strings.Contains(err.Error(), redisPassword) {
		t.Errorf("error shows a misspelt secret's value: %v", err)
	}
}

// The variables Kubernetes sets for a Service are neither refused nor
// kept as unknown, even where one holds a setting's name (a Service named
// smtp sets SMTP_PORT=tcp://...); other names with a setting's prefix are
// kept, once each, and those a library reads are not.
func TestLoadWorkerEnviron_UnknownVariables(t *testing.T) {
	kv := with(brokersEnv, map[string]string{
		"SMTP_SERVICE_HOST":          "10.0.0.9",
		"SMTP_SERVICE_PORT":          "587",
		"SMTP_SERVICE_PORT_SMTP":     "587",
		"SMTP_PORT":                  "tcp://10.0.0.9:587",
		"SMTP_PORT_587_TCP":          "tcp://10.0.0.9:587",
		"SMTP_PORT_587_TCP_PROTO":    "tcp",
		"SMTP_PORT_587_TCP_PORT":     "587",
		"SMTP_PORT_587_TCP_ADDR":     "10.0.0.9",
		"REDIS_PORT":                 "tcp://[fd00::7]:6379",
		"KAFKA_FETCH_BYTES":          "1048576",
		"REDIS_HOST":                 "redis.internal",
		"HTTP_PROXY":                 "http://proxy.internal:3128",
		"OTEL_TRACES_SAMPLER":        "parentbased_always_on",
		"OTEL_EXPORTER_OTLP_TIMEOUT": "5000",
		"PATH":                       "/bin",
		"NOTIFICATION_WORKER_X":      "1",
	})
	c, err := config.LoadWorkerEnviron(environ(kv))
	if err != nil {
		t.Fatalf("LoadWorkerEnviron: %v", err)
	}
	if want := []string{"KAFKA_FETCH_BYTES", "REDIS_HOST"}; !slices.Equal(c.UnknownVariables, want) {
		t.Errorf("unknown variables %v, want %v", c.UnknownVariables, want)
	}
	if got := smtpOf(c).Port; got != 587 {
		t.Errorf("SMTP port %d, want the default 587: a service link is no setting", got)
	}
}

// TEMPLATES_DIR is checked in the one pass with the other variables: a
// directory that does not exist, or templates that do not parse.
func TestLoadWorker_TemplatesDir(t *testing.T) {
	broken := t.TempDir()
	if err := os.WriteFile(filepath.Join(broken, "shipment.delivered.tmpl"), []byte(`{{define "sms"}}{{.Nope`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"Missing": "/nonexistent/templates", "Broken": broken} {
		t.Run(name, func(t *testing.T) {
			named := mustProblems(t, with(brokersEnv, map[string]string{"TEMPLATES_DIR": dir, "IDEMPOTENCY_TTL": "forever"}))
			if _, ok := named["TEMPLATES_DIR"]; !ok {
				t.Errorf("problems %v lack TEMPLATES_DIR", named)
			}
			if _, ok := named["IDEMPOTENCY_TTL"]; !ok {
				t.Errorf("problems %v lack IDEMPOTENCY_TTL", named)
			}
		})
	}
}

// Sentinels are named one way: in REDIS_URL, as rueidis reads them
// (master_set, the host and each addr being Sentinels), or in the
// REDIS_SENTINEL_* variables; not both, and not as a comma-separated host
// list, which rueidis does not read.
func TestLoadWorker_SentinelURL(t *testing.T) {
	const urlForm = "redis://worker:pw@s1.internal:26379/0?addr=s2.internal:26379&master_set=idem"
	t.Run("InURL", func(t *testing.T) {
		c, err := config.LoadWorker(env(with(brokersEnv, map[string]string{
			"REDIS_URL": urlForm, "REDIS_SENTINEL_PASSWORD": "sentinel-secret", "SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console",
		})))
		if err != nil {
			t.Fatalf("LoadWorker: %v", err)
		}
		if r := redisOf(c); r.URL != urlForm || r.SentinelPassword != "sentinel-secret" {
			t.Errorf("REDIS_URL %q, Sentinel password %q", r.URL, r.SentinelPassword)
		}
	})
	for name, tt := range map[string]struct {
		env  map[string]string
		want string
	}{
		"BothWays":  {map[string]string{"REDIS_URL": urlForm, "REDIS_SENTINEL_ADDRS": "s3.internal:26379", "REDIS_SENTINEL_MASTER": "idem"}, "REDIS_SENTINEL_ADDRS"},
		"CommaHost": {map[string]string{"REDIS_URL": "redis://s1.internal:26379,s2.internal:26379/0?master_set=idem"}, "REDIS_URL"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, ok := mustProblems(t, with(brokersEnv, tt.env))[tt.want]; !ok {
				t.Errorf("no problem against %s", tt.want)
			}
		})
	}
}
