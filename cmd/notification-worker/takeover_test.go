package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// takeoverRig is what workers that take each other's claims over share: a
// redis-server, the Twilio double (whose Messages list the test can make
// answer 503), a topic and a consumer group. Each worker it starts is a
// rolling deploy's pod: started, and stopped before the next one starts.
type takeoverRig struct {
	redis    *redistest.Server
	twilio   *double.Double
	api      *httptest.Server
	listDown atomic.Bool  // the Messages list answers 503
	listed   atomic.Int64 // list requests answered 503
	// from, service and listLag configure the Twilio adapter of the
	// workers started next: its sender (a From number, or a messaging
	// service) and its TWILIO_LIST_LAG.
	from, service string
	listLag       time.Duration
	topic         string
	group         string
	prefix        string
	brokers       []string
}

const (
	rigSID, rigToken, rigFrom = "AC00000000000000000000000000000002", "takeovertoken", "+15550002222"
	// rigSkew is the clock skew the workers' Twilio adapter allows: these
	// workers share this host's clock and the double's, so it need only
	// cover the list's dates, which are to the second. Shorter than the
	// claim TTL, it keeps a window from reaching the lease before.
	rigSkew = 1500 * time.Millisecond
)

func startTakeoverRig(t *testing.T) *takeoverRig {
	t.Helper()
	r := &takeoverRig{redis: redistest.MustStart(t), twilio: double.New(rigSID, rigToken), from: rigFrom, listLag: 300 * time.Millisecond}
	r.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/Messages.json") && r.listDown.Load() {
			r.listed.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"code":20503,"message":"Service Unavailable","status":503}`)
			return
		}
		r.twilio.ServeHTTP(w, req)
	}))
	t.Cleanup(r.api.Close)
	r.topic, r.group, r.prefix = uniqueName("takeover"), uniqueName("group"), uniqueName("idem")+":"
	r.brokers = MustStartEmbedded(t, r.topic).Brokers()
	return r
}

// worker starts a worker on the rig; env overrides its configuration. stop
// ends it as SIGTERM does, and closes it.
func (r *takeoverRig) worker(t *testing.T, env map[string]string) (out *logtest.Buffer, stop func()) {
	t.Helper()
	vars := map[string]string{
		"KAFKA_BROKERS":          r.brokers[0],
		"KAFKA_TOPIC":            r.topic,
		"KAFKA_GROUP_ID":         r.group,
		"REDIS_URL":              r.redis.URL(),
		"SMS_NOTIFIER":           "console",
		"EMAIL_NOTIFIER":         "console",
		"IDEMPOTENCY_KEY_PREFIX": r.prefix,
		"HTTP_ADDR":              "",
		"SEND_TIMEOUT":           "1s",
		"IDEMPOTENCY_CLAIM_TTL":  "3s",
		"SHUTDOWN_TIMEOUT":       "5s",
		"RECONCILE_TIMEOUT":      "5m",
		"RETRY_INITIAL_BACKOFF":  "50ms",
		"RETRY_MAX_BACKOFF":      "200ms",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg := MustLoadConfig(t, vars)
	sms, err := twilio.New(twilio.Config{
		AccountSID: rigSID, AuthToken: rigToken, From: r.from, MessagingServiceSID: r.service, APIURL: r.api.URL,
		Timeout: cfg.SendTimeout, ListLag: r.listLag, ClockSkew: rigSkew,
	})
	if err != nil {
		t.Fatal(err)
	}
	out = &logtest.Buffer{}
	m := &Main{Config: cfg, Stdout: out, Deps: Deps{Notifiers: map[ports.Channel]ports.Notifier{
		ports.ChannelSMS: sms, ports.ChannelEmail: console.New(io.Discard),
	}}}
	MustOpen(t, m)
	run := MustRun(t, m)
	return out, func() {
		if err := run(); err != nil {
			t.Errorf("Run: %v", err)
		}
		m.Close()
	}
}

// smsTo counts the SMS the double accepted for phone.
func (r *takeoverRig) smsTo(phone string) int {
	n := 0
	for _, m := range r.twilio.Messages() {
		if m.To == phone {
			n++
		}
	}
	return n
}

// oneSMSEvent returns a fresh event for SMS only.
func oneSMSEvent() sampleEvent {
	evs, _ := sampleEvents(1)
	evs[0].Channels = []string{"sms"}
	return evs[0]
}

// waitLogged waits until out holds an event msg.
func waitLogged(t *testing.T, who string, out *logtest.Buffer, msg string) {
	t.Helper()
	wait.For(t, waitWithin, who+" logs "+msg, func() (bool, string) {
		return len(out.Events(t, msg)) > 0, tailOf(out.String())
	})
}

// tailOf is the end of a log, for a failure message.
func tailOf(s string) string {
	if len(s) > 1500 {
		return "..." + s[len(s)-1500:]
	}
	return s
}

// sendUnknownThenStop runs worker A on ev: Twilio takes the SMS but
// answers after the send timeout, and the Messages list answers 503, so A
// keeps its claim, cannot tell, and is stopped (a rolling deploy).
func (r *takeoverRig) sendUnknownThenStop(t *testing.T, ev sampleEvent) {
	t.Helper()
	r.listDown.Store(true)
	r.twilio.Fail(double.Fault{To: ev.Recipient.Phone, Count: 1, Accept: true, Delay: double.Duration(2 * time.Second)})
	outA, stopA := r.worker(t, nil)
	MustPublish(t, r.brokers, r.topic, eventMessages([]sampleEvent{ev})...)
	waitLogged(t, "A", outA, "send_outcome_unknown")
	if n := r.smsTo(ev.Recipient.Phone); n != 1 {
		t.Fatalf("the double took %d SMS from A, want 1", n)
	}
	stopA()
}

// TestMain_TakeoverOfATakeoverReconcilesTheFirstSend: A's send times out
// though Twilio took it, and A is stopped; B takes A's claim over while the
// Messages list answers 503, cannot tell, and is stopped too; C takes B's
// claim over with the list back. C must look for A's send, made before B's
// lease began: 1 SMS, reconciled delivered.
func TestMain_TakeoverOfATakeoverReconcilesTheFirstSend(t *testing.T) {
	r := startTakeoverRig(t)
	ev := oneSMSEvent()
	r.sendUnknownThenStop(t, ev)

	before := r.listed.Load()
	outB, stopB := r.worker(t, nil)
	waitLogged(t, "B", outB, "claim_taken_over")
	wait.For(t, waitWithin, "B asks the list and gets 503", func() (bool, string) {
		return r.listed.Load() > before, tailOf(outB.String())
	})
	stopB()
	if n := r.smsTo(ev.Recipient.Phone); n != 1 {
		t.Fatalf("after B the double holds %d SMS, want 1", n)
	}

	r.listDown.Store(false)
	outC, _ := r.worker(t, nil)
	waitLogged(t, "C", outC, "claim_taken_over")
	wait.For(t, waitWithin, "C reconciles or sends", func() (bool, string) {
		return len(outC.Events(t, "reconciled_delivered"))+len(outC.Events(t, "notification_sent")) > 0, tailOf(outC.String())
	})
	if n := r.smsTo(ev.Recipient.Phone); n != 1 {
		t.Errorf("the double accepted %d SMS for the event, want 1 (C must find A's send)", n)
	}
	if len(outC.Events(t, "reconciled_delivered")) == 0 {
		t.Errorf("C did not log reconciled_delivered: %s", tailOf(outC.String()))
	}
}

// TestMain_RewordedTemplateReconcilesWhatWasSent: A's send times out though
// Twilio took it, and A is stopped; B, deployed with a reworded SMS
// template, takes the claim over. The listed body is A's wording, not B's
// rendering: B must still find it, and send nothing.
func TestMain_RewordedTemplateReconcilesWhatWasSent(t *testing.T) {
	r := startTakeoverRig(t)
	ev := oneSMSEvent()
	r.sendUnknownThenStop(t, ev)

	r.listDown.Store(false)
	outB, _ := r.worker(t, map[string]string{"TEMPLATES_DIR": rewordedTemplates(t, ev.Type)})
	waitLogged(t, "B", outB, "claim_taken_over")
	wait.For(t, waitWithin, "B reconciles or sends", func() (bool, string) {
		return len(outB.Events(t, "reconciled_delivered"))+len(outB.Events(t, "notification_sent")) > 0, tailOf(outB.String())
	})
	if n := r.smsTo(ev.Recipient.Phone); n != 1 {
		var bodies []string
		for _, m := range r.twilio.Messages() {
			bodies = append(bodies, m.Body)
		}
		t.Errorf("the double accepted %d SMS for the event, want 1; bodies: %q", n, bodies)
	}
}

// rewordedTemplates writes a templates directory whose SMS for type typ is
// worded otherwise than the embedded one, and returns it.
func rewordedTemplates(t *testing.T, typ string) string {
	t.Helper()
	dir := t.TempDir()
	orig, err := fs.ReadFile(os.DirFS("../../domain/templates"), typ+".tmpl")
	if err != nil {
		t.Fatal(err)
	}
	reworded := strings.Replace(string(orig), `{{define "sms"}}Harborlight: `, `{{define "sms"}}Harborlight update: `, 1)
	if reworded == string(orig) {
		t.Fatalf("%s.tmpl: no SMS block to reword", typ)
	}
	if err := os.WriteFile(filepath.Join(dir, typ+".tmpl"), []byte(reworded), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMain_AbandonedReadableClaimIsTakenOver: a worker writing readable
// keys (the release before compact keys, or the first step of their
// roll-out) was killed mid-send, leaving its claim. A worker on the
// defaults (compact keys, reading both formats) must take that claim over,
// find the SMS was not sent, and send it: once.
func TestMain_AbandonedReadableClaimIsTakenOver(t *testing.T) {
	r := startTakeoverRig(t)
	ev := oneSMSEvent()
	readable, err := redis.New(redis.Config{URL: r.redis.URL(), Format: redis.Readable, KeyPrefix: r.prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer readable.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	key := domain.NotificationKey(ev.EventID, ports.ChannelSMS)
	if c, err := readable.Claim(ctx, key, "killed-worker", "", "", 50*time.Millisecond); err != nil || c.State != ports.Claimed {
		t.Fatalf("readable claim: %v, %v", c.State, err)
	}
	time.Sleep(100 * time.Millisecond) // the lease passes: the claim is abandoned

	out, _ := r.worker(t, nil)
	MustPublish(t, r.brokers, r.topic, eventMessages([]sampleEvent{ev})...)
	wait.For(t, waitWithin, "the SMS sent", func() (bool, string) {
		return len(out.Events(t, "notification_sent")) > 0, fmt.Sprintf("double holds %d; log: %s", r.smsTo(ev.Recipient.Phone), tailOf(out.String()))
	})
	if n := r.smsTo(ev.Recipient.Phone); n != 1 {
		t.Errorf("the double accepted %d SMS for the event, want 1", n)
	}
	if len(out.Events(t, "claim_taken_over")) == 0 {
		t.Errorf("no claim_taken_over logged: %s", tailOf(out.String()))
	}
}
