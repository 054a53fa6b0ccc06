package config_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/ports"
)

// pager is a provider as an adapter declares it: its own variables, read
// and checked by its own Load.
var pager = ports.Provider{
	Name:     "pager",
	Variable: "PAGER_NOTIFIER",
	Settings: []ports.Setting{
		{Name: "PAGER_URL"},
		{Name: "PAGER_TOKEN", Secret: true},
		{Name: "PAGER_RETRIES", Default: "3"},
	},
	Load: func(s ports.Settings) bool {
		u := s.URL("PAGER_URL")
		s.Int("PAGER_RETRIES", 0, 10)
		if s.Set("PAGER_URL") != s.Set("PAGER_TOKEN") {
			s.Fail("PAGER_TOKEN", "set both PAGER_URL and PAGER_TOKEN, or neither")
		}
		return u != "" && s.Set("PAGER_TOKEN")
	},
}

func loadWithPager(kv map[string]string) (config.Config, error) {
	all := maps.Clone(brokersEnv)
	maps.Copy(all, kv)
	return config.LoadWorker(env(all), pager)
}

func TestLoadWorker_Provider(t *testing.T) {
	t.Run("UnconfiguredIsOff", func(t *testing.T) {
		c, err := loadWithPager(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Notifier("PAGER_NOTIFIER"); got != "" {
			t.Fatalf("Notifier = %q, want off", got)
		}
	})
	t.Run("ConfiguredIsChosenAndReadsItsSettings", func(t *testing.T) {
		c, err := loadWithPager(map[string]string{"PAGER_URL": "https://pager.example", "PAGER_TOKEN": "s3cret", "IDEMPOTENCY_STORE": "memory"})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Notifier("PAGER_NOTIFIER"); got != "pager" {
			t.Fatalf("Notifier = %q, want pager", got)
		}
		s := c.Settings()
		if s.String("PAGER_TOKEN") != "s3cret" || s.Int("PAGER_RETRIES", 0, 10) != 3 {
			t.Fatalf("Settings read %q, %d", s.String("PAGER_TOKEN"), s.Int("PAGER_RETRIES", 0, 10))
		}
	})
	t.Run("ConfiguredCountsAsARealProvider", func(t *testing.T) {
		_, err := loadWithPager(map[string]string{"PAGER_URL": "https://pager.example", "PAGER_TOKEN": "s3cret"})
		if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Fatalf("err = %v, want REDIS_URL required beside a configured provider", err)
		}
	})
	t.Run("BadSettingsWithEveryOtherProblemSecretMasked", func(t *testing.T) {
		_, err := loadWithPager(map[string]string{"PAGER_TOKEN": "s3cret", "PAGER_RETRIES": "99", "MAX_IN_FLIGHT": "0"})
		var cerr *config.Error
		if !errors.As(err, &cerr) {
			t.Fatalf("err = %v, want a *config.Error", err)
		}
		named := map[string]config.Problem{}
		for _, p := range cerr.Problems {
			named[p.Var] = p
		}
		for _, v := range []string{"PAGER_TOKEN", "PAGER_RETRIES", "MAX_IN_FLIGHT"} {
			if _, ok := named[v]; !ok {
				t.Errorf("%s not named in %v", v, err)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the secret shows in %v", err)
		}
	})
	t.Run("ConsoleContradictsAConfiguredProvider", func(t *testing.T) {
		_, err := loadWithPager(map[string]string{"PAGER_NOTIFIER": "console", "PAGER_URL": "https://pager.example", "PAGER_TOKEN": "s3cret", "IDEMPOTENCY_STORE": "memory"})
		if err == nil || !strings.Contains(err.Error(), "PAGER_NOTIFIER") {
			t.Fatalf("err = %v, want PAGER_NOTIFIER named", err)
		}
	})
	t.Run("AskedForByNameButUnconfigured", func(t *testing.T) {
		_, err := loadWithPager(map[string]string{"PAGER_NOTIFIER": "pager"})
		if err == nil || !strings.Contains(err.Error(), "PAGER_NOTIFIER") {
			t.Fatalf("err = %v, want PAGER_NOTIFIER named", err)
		}
	})
	t.Run("PlaceholderRefused", func(t *testing.T) {
		_, err := loadWithPager(map[string]string{"PAGER_URL": "https://REPLACE_ME", "PAGER_TOKEN": "x", "IDEMPOTENCY_STORE": "memory"})
		if err == nil || !strings.Contains(err.Error(), "PAGER_URL") || !strings.Contains(err.Error(), "placeholder") {
			t.Fatalf("err = %v, want the placeholder in PAGER_URL refused", err)
		}
	})
}

// vault is a shared store as its adapter declares it.
var vault = ports.Provider{
	Name:     "vault",
	Variable: ports.StoreVariable,
	Settings: []ports.Setting{{Name: "VAULT_DSN", Secret: true}},
	Load:     func(s ports.Settings) bool { return s.Set("VAULT_DSN") },
	OpenStore: func(ports.Settings, ports.StoreEnv) (ports.IdempotencyStore, error) {
		return nil, errors.New("not opened here")
	},
	Shared: true,
}

func TestLoadWorker_StoreProvider(t *testing.T) {
	load := func(kv map[string]string) (config.Config, error) {
		all := maps.Clone(brokersEnv)
		maps.Copy(all, kv)
		return config.LoadWorker(env(all), vault)
	}
	t.Run("ChosenByName", func(t *testing.T) {
		c, err := load(map[string]string{"IDEMPOTENCY_STORE": "vault", "VAULT_DSN": "vault://x", "SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Adapters.Store != "vault" || c.Settings().String("VAULT_DSN") != "vault://x" {
			t.Fatalf("store %q, DSN %q", c.Adapters.Store, c.Settings().String("VAULT_DSN"))
		}
	})
	t.Run("UnconfiguredIsNamed", func(t *testing.T) {
		_, err := load(map[string]string{"IDEMPOTENCY_STORE": "vault"})
		if err == nil || !strings.Contains(err.Error(), "VAULT_DSN") {
			t.Fatalf("err = %v, want VAULT_DSN named", err)
		}
	})
	t.Run("ContradictsRedisURL", func(t *testing.T) {
		_, err := load(map[string]string{"IDEMPOTENCY_STORE": "vault", "VAULT_DSN": "vault://x", "REDIS_URL": "redis://127.0.0.1:6379"})
		if err == nil || !strings.Contains(err.Error(), "IDEMPOTENCY_STORE") {
			t.Fatalf("err = %v, want IDEMPOTENCY_STORE named", err)
		}
	})
	t.Run("SharedRefusesAnImplicitConsole", func(t *testing.T) {
		_, err := load(map[string]string{"IDEMPOTENCY_STORE": "vault", "VAULT_DSN": "vault://x"})
		if err == nil || !strings.Contains(err.Error(), "SMS_NOTIFIER") || strings.Contains(err.Error(), "vault://x") {
			t.Fatalf("err = %v, want SMS_NOTIFIER refused beside a shared store, the DSN unshown", err)
		}
	})
}
