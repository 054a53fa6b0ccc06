package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// badEnv is an environment the worker refuses: help and version must not
// read it.
func badEnv(t *testing.T) {
	setEnv(t, map[string]string{"IDEMPOTENCY_TTL": "forever", "LOG_FORMAT": "text"})
}

func TestCLI_HelpAndVersionNeedNoEnvironment(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		t.Run(args[0], func(t *testing.T) {
			badEnv(t)
			code, stdout, stderr := runCmd(t, "", args...)
			if code != 0 || !strings.Contains(stdout, "usage:") || !strings.Contains(stdout, "notification-worker key") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the usage", code, stdout, stderr)
			}
		})
	}
	t.Run("version", func(t *testing.T) {
		badEnv(t)
		code, stdout, stderr := runCmd(t, "", "version")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		// What build_info carries: the release, the VCS revision ("unknown"
		// in a test binary, which is not stamped) and the Go version.
		for _, want := range []string{"notification-worker " + release(), "revision ", runtime.Version()} {
			if !strings.Contains(stdout, want) {
				t.Errorf("version printed %q, want it to hold %q", stdout, want)
			}
		}
	})
}

func TestCLI_CommandHelp(t *testing.T) {
	for _, tt := range []struct {
		cmd   string
		flags []string
	}{
		{"publish", []string{"-topic", "-sample"}},
		{"key", []string{"-redis"}},
		{"worker", nil},
		{"demo", nil},
		{"version", nil},
	} {
		t.Run(tt.cmd, func(t *testing.T) {
			badEnv(t)
			code, stdout, stderr := runCmd(t, "", tt.cmd, "-h")
			if code != 0 || !strings.Contains(stdout, "usage: notification-worker "+tt.cmd) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and %s's usage", code, stdout, stderr, tt.cmd)
			}
			for _, f := range tt.flags {
				if !strings.Contains(stdout, f) {
					t.Errorf("%s -h does not show %s:\n%s", tt.cmd, f, stdout)
				}
			}
		})
	}
}

// key refuses what the worker would refuse as an event_id, rather than
// printing keys no notification can have.
func TestCLI_KeyRefusesAnInvalidEventID(t *testing.T) {
	for name, id := range map[string]string{
		"Space":    "has space",
		"TooLong":  strings.Repeat("e", domain.MaxIDBytes+1),
		"Control":  "e\x01",
		"BidiMark": "e\u202e1",
	} {
		t.Run(name, func(t *testing.T) {
			clearEnv(t)
			code, stdout, stderr := runCmd(t, "", "key", "ok-1", id)
			if code != 2 || !strings.Contains(stderr, "event_id") || stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 naming event_id and no keys", code, stdout, stderr)
			}
		})
	}
}

// key --redis reads what the worker wrote, in either format, and decodes
// it: a compact sent record's time and fingerprint, a readable one's
// provider id too, and a claim's token and lease.
func TestCLI_KeyRedisDecodesWhatIsStored(t *testing.T) {
	srv := redistest.MustStart(t)
	clearEnv(t)
	prefix := uniqueName("idem") + ":"
	t.Setenv("REDIS_URL", srv.URL())
	t.Setenv("IDEMPOTENCY_KEY_PREFIX", prefix)

	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	// The worker's own store writes the compact forms.
	st, err := redis.New(redis.Config{URL: srv.URL(), KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sentAt := time.Date(2026, 4, 2, 9, 14, 0, 0, time.UTC)
	smsKey, emailKey := domain.NotificationKey("evt-1", ports.ChannelSMS), domain.NotificationKey("evt-1", ports.ChannelEmail)
	if err := st.Record(ctx, smsKey, ports.Receipt{SentAt: sentAt, Fingerprint: "Zx9_kQ", ProviderID: "SM1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A live claim under the compact key.
	raw := srv.MustClient(t, 0)
	start, until := time.Now().UnixMilli(), time.Now().Add(time.Hour).UnixMilli()
	MustSetRaw(t, raw, redis.Config{KeyPrefix: prefix}.Key(emailKey),
		fmt.Sprintf("pending:tok42..%d..%d.%d.%d", until, start, start, until))
	// A readable record, as a worker writing readable keys writes it.
	MustSetRaw(t, raw, prefix+domain.NotificationKey("evt-2", ports.ChannelSMS),
		"sent:1775121240000:~Ab3dE:SM00000000000000000000000000000042")

	code, stdout, stderr := runCmd(t, "", "key", "--redis", "evt-1", "evt-2")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	lines := map[string]string{} // "event channel format" -> line
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			lines[f[0]+" "+f[1]+" "+f[2]] = l
		}
	}
	for k, want := range map[string][]string{
		"evt-1 sms compact":    {"sent at 2026-04-02T09:14:00Z", "fingerprint Zx9_k"},
		"evt-1 email compact":  {"claim, token tok42", "(live)"},
		"evt-1 sms readable":   {"nothing"},
		"evt-2 sms readable":   {"sent at 2026-04-02T09:14:00Z", "fingerprint Ab3dE", "provider id SM00000000000000000000000000000042"},
		"evt-2 email compact":  {"nothing"},
		"evt-2 email readable": {"nothing"},
	} {
		l, ok := lines[k]
		if !ok {
			t.Errorf("no line for %s in:\n%s", k, stdout)
			continue
		}
		for _, w := range want {
			if !strings.Contains(l, w) {
				t.Errorf("%s: %q lacks %q", k, l, w)
			}
		}
	}
}

// key --redis needs REDIS_URL, and says so, wherever the flag stands
// among the event ids; after "--" it is an event id.
func TestCLI_KeyRedisWithoutURL(t *testing.T) {
	for _, args := range [][]string{{"--redis", "evt-1"}, {"evt-1", "--redis"}, {"evt-1", "--redis", "evt-2"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			clearEnv(t)
			code, stdout, stderr := runCmd(t, "", append([]string{"key"}, args...)...)
			if code != 2 || !strings.Contains(stderr, "REDIS_URL") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 naming REDIS_URL", code, stdout, stderr)
			}
		})
	}
	t.Run("AfterDoubleDash", func(t *testing.T) {
		clearEnv(t)
		code, stdout, stderr := runCmd(t, "", "key", "evt-1", "--", "-evt-2")
		if code != 0 || !strings.Contains(stdout, "-evt-2") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the keys of -evt-2", code, stdout, stderr)
		}
	})
}
