package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
)

// Customers' addresses in the leak test. Each appears in an event that goes
// down one log path; none may appear in clear anywhere. The phone numbers
// are checked without their "+" too, so an URL-encoded or reformatted copy
// is caught as well.
const (
	phoneInvalid  = "+31200101111" // Twilio answers 400, code 21211
	phoneDown     = "+31200102222" // Twilio answers 429 once, then 408
	phoneOK       = "+31200103333"
	phonePoison   = "+31200104444"                      // in a record that does not decode
	phoneOutage   = "+31200107777"                      // sent while Redis is down
	emailRejected = "grace.hopper.rejected@example.com" // SMTP answers 550
	emailOK       = "ada.lovelace@example.com"
	emailPoison   = "linus.torvalds@example.com"
	emailInvalid  = "margaret.hamilton@@example.com" // fails validation
	emailOutage   = "barbara.liskov@example.com"
	twilioSID     = "ACleaktest"
	smtpUser      = "worker"
	smtpFrom      = "noreply@harborlight.example"
	twilioFrom    = "+15559990000" // the company's own number, not a customer's
	// customerName is every event's recipient name but two: one event's
	// name is nameLong, over 10 kB, and another's phone field holds
	// nameInPhone, a name in the wrong field. Neither may appear anywhere.
	customerName = "Katherine Coleman Johnson"
	nameInPhone  = "Dorothy Vaughan"
)

// nameLong is a recipient name of about 10 kB: far over the 100 characters
// an event may carry, so its record is dead-lettered with a reason that
// must give its length, not the name.
var nameLong = strings.Repeat("Grace Brewster Murray Hopper ", 10<<10/29)

// TestLogs_NoSecretOrAddressLeaks feeds real-looking secrets and customer
// addresses and names down every log path of the worker (start-up, sent,
// every failed send, dead letters, retries, the store failing open) and
// greps everything it wrote: its logs, the headers of its dead letters, its
// metrics and /readyz, anything written through the default logger, the
// errors it returned, the trace spans it made and, through run, stderr. No
// secret and no name may appear; phone numbers and email addresses may
// appear only masked.
func TestLogs_NoSecretOrAddressLeaks(t *testing.T) {
	suffix := uniqueName("x")[2:]
	secrets := map[string]string{
		"redis password":    "r3disPass-" + suffix,
		"twilio token":      "twilioTok" + suffix,
		"smtp password":     "smtpPass-" + suffix,
		"kafka sasl secret": "saslPass-" + suffix,
	}
	forbidden := map[string]string{}
	for what, s := range secrets {
		forbidden[what] = s
	}
	for _, p := range []string{phoneInvalid, phoneDown, phoneOK, phonePoison, phoneOutage} {
		forbidden["phone "+p] = strings.TrimPrefix(p, "+")[1:] // "120..." catches "+3120...", "3120...", "%2B3120..."
	}
	for _, e := range []string{emailRejected, emailOK, emailPoison, emailInvalid, emailOutage} {
		forbidden["email "+e] = e[:strings.IndexByte(e, '@')] // the local part, which masking drops
	}
	forbidden["name"] = "Coleman"
	forbidden["10 kB name"] = "Brewster"
	forbidden["name in the phone field"] = "Vaughan"

	// Anything a library writes through the default logger is output too.
	var stray logtest.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewJSONHandler(&stray, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	t.Run("Worker", func(t *testing.T) {
		redisSrv := redistest.MustStart(t)
		// Set after start: redistest's readiness PING goes unauthenticated.
		admin := redisSrv.MustClient(t, 0)
		if err := admin.Do(context.Background(), admin.B().ConfigSet().ParameterValue().ParameterValue("requirepass", secrets["redis password"]).Build()).Error(); err != nil {
			t.Fatalf("CONFIG SET requirepass: %v", err)
		}
		twilioAPI := startTwilioDouble(t, secrets["twilio token"])
		smtpSrv := startSMTPServer(t, secrets["smtp password"])
		topic := uniqueName("leak")
		emb := MustStartEmbedded(t, topic)
		cfg := MustLoadConfig(t, map[string]string{
			"KAFKA_BROKERS":                emb.Brokers()[0],
			"KAFKA_TOPIC":                  topic,
			"KAFKA_GROUP_ID":               uniqueName("group"),
			"REDIS_URL":                    "redis://:" + secrets["redis password"] + "@" + redisSrv.Addr(),
			"IDEMPOTENCY_KEY_PREFIX":       uniqueName("idem") + ":",
			"IDEMPOTENCY_BREAKER_FAILURES": "1000", // the store's own errors, never the open circuit's
			"TWILIO_ACCOUNT_SID":           twilioSID,
			"TWILIO_AUTH_TOKEN":            secrets["twilio token"],
			"TWILIO_FROM_NUMBER":           twilioFrom,
			"TWILIO_API_URL":               twilioAPI,
			"SMTP_HOST":                    "127.0.0.1",
			"SMTP_PORT":                    strconv.Itoa(smtpSrv.Port),
			"SMTP_USERNAME":                smtpUser,
			"SMTP_PASSWORD":                secrets["smtp password"],
			"SMTP_FROM":                    smtpFrom,
			"SMTP_TLS_POLICY":              "none",
			"SEND_TIMEOUT":                 "2s",
			"RETRY_MAX_ATTEMPTS":           "2",
			"RETRY_INITIAL_BACKOFF":        "10ms",
			"RETRY_MAX_BACKOFF":            "20ms",
			"SHUTDOWN_TIMEOUT":             "5s",
			"HTTP_ADDR":                    "127.0.0.1:0",
			"LOG_LEVEL":                    "debug",
		})
		var out logtest.Buffer
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		m := &Main{Config: cfg, Stdout: &out, Deps: Deps{TracerProvider: tp}}
		MustOpen(t, m)
		stop := MustRun(t, m)

		ev := func(shipment string, phone, email string, channels ...string) sampleEvent {
			e, _ := sampleEvents(1)
			e[0].ShipmentID = shipment
			e[0].Recipient = sampleRecipient{Name: customerName, Phone: phone, Email: email}
			e[0].Channels = channels
			return e[0]
		}
		invalidEmail := ev("SHP-LEAK-5", phoneOK, emailInvalid, "sms", "email")
		longName := ev("SHP-LEAK-8", phoneOK, "", "sms")
		longName.Recipient.Name = nameLong
		msgs := eventMessages([]sampleEvent{
			ev("SHP-LEAK-1", phoneInvalid, "", "sms"),
			ev("SHP-LEAK-2", phoneDown, "", "sms"),
			ev("SHP-LEAK-3", "", emailRejected, "email"),
			ev("SHP-LEAK-4", phoneOK, emailOK, "sms", "email"),
			invalidEmail,
			longName,
			ev("SHP-LEAK-9", nameInPhone, "", "sms"),
		})
		msgs = append(msgs, kafka.Message{
			Key:   []byte("SHP-LEAK-6"),
			Value: []byte(`{"type":"shipment.delivered","recipient":{"phone":"` + phonePoison + `","email":"` + emailPoison + `"`),
		})
		MustPublish(t, emb.Brokers(), topic, msgs...)
		wait.For(t, waitWithin, "every record handled", func() (bool, string) {
			s := scrape(t, m)
			sent := sumOf(s, "notification_worker_notifications_total{", `outcome="sent"`)
			perm := sumOf(s, "notification_worker_records_dead_lettered_total{", `kind="permanent"`)
			retry := sumOf(s, "notification_worker_records_dead_lettered_total{", `kind="retryable"`)
			return sent == 2 && perm == 6 && retry == 1,
				fmt.Sprintf("sent %v of 2, dead-lettered permanent %v of 6, retryable %v of 1", sent, perm, retry)
		})
		t.Run("DeadLetterHeaders", func(t *testing.T) {
			// The value is the record as it came, kept for a replay; the
			// headers the worker adds are read by people and tools.
			dead := MustReadHeaders(t, emb.Brokers(), topic+".dlq", 7)
			reasons := map[string]string{}
			for _, r := range dead {
				var text strings.Builder
				for _, h := range r.Headers {
					fmt.Fprintf(&text, "%s: %s\n", h.Key, h.Value)
					if h.Key == kafka.HeaderDLQReason {
						reasons[string(r.Key)] = string(h.Value)
					}
				}
				assertNoLeak(t, "dead-letter headers of "+string(r.Key), text.String(), forbidden)
			}
			for key, want := range map[string]string{
				"SHP-LEAK-8": "recipient.name: 10236 characters, longer than 100",
				"SHP-LEAK-9": "recipient.phone: not an E.164 phone number: unexpected character (a value of 15 bytes, not shown)",
				"SHP-LEAK-5": "recipient.email: not an email address (a value of 30 bytes, not shown)",
			} {
				if !strings.Contains(reasons[key], want) {
					t.Errorf("dead letter %s: reason %q, want it to say %q", key, reasons[key], want)
				}
			}
		})

		// The store goes away: the worker fails open and says so.
		redisSrv.Kill(t)
		MustPublish(t, emb.Brokers(), topic, eventMessages([]sampleEvent{ev("SHP-LEAK-7", phoneOutage, emailOutage, "sms", "email")})...)
		wait.For(t, waitWithin, "sent with Redis down", func() (bool, string) {
			s := scrape(t, m)
			sent := sumOf(s, "notification_worker_notifications_total{", `outcome="sent"`)
			return sent == 4, fmt.Sprintf("sent %v of 4", sent)
		})
		// Metric labels and /readyz, as a scraper or a probe reads them.
		for _, path := range []string{"/metrics", "/readyz"} {
			_, body, err := httpGet("http://" + m.HTTPAddr() + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			assertNoLeak(t, path, body, forbidden)
		}
		if err := stop(); err != nil {
			assertNoLeak(t, "Run's error", err.Error(), forbidden)
			t.Errorf("Run: %v", err)
		}
		m.Close()

		logs := out.String()
		assertNoLeak(t, "worker logs", logs, forbidden)
		t.Run("Spans", func(t *testing.T) {
			var b strings.Builder
			for _, s := range spans.GetSpans() {
				fmt.Fprintln(&b, s.Name, s.Status.Description, s.Attributes, s.Events)
			}
			assertNoLeak(t, "spans", b.String(), forbidden)
			for _, want := range []string{"+31*******11", "g***@example.com", "error.type"} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("spans lack %s: were the failed sends traced?", want)
				}
			}
		})
		t.Run("EveryPathWasTaken", func(t *testing.T) {
			// Without these the test would pass by logging nothing.
			seen := map[string]int{}
			for n, line := range strings.Split(strings.TrimSpace(logs), "\n") {
				var rec struct{ Msg, Outcome string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Errorf("log line %d is not JSON: %v: %s", n+1, err, line)
					continue
				}
				seen[rec.Msg]++
				if rec.Outcome != "" {
					seen[rec.Msg+"/"+rec.Outcome]++
				}
			}
			for _, msg := range []string{
				"worker_starting", "notification_sent", "notification_failed/failed_permanent",
				"notification_failed/failed_retryable", "record_retry_scheduled", "event_dead_lettered", "notification_rate_limited",
				"idempotency_check_unavailable", "idempotency_record_failed", "worker_stopped",
			} {
				if seen[msg] == 0 {
					t.Errorf("no %s line; seen %v", msg, seen)
				}
			}
		})
		t.Run("AddressesAppearMasked", func(t *testing.T) {
			for _, want := range []string{
				"+31*******11", "+31*******22", "+31*******33", "+31*******77",
				"g***@example.com", "a***@example.com", "b***@example.com",
				`"redis_url":"redis://:***@` + redisSrv.Addr() + `"`,
				`"auth_token":"***"`, `"password":"***"`,
			} {
				if !strings.Contains(logs, want) {
					t.Errorf("logs lack %s", want)
				}
			}
		})
	})

	t.Run("ConfigDumpWithKafkaSASL", func(t *testing.T) {
		// The embedded broker speaks no SASL, so the SASL password is
		// checked where it could leak without a broker: the start-up
		// dump, and the error when the brokers cannot be reached. It goes
		// through run, as main does, so stderr is covered too.
		env := map[string]string{
			"KAFKA_BROKERS":        closedAddr(t),
			"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"KAFKA_SASL_USERNAME":  "worker",
			"KAFKA_SASL_PASSWORD":  secrets["kafka sasl secret"],
			"TWILIO_ACCOUNT_SID":   twilioSID,
			"TWILIO_AUTH_TOKEN":    secrets["twilio token"],
			"TWILIO_FROM_NUMBER":   twilioFrom,
			"REDIS_URL":            "",
			"IDEMPOTENCY_STORE":    "memory",
			"HTTP_ADDR":            "off",
			"LOG_FORMAT":           "json",
			"STARTUP_TIMEOUT":      "1s",
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
		defer cancel()
		var stdout, stderr bytes.Buffer
		if code := run(ctx, []string{"worker"}, strings.NewReader(""), &stdout, &stderr); code != 3 {
			t.Errorf("run = %d, want 3 (brokers unreachable); stderr: %s", code, &stderr)
		}
		assertNoLeak(t, "stdout", stdout.String(), forbidden)
		assertNoLeak(t, "stderr", stderr.String(), forbidden)
		if !strings.Contains(stdout.String(), `"sasl_password":"***"`) {
			t.Errorf("worker_starting does not show the SASL password as ***:\n%s", &stdout)
		}
	})

	t.Run("InvalidConfiguration", func(t *testing.T) {
		// Each secret is malformed, so Load's one error names it.
		env := map[string]string{
			"KAFKA_BROKERS":       "",
			"KAFKA_SASL_PASSWORD": secrets["kafka sasl secret"], // set without brokers
			"TWILIO_AUTH_TOKEN":   secrets["twilio token"] + "-not-alphanumeric",
			"REDIS_URL":           "redis://:" + secrets["redis password"] + "%zz@127.0.0.1:6379",
			"SMTP_PASSWORD":       secrets["smtp password"], // without SMTP_HOST
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"worker"}, strings.NewReader(""), &stdout, &stderr); code != 2 {
			t.Errorf("run = %d, want 2 (bad configuration)", code)
		}
		for _, v := range []string{"KAFKA_SASL_PASSWORD", "TWILIO_AUTH_TOKEN", "REDIS_URL", "SMTP_HOST"} {
			if !strings.Contains(stderr.String(), v) {
				t.Errorf("stderr does not name %s: %s", v, &stderr)
			}
		}
		assertNoLeak(t, "stderr", stderr.String(), forbidden)
		assertNoLeak(t, "stdout", stdout.String(), forbidden)
	})

	assertNoLeak(t, "default logger", stray.String(), forbidden)
}

// MustReadHeaders reads topic from the start until n records arrived, with
// their headers, which ports.Record does not carry.
func MustReadHeaders(tb testing.TB, brokers []string, topic string, n int) []*kgo.Record {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("read %d records from %s within %v, want %d", len(got), topic, waitWithin, n)
		}
		for _, e := range fs.Errors() {
			tb.Fatalf("reading %s: %v", topic, e.Err)
		}
		got = append(got, fs.Records()...)
	}
	return got
}

// assertNoLeak fails for every line of text holding a forbidden string,
// and for every line showing more of a customer's phone number than its
// country code and 2 digits.
func assertNoLeak(tb testing.TB, where, text string, forbidden map[string]string) {
	tb.Helper()
	for n, line := range strings.Split(text, "\n") {
		for what, s := range forbidden {
			if strings.Contains(line, s) {
				tb.Errorf("%s, line %d: leaks the %s: %s", where, n+1, what, line)
			}
		}
		for _, shown := range customerPhoneShown.FindAllStringSubmatch(line, -1) {
			if digits := len(shown[1]) - strings.Count(shown[1], "*"); digits > 2 {
				tb.Errorf("%s, line %d: %s shows %d digits of a customer's number past its country code, want at most 2: %s", where, n+1, shown[0], digits, line)
			}
		}
	}
}

// customerCountryCode is the country code of every customer's number in
// the leak test; customerPhoneShown matches what is shown of one (in clear,
// masked, or URL-encoded).
const customerCountryCode = "31"

var customerPhoneShown = regexp.MustCompile(`(?:\+|%2B)` + customerCountryCode + `([0-9*]*)`)

// closedAddr returns a 127.0.0.1 address nothing listens on.
func closedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startTwilioDouble answers Twilio's Messages API: 400 with code 21211 for
// phoneInvalid; for phoneDown 429 (backpressure: the record waits) once,
// then 408 (a retryable failure, until the record is dead-lettered); 201
// otherwise. The errors quote the number back, as Twilio's messages do,
// so masking is tested on them.
func startTwilioDouble(tb testing.TB, token string) string {
	tb.Helper()
	var n, down int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != twilioSID || pass != token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_ = r.ParseForm()
		to := r.PostForm.Get("To")
		w.Header().Set("Content-Type", "application/json")
		switch to {
		case phoneInvalid:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"code":21211,"message":"The 'To' number %s is not a valid phone number.","more_info":"https://www.twilio.com/docs/errors/21211","status":400}`, to)
		case phoneDown:
			mu.Lock()
			down++
			first := down == 1
			mu.Unlock()
			if first {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprintf(w, `{"code":20429,"message":"Too many requests while sending to %s","more_info":"","status":429}`, to)
				return
			}
			w.WriteHeader(http.StatusRequestTimeout)
			fmt.Fprintf(w, `{"code":20408,"message":"Request timed out while sending to %s","more_info":"","status":408}`, to)
		default:
			mu.Lock()
			n++
			sid := fmt.Sprintf("SM%032d", n)
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"sid":%q,"status":"queued"}`, sid)
		}
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// startSMTPServer starts an SMTP server that requires AUTH PLAIN as
// smtpUser with password and answers 550 to RCPT TO emailRejected, quoting
// the address back, so the worker's error for it holds the address.
func startSMTPServer(tb testing.TB, password string) *smtptest.Server {
	tb.Helper()
	return smtptest.StartServer(tb, smtptest.Script{
		Users: map[string]string{smtpUser: password},
		RcptReply: func(rcpt string, _ int) error {
			if rcpt == emailRejected {
				return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "<" + rcpt + ">: no such user here"}
			}
			return nil
		},
	})
}
