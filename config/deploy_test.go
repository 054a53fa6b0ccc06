package config_test

import (
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/harborlight/notification-worker/config"
)

// manifestData returns the data (or stringData) of the Kubernetes object in
// path.
func manifestData(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
	}
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := maps.Clone(obj.Data)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, obj.StringData)
	return out
}

// The manifests as shipped are refused, naming every variable still holding
// REPLACE_ME; filled in, they are accepted, on the Redis store they pin.
func TestDeployManifests(t *testing.T) {
	env := manifestData(t, "../deploy/k8s/configmap.yaml")
	if env["IDEMPOTENCY_STORE"] != "redis" {
		t.Errorf("the ConfigMap sets IDEMPOTENCY_STORE=%q, want it pinned to redis", env["IDEMPOTENCY_STORE"])
	}
	maps.Copy(env, manifestData(t, "../deploy/k8s/secret.example.yaml"))
	delete(env, "KAFKA_SASL_PASSWORD") // only with KAFKA_SASL_MECHANISM, commented out in the ConfigMap

	var placeheld []string
	for k, v := range env {
		if strings.Contains(v, "REPLACE_ME") {
			placeheld = append(placeheld, k)
		}
	}
	slices.Sort(placeheld)
	named := map[string]bool{}
	for v := range mustProblems(t, env) {
		named[v] = true
	}
	if got := slices.Sorted(maps.Keys(named)); !slices.Equal(got, placeheld) {
		t.Errorf("shipped manifests: problems name %v, want exactly the placeholders %v", got, placeheld)
	}

	// What an operator writes in their place.
	fills := map[string]string{
		"KAFKA_BROKERS":      "kafka-0.internal",
		"REDIS_URL":          "pw",
		"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef",
		"TWILIO_AUTH_TOKEN":  "0123456789abcdef0123456789abcdef",
		"TWILIO_FROM_NUMBER": "+15550001111",
		"SMTP_HOST":          "smtp.internal",
		"SMTP_USERNAME":      "mailer",
		"SMTP_PASSWORD":      "pw",
		"SMTP_FROM":          "noreply@example.com",
	}
	for _, k := range placeheld {
		fill, ok := fills[k]
		if !ok {
			t.Fatalf("%s holds REPLACE_ME in the manifests: give the test a value for it", k)
		}
		env[k] = strings.ReplaceAll(env[k], "REPLACE_ME", fill)
	}
	c, err := config.LoadWorker(lookup(env))
	if err != nil {
		t.Fatalf("filled-in manifests: %v", err)
	}
	if a := c.Adapters; a.Store != "redis" || a.Notifiers["SMS_NOTIFIER"] != "twilio" || a.Notifiers["EMAIL_NOTIFIER"] != "smtp" {
		t.Errorf("filled-in manifests run with %+v, want redis, twilio and smtp", a)
	}
}

// lookup is env as a lookup function.
func lookup(kv map[string]string) func(string) (string, bool) { return env(kv) }
