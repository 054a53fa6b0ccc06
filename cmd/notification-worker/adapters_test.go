package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/logtest"
)

// mustRefuse loads env as the worker does and checks that it is refused
// with a configuration error naming every one of vars.
func mustRefuse(t *testing.T, env map[string]string, vars ...string) {
	t.Helper()
	_, err := config.LoadWorker(lookupIn(env))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("LoadWorker = %v, want a *config.Error", err)
	}
	for _, v := range vars {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("error %q does not name %s", err, v)
		}
	}
}

// Each port's adapter is chosen by name, and nothing falls back silently:
// a choice that is half-configured or contradictory stops the worker at
// start, naming the variable.
func TestOpen_ExplicitAdapters(t *testing.T) {
	t.Run("EmptyKafkaBrokersIsNoEmbeddedBroker", func(t *testing.T) {
		// A production manifest that lost KAFKA_BROKERS must not start a
		// healthy-looking worker that consumes nothing.
		mustRefuse(t, map[string]string{"HTTP_ADDR": ""}, "KAFKA_BROKERS", "EVENT_SOURCE=embedded")
	})
	t.Run("EmbeddedWithKafkaBrokersIsContradictory", func(t *testing.T) {
		mustRefuse(t, map[string]string{"EVENT_SOURCE": "embedded", "KAFKA_BROKERS": "127.0.0.1:1"}, "EVENT_SOURCE")
	})
	t.Run("ConsoleNotifierBesideRedisIsRefused", func(t *testing.T) {
		// No Twilio and no SMTP configuration, with REDIS_URL set: the
		// console's sent records in the shared store would suppress the
		// real notifications for IDEMPOTENCY_TTL.
		mustRefuse(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1",
		}, "SMS_NOTIFIER", "EMAIL_NOTIFIER", "TWILIO_ACCOUNT_SID", "SMTP_HOST")
	})
	t.Run("RedisStoreWithoutURL", func(t *testing.T) {
		mustRefuse(t, map[string]string{"KAFKA_BROKERS": "127.0.0.1:1", "IDEMPOTENCY_STORE": "redis"}, "REDIS_URL")
	})
	t.Run("MemoryStoreWithURLIsContradictory", func(t *testing.T) {
		mustRefuse(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "IDEMPOTENCY_STORE": "memory", "REDIS_URL": "redis://127.0.0.1:1",
			"SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console",
		}, "IDEMPOTENCY_STORE")
	})
	t.Run("ProviderWithoutItsConfiguration", func(t *testing.T) {
		mustRefuse(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "SMS_NOTIFIER": "twilio", "EMAIL_NOTIFIER": "smtp",
		}, "TWILIO_ACCOUNT_SID", "SMTP_HOST")
	})
	t.Run("ConsoleWithAProviderConfiguredIsContradictory", func(t *testing.T) {
		mustRefuse(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "SMTP_HOST": "mail.example.com", "SMTP_FROM": "noreply@example.com",
			"EMAIL_NOTIFIER": "console",
		}, "EMAIL_NOTIFIER")
	})
	t.Run("ExplicitConsoleBesideRedisIsLogged", func(t *testing.T) {
		srv := redistest.MustStart(t)
		var out logtest.Buffer
		m := &Main{Config: MustLoadConfig(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": "redis://" + srv.Addr(),
			"SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console", "HTTP_ADDR": "127.0.0.1:0",
		}), Stdout: &out}
		MustOpen(t, m)
		if n := strings.Count(out.String(), `"msg":"console_notifier_shared_store"`); n != 2 {
			t.Errorf("%d console_notifier_shared_store logs, want one per channel:\n%s", n, out.String())
		}
		mustStartWith(t, out.String(), map[string]string{"event_source": "kafka", "store": "redis", "sms": "console", "email": "console"})
	})
	t.Run("EvictingRedisRefused", func(t *testing.T) {
		// A sent record Redis evicts no longer suppresses a replay: a
		// configuration error unless the operator accepts it by name.
		// The policy is the server's, read when the store connects: Open
		// refuses it, with the same *config.Error as LoadWorker's.
		srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", "volatile-lru")
		m := &Main{Config: MustLoadConfig(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": "redis://" + srv.Addr(),
			"SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console", "HTTP_ADDR": "127.0.0.1:0",
		}), Stdout: io.Discard}
		t.Cleanup(m.Close)
		err := m.Open(context.Background())
		var cerr *config.Error
		if !errors.As(err, &cerr) {
			t.Fatalf("Open = %v, want a *config.Error", err)
		}
		for _, v := range []string{"IDEMPOTENCY_ALLOW_EVICTION=true", "volatile-lru", srv.Addr()} {
			if !strings.Contains(err.Error(), v) {
				t.Errorf("error %q does not name %s", err, v)
			}
		}
	})
	t.Run("EvictingRedisAcceptedByName", func(t *testing.T) {
		srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
		var out logtest.Buffer
		m := &Main{Config: MustLoadConfig(t, map[string]string{
			"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": "redis://" + srv.Addr(),
			"SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console", "HTTP_ADDR": "127.0.0.1:0",
			"IDEMPOTENCY_ALLOW_EVICTION": "true",
		}), Stdout: &out}
		MustOpen(t, m)
		got := out.Events(t, "idempotency_eviction_allowed")
		if len(got) != 1 || got[0]["level"] != "WARN" || got[0]["maxmemory_policy"] != "allkeys-lru" {
			t.Fatalf("idempotency_eviction_allowed lines %v, want one at WARN naming allkeys-lru", got)
		}
	})
	t.Run("EmbeddedByName", func(t *testing.T) {
		var out logtest.Buffer
		m := &Main{Config: MustLoadConfig(t, map[string]string{"EVENT_SOURCE": "embedded", "HTTP_ADDR": "127.0.0.1:0"}), Stdout: &out}
		MustOpen(t, m)
		mustStartWith(t, out.String(), map[string]string{"event_source": "embedded", "store": "memory", "sms": "console", "email": "console"})
	})
}

// mustStartWith checks that the worker_starting log in logs lists want
// among its adapters.
func mustStartWith(t *testing.T, logs string, want map[string]string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var ev struct {
			Msg      string            `json:"msg"`
			Adapters map[string]string `json:"adapters"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil || ev.Msg != "worker_starting" {
			continue
		}
		for port, adapter := range want {
			if ev.Adapters[port] != adapter {
				t.Errorf("adapters[%s] = %q, want %q (all: %v)", port, ev.Adapters[port], adapter, ev.Adapters)
			}
		}
		return
	}
	t.Fatalf("no worker_starting log in:\n%s", logs)
}

// Every provider the worker builds a channel or a store from is one config
// composes, so its settings are read, checked and listed with the others.
func TestProviders_ComposedByConfig(t *testing.T) {
	composed := map[string]bool{}
	for _, p := range config.Providers {
		composed[p.Name] = true
	}
	for _, ch := range channels {
		if !composed[ch.Provider.Name] {
			t.Errorf("channel %s: provider %s is not in config.Providers", ch.Name, ch.Provider.Name)
		}
	}
	for name, st := range stores {
		if st.provider == nil || !composed[st.provider.Name] || st.provider.Name != name {
			t.Errorf("store %s: its provider is not in config.Providers under that name", name)
		}
	}
}
