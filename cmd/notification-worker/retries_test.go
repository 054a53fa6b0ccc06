package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// retryPeers is a worker on the embedded broker with real peers: a
// redis-server, the Twilio double over HTTP and an SMTP server, each
// scripted by the test.
type retryPeers struct {
	m       *Main
	redis   *redistest.Server
	twilio  *double.Double
	smtp    *smtptest.Server
	prefix  string
	topic   string
	brokers []string
	// stop cancels the worker's Run, as SIGTERM does, and returns its error.
	stop func() error
}

// startRetryPeers starts the peers and a worker on them. twilioHook, when
// set, runs after the double answered each send. env overrides the
// worker's configuration.
func startRetryPeers(t *testing.T, script smtptest.Script, twilioHook func(), env map[string]string) *retryPeers {
	t.Helper()
	const sid, token = "AC00000000000000000000000000000001", "retrytoken"
	p := &retryPeers{redis: redistest.MustStart(t), twilio: double.New(sid, token), smtp: smtptest.StartServer(t, script)}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.twilio.ServeHTTP(w, r)
		if twilioHook != nil {
			twilioHook()
		}
	}))
	t.Cleanup(api.Close)
	p.topic, p.prefix = uniqueName("retries"), uniqueName("idem")+":"
	emb := MustStartEmbedded(t, p.topic)
	p.brokers = emb.Brokers()
	vars := map[string]string{
		"KAFKA_BROKERS":          emb.Brokers()[0],
		"KAFKA_TOPIC":            p.topic,
		"KAFKA_GROUP_ID":         uniqueName("group"),
		"REDIS_URL":              p.redis.URL(),
		"IDEMPOTENCY_KEY_PREFIX": p.prefix,
		"TWILIO_ACCOUNT_SID":     sid,
		"TWILIO_AUTH_TOKEN":      token,
		"TWILIO_FROM_NUMBER":     "+15550001111",
		"TWILIO_API_URL":         api.URL,
		"SMTP_HOST":              p.smtp.Host,
		"SMTP_PORT":              strconv.Itoa(p.smtp.Port),
		"SMTP_FROM":              "noreply@harborlight.example",
		"SMTP_TLS_POLICY":        "none",
		"SEND_TIMEOUT":           "2s",
		"IDEMPOTENCY_CLAIM_TTL":  "3s",
		"SHUTDOWN_TIMEOUT":       "5s",
		"RETRY_INITIAL_BACKOFF":  "20ms",
		"RETRY_MAX_BACKOFF":      "200ms",
		"HTTP_ADDR":              "127.0.0.1:0",
	}
	for k, v := range env {
		vars[k] = v
	}
	p.m = &Main{Config: MustLoadConfig(t, vars), Stdout: &logtest.Buffer{}}
	MustOpen(t, p.m)
	p.stop = MustRun(t, p.m)
	return p
}

// publishSMSAndEmail publishes one event for both channels and returns its id.
func (p *retryPeers) publishSMSAndEmail(t *testing.T) string {
	t.Helper()
	ev, _ := sampleEvents(1)
	ev[0].Channels = []string{"sms", "email"}
	MustPublish(t, p.brokers, p.topic, eventMessages(ev)...)
	return ev[0].EventID
}

// waitEmailSent waits until the worker counted the email sent: the record's
// last attempt has run, and no later attempt can send anything.
func (p *retryPeers) waitEmailSent(t *testing.T) {
	t.Helper()
	wait.For(t, waitWithin, "the email sent", func() (bool, string) {
		got := sumOf(scrape(t, p.m), "notification_worker_notifications_total{", `channel="email"`, `outcome="sent"`)
		return got == 1, fmt.Sprintf("emails counted sent: %v", got)
	})
}

// wantAtPeers fails unless the Twilio double and the SMTP server got exactly
// sms and emails messages.
func (p *retryPeers) wantAtPeers(t *testing.T, sms, emails int) {
	t.Helper()
	if got := len(p.twilio.Messages()); got != sms {
		t.Errorf("Twilio double accepted %d SMS, want %d", got, sms)
	}
	if got := len(p.smtp.Deliveries()); got != emails {
		t.Errorf("SMTP server accepted %d emails, want %d", got, emails)
	}
}

func smtpReply(code int, enhanced gosmtp.EnhancedCode, msg string) error {
	return &gosmtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: msg}
}

// TestMain_OwnRetriesNeverResend retries a record on SMS and email whose
// email fails, through the consumer's own retry policy, against real peers:
// the SMS already delivered must not go out again, whatever the store.
func TestMain_OwnRetriesNeverResend(t *testing.T) {
	t.Run("RedisDownEmail451ThreeTimes", func(t *testing.T) {
		t.Parallel()
		p := startRetryPeers(t, smtptest.Script{DataReply: func(n int) error {
			if n <= 3 {
				return smtpReply(451, gosmtp.EnhancedCode{4, 3, 0}, "try again later")
			}
			return nil
		}}, nil, nil)
		p.redis.Kill(t)
		p.publishSMSAndEmail(t)
		p.waitEmailSent(t)
		p.wantAtPeers(t, 1, 1)
	})

	t.Run("RedisDownEmailUnavailableFor30s", func(t *testing.T) {
		t.Parallel()
		const outage = 30 * time.Second
		var start atomic.Int64
		p := startRetryPeers(t, smtptest.Script{DataReply: func(n int) error {
			start.CompareAndSwap(0, time.Now().UnixNano())
			if time.Since(time.Unix(0, start.Load())) < outage {
				// 530 to a message: the relay wants credentials, which the
				// SMTP adapter reports Unavailable, retried without limit.
				return smtpReply(530, gosmtp.EnhancedCode{5, 7, 0}, "Authentication required")
			}
			return nil
		}}, nil, nil)
		p.redis.Kill(t)
		p.publishSMSAndEmail(t)
		p.waitEmailSent(t)
		p.wantAtPeers(t, 1, 1)
	})

	t.Run("RedisHealthySMSRecordFailsOnceThenEmailFailsOnce", func(t *testing.T) {
		t.Parallel()
		var admin func(args ...string)
		var logs func() string
		var sends atomic.Int32
		// After the double accepted the SMS, and before the worker hears
		// so, Redis starts refusing writes (out of memory) until the
		// worker has logged the failed record write: it fails for real,
		// unlike a write cut short by a pause, which a resumed server
		// would still apply.
		hook := func() {
			if sends.Add(1) != 1 {
				return
			}
			admin("CONFIG", "SET", "maxmemory", "1")
			go func() {
				defer admin("CONFIG", "SET", "maxmemory", "0")
				for deadline := time.Now().Add(waitWithin); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if strings.Contains(logs(), `"msg":"idempotency_record_failed"`) {
						return
					}
				}
			}()
		}
		p := startRetryPeers(t, smtptest.Script{DataReply: func(n int) error {
			if n == 1 {
				return smtpReply(451, gosmtp.EnhancedCode{4, 3, 0}, "try again later")
			}
			return nil
		}}, hook, map[string]string{
			// The retry comes after Redis takes writes again.
			"RETRY_INITIAL_BACKOFF": "500ms",
			"RETRY_MAX_BACKOFF":     "500ms",
		})
		logs = p.m.Stdout.(*logtest.Buffer).String
		client := p.redis.MustClient(t, 0)
		admin = func(args ...string) {
			if err := client.Do(context.Background(), client.B().Arbitrary(args...).Build()).Error(); err != nil {
				t.Errorf("redis %v: %v", args, err)
			}
		}
		id := p.publishSMSAndEmail(t)
		p.waitEmailSent(t)
		p.wantAtPeers(t, 1, 1)
		// The owed SMS record is written: a replay from anywhere is suppressed.
		key := storeKey(t, p.m.Config)(domain.NotificationKey(id, ports.ChannelSMS))
		wait.For(t, waitWithin, "the owed SMS record in Redis", func() (bool, string) {
			v, err := client.Do(context.Background(), client.B().Get().Key(key).Build()).ToString()
			return err == nil && isSentRecord(v), fmt.Sprintf("GET %s = %q, %v", key, v, err)
		})
	})
}
