package main

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
)

// mostRefused is how many of n sends the Twilio double may refuse for its
// pace in these tests: the worker's turns are 25% slower than the double's
// pace and the double allows a burst of two, but a loaded machine can hold
// sends back and let them go together; each refused one is paused and
// sent later, once. Without the limit the double refuses most of them.
func mostRefused(n int) int64 { return int64(max(1, n/10)) }

// smsBacklog returns n sample events for the SMS channel only, each of its
// own shipment (shipment-NNN), so that no two share a key and all may be
// in flight at once.
func smsBacklog(n int, shipment string) []sampleEvent {
	ev, _ := sampleEvents(n)
	for i := range ev {
		ev[i].Channels = []string{"sms"}
		ev[i].ShipmentID = fmt.Sprintf("%s-%03d", shipment, i)
	}
	return ev
}

// wantEachSMSOnce checks that the Twilio double accepted exactly one SMS
// for each of ev's recipients, among msgs.
func wantEachSMSOnce(t *testing.T, ev []sampleEvent, msgs []double.Message) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.To]++
	}
	for _, e := range ev {
		if seen[e.Recipient.Phone] != 1 {
			t.Errorf("SMS to %s accepted %d times, want 1", e.Recipient.Phone, seen[e.Recipient.Phone])
		}
	}
}

// logOnFailure logs m's lines when t has failed, prefixed by who (if not
// empty), leaving out the routine ones of a paced backlog (each send, each
// retry, each wait without a turn) and those naming any of skip.
func logOnFailure(t *testing.T, who string, m *Main, skip ...string) {
	t.Helper()
	skip = append([]string{`"notification_sent"`, "record_retry_scheduled", "rate_limit_no_turn"}, skip...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
	lines:
		for _, l := range strings.Split(m.Stdout.(*logtest.Buffer).String(), "\n") {
			for _, s := range skip {
				if strings.Contains(l, s) {
					continue lines
				}
			}
			if who != "" {
				l = who + ": " + l
			}
			t.Log(l)
		}
	})
}

// TestRateLimit_SendsAtTheProvidersPace runs a backlog of SMS through a
// worker whose SMS_RATE_LIMIT is below the pace the Twilio double enforces
// per sender: the double (almost) never has to refuse a send (429), every event is
// sent exactly once, and none is dead-lettered. Without the limit the
// backlog goes at the double as fast as MAX_IN_FLIGHT allows, and the
// double refuses most of it.
func TestRateLimit_SendsAtTheProvidersPace(t *testing.T) {
	const events = 30
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"SMS_RATE_LIMIT": "8",
		"SMS_RATE_BURST": "1",
		"MAX_IN_FLIGHT":  "16",
		// Generous store bounds: a store call timing out under a loaded
		// machine fails open, and a release that times out leaves a claim
		// the next attempt must take over and reconcile, which is not what
		// this test is about.
		"IDEMPOTENCY_TIMEOUT":   "1s",
		"IDEMPOTENCY_CLAIM_TTL": "10s",
	})
	p.twilio.LimitRate(double.RateLimit{PerSecond: 10, Burst: 2})
	logOnFailure(t, "", p.m)

	ev := smsBacklog(events, "SHP-RATE")
	start := time.Now()
	MustPublish(t, p.brokers, p.topic, eventMessages(ev)...)
	wait.For(t, waitWithin, "every SMS sent", func() (bool, string) {
		got := sumOf(scrape(t, p.m), "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
		return got == events, fmt.Sprintf("SMS counted sent: %v of %d", got, events)
	})
	took := time.Since(start)

	if n := p.twilio.RateLimited(); n > mostRefused(events) {
		t.Errorf("the double refused %d sends for its pace (429), want at most %d: the worker went faster than SMS_RATE_LIMIT", n, mostRefused(events))
	}
	msgs := p.twilio.Messages()
	wantEachSMSOnce(t, ev, msgs)
	if len(msgs) != events {
		t.Errorf("the double accepted %d SMS, want %d", len(msgs), events)
	}
	s := scrape(t, p.m)
	if dl := sumOf(s, "notification_worker_records_dead_lettered_total{"); dl != 0 {
		t.Errorf("%v records dead-lettered, want 0", dl)
	}
	// At 8/s, burst 1: the last of 30 goes no sooner than 29 Intervals
	// after the first.
	if least := 29 * time.Second / 8; took < least {
		t.Errorf("%d SMS took %v, less than %v: not paced", events, took, least)
	}
	// A turn for each send the double saw: each accepted SMS, and each
	// refused one (sent again at a later turn).
	if got, want := sumOf(s, "notification_worker_rate_limit_wait_seconds_count{", `channel="sms"`), float64(events+p.twilio.RateLimited()); got != want {
		t.Errorf("the wait histogram counted %v turns, want %v", got, want)
	}
	t.Logf("%d SMS in %v; double refused %d", events, took, p.twilio.RateLimited())
}

// TestRateLimit_EmailAtTheRelaysPace: EMAIL_RATE_LIMIT paces the SMTP
// relay as SMS_RATE_LIMIT paces Twilio: a backlog of emails reaches the
// relay once each, no faster than the limit, each after its turn.
func TestRateLimit_EmailAtTheRelaysPace(t *testing.T) {
	const events = 12
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"EMAIL_RATE_LIMIT": "8",
		"EMAIL_RATE_BURST": "1",
		// Generous store bounds, as for the SMS backlog above.
		"IDEMPOTENCY_TIMEOUT":   "1s",
		"IDEMPOTENCY_CLAIM_TTL": "10s",
	})
	logOnFailure(t, "", p.m)
	ev := smsBacklog(events, "SHP-MAIL")
	for i := range ev {
		ev[i].Channels = []string{"email"}
	}
	start := time.Now()
	MustPublish(t, p.brokers, p.topic, eventMessages(ev)...)
	wait.For(t, waitWithin, "every email at the relay", func() (bool, string) {
		n := len(p.smtp.Deliveries())
		return n >= events, fmt.Sprintf("%d of %d delivered", n, events)
	})
	took := time.Since(start)
	for _, e := range ev {
		if n := p.smtp.Delivered(e.Recipient.Email); n != 1 {
			t.Errorf("email to %s delivered %d times, want 1", e.Recipient.Email, n)
		}
	}
	// At 8/s, burst 1: the last of 12 goes no sooner than 11 Intervals
	// after the first.
	if least := (events - 1) * time.Second / 8; took < least {
		t.Errorf("%d emails took %v, less than %v: not paced by EMAIL_RATE_LIMIT", events, took, least)
	}
	s := scrape(t, p.m)
	if got := sumOf(s, "notification_worker_rate_limit_wait_seconds_count{", `channel="email"`); got != events {
		t.Errorf("the wait histogram counted %v email turns, want %d", got, events)
	}
	if dl := sumOf(s, "notification_worker_records_dead_lettered_total{"); dl != 0 {
		t.Errorf("%v records dead-lettered, want 0", dl)
	}
}

// TestRateLimit_ThreeWorkersShareOneLimit runs three workers of one group
// on one Redis, each holding partitions, against the Twilio double
// enforcing 10 SMS/s for the sender: with SMS_RATE_LIMIT=8 shared through
// Redis the double refuses (almost) nothing, where three workers pacing alone
// would go at 24/s. Every event is sent exactly once, none dead-lettered.
func TestRateLimit_ThreeWorkersShareOneLimit(t *testing.T) {
	const events = 40
	f := startFleet(t, map[string]string{
		"SMS_RATE_LIMIT":          "8",
		"SMS_RATE_BURST":          "1",
		"KAFKA_EXPECTED_REPLICAS": "3",
		"SEND_TIMEOUT":            "2s",
		// A turn is asked within half of IDEMPOTENCY_TIMEOUT; past it the
		// worker falls back to its share beside the fleet. A generous
		// timeout keeps a loaded machine from making that happen.
		"IDEMPOTENCY_TIMEOUT":   "1s",
		"IDEMPOTENCY_CLAIM_TTL": "10s",
		"SHUTDOWN_TIMEOUT":      "5s",
		"RETRY_INITIAL_BACKOFF": "20ms",
		"RETRY_MAX_BACKOFF":     "200ms",
	})
	f.twilio.LimitRate(double.RateLimit{PerSecond: 10, Burst: 2})
	for range 3 {
		f.start(t)
	}
	workers, twilio := f.workers, f.twilio
	wait.For(t, waitWithin, "every worker holding partitions", func() (bool, string) {
		var states []any
		all := true
		for _, m := range workers {
			code, body := readyz(t, m)
			states = append(states, body["consumer"])
			all = all && code == http.StatusOK && body["consumer"] == consumerAssigned
		}
		return all, fmt.Sprint(states)
	})

	ev := smsBacklog(events, "SHP-FLEET")
	start := time.Now()
	MustPublish(t, f.brokers, f.topic, eventMessages(ev)...)
	var perWorker []float64
	wait.For(t, waitWithin, "every SMS sent", func() (bool, string) {
		perWorker = perWorker[:0]
		total := 0.0
		for _, m := range workers {
			n := sumOf(scrape(t, m), "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
			perWorker = append(perWorker, n)
			total += n
		}
		return total == events, fmt.Sprintf("SMS counted sent by each worker: %v, want %d in all", perWorker, events)
	})
	took := time.Since(start)

	if n := twilio.RateLimited(); n > mostRefused(events) {
		t.Errorf("the double refused %d sends for its pace (429), want at most %d: the workers together went faster than SMS_RATE_LIMIT", n, mostRefused(events))
	}
	busy := 0
	for _, n := range perWorker {
		if n > 0 {
			busy++
		}
	}
	if busy < 2 {
		t.Errorf("SMS sent by each worker: %v; want at least two workers sending, or the limit was not shared", perWorker)
	}
	wantEachSMSOnce(t, ev, twilio.Messages())
	for i, m := range workers {
		if dl := sumOf(scrape(t, m), "notification_worker_records_dead_lettered_total{"); dl != 0 {
			t.Errorf("worker %d dead-lettered %v records, want 0", i, dl)
		}
	}
	// While a worker falls back (its turn not answered in time), it paces
	// at its share beside the fleet, by design: the fleet's pace holds
	// only when none did.
	fallbacks := 0.0
	for _, m := range workers {
		fallbacks += sumOf(scrape(t, m), "notification_worker_rate_limit_fallback_total")
	}
	if least := (events - 1) * time.Second / 8; took < least && fallbacks == 0 {
		t.Errorf("%d SMS took %v, less than %v: not paced as one", events, took, least)
	} else if took < least {
		t.Logf("%d SMS took %v, less than %v, with %v fallbacks to a worker's share: the fleet's pace is not judged", events, took, least, fallbacks)
	}
	t.Logf("%d SMS in %v by workers %v; double refused %d", events, took, perWorker, twilio.RateLimited())
}

// TestRateLimit_RedisDownPacesByTheReplicasShare takes away the Redis that
// holds the fleet's pace, killed (refusing connections) or paused (taking
// them and answering nothing): the worker (failing open on the store)
// keeps sending, at its share of SMS_RATE_LIMIT (the limit divided by
// KAFKA_EXPECTED_REPLICAS), and says so: rate_limit_fallback, and its
// counter.
func TestRateLimit_RedisDownPacesByTheReplicasShare(t *testing.T) {
	for _, tc := range []struct {
		name string
		down func(t *testing.T, p *retryPeers)
	}{
		{"Killed", func(t *testing.T, p *retryPeers) { p.redis.Kill(t) }},
		{"Paused", func(t *testing.T, p *retryPeers) { p.redis.Pause(t); t.Cleanup(func() { p.redis.Resume(t) }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const events = 6
			p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
				"SMS_RATE_LIMIT":          "6",
				"SMS_RATE_BURST":          "1",
				"KAFKA_EXPECTED_REPLICAS": "2",
			})
			tc.down(t, p)

			ev := smsBacklog(events, "SHP-FALLBACK")
			start := time.Now()
			MustPublish(t, p.brokers, p.topic, eventMessages(ev)...)
			wait.For(t, waitWithin, "every SMS sent with Redis down", func() (bool, string) {
				got := len(p.twilio.Messages())
				return got == events, fmt.Sprintf("SMS at the double: %d of %d", got, events)
			})
			took := time.Since(start)
			// The share is 3/s: the last of 6 goes no sooner than 5 of its
			// Intervals after the first.
			if least := 5 * time.Second / 3; took < least {
				t.Errorf("%d SMS took %v with Redis down, less than %v: not paced by the replica's share", events, took, least)
			}
			if n := len(p.m.Stdout.(*logtest.Buffer).Events(t, "rate_limit_fallback")); n < 1 {
				t.Errorf("no rate_limit_fallback line with Redis down")
			}
			s := scrape(t, p.m)
			if got := sumOf(s, "notification_worker_rate_limit_fallback_total"); got < 1 {
				t.Errorf("notification_worker_rate_limit_fallback_total = %v with Redis down, want at least 1", got)
			}
			// Each SMS waits for its turn at the share, not for Redis: no
			// record is put back to wait for the limiter to answer.
			if got := sumOf(s, "notification_worker_retries_total{", `kind="unavailable"`); got != 0 {
				t.Errorf("notification_worker_retries_total{kind=\"unavailable\"} = %v with Redis down, want 0: records waited for the limiter to answer rather than pacing at the share", got)
			}
			t.Logf("%d SMS in %v with Redis down", events, took)
		})
	}
}

// TestRateLimit_PacedBacklogIsNotAnOutage runs a backlog of SMS that must
// wait for its sender's pace: SMS_RATE_LIMIT lets each record wait at most
// about a second for its turn, far less than the backlog takes, and the
// Twilio double enforces a pace below the limit, so it also refuses sends
// (429). A record waiting for the pace is retried as kind "paced", never as
// "unavailable" (which says a dependency is down and pages the operator),
// and, with a budget of two attempts, is still never dead-lettered: every
// event is sent exactly once.
func TestRateLimit_PacedBacklogIsNotAnOutage(t *testing.T) {
	const events, budget = 20, 2
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"SMS_RATE_LIMIT":     "5",
		"SMS_RATE_BURST":     "1",
		"MAX_IN_FLIGHT":      "32",
		"RETRY_MAX_ATTEMPTS": strconv.Itoa(budget),
		// Generous store bounds (a store call timing out under a loaded
		// machine is not what this test is about), and a claim TTL that
		// leaves a turn's wait of about a second: 7.1s - (2s send + 2 x 1s
		// store + 100ms skew) - 1s store, halved.
		"IDEMPOTENCY_TIMEOUT":   "1s",
		"IDEMPOTENCY_CLAIM_TTL": "7100ms",
		// A paced retry is logged at debug.
		"LOG_LEVEL": "debug",
	})
	p.twilio.LimitRate(double.RateLimit{PerSecond: 4, Burst: 1})
	logOnFailure(t, "", p.m)

	ev := smsBacklog(events, "SHP-PACED")
	MustPublish(t, p.brokers, p.topic, eventMessages(ev)...)
	wait.For(t, waitWithin, "every SMS sent", func() (bool, string) {
		got := sumOf(scrape(t, p.m), "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
		return got == events, fmt.Sprintf("SMS counted sent: %v of %d", got, events)
	})

	s := scrape(t, p.m)
	if got := sumOf(s, "notification_worker_retries_total{", `kind="unavailable"`); got != 0 {
		t.Errorf(`retries_total{kind="unavailable"} = %v for a paced backlog, want 0: no dependency was down`, got)
	}
	paced := sumOf(s, "notification_worker_retries_total{", `kind="paced"`)
	if paced == 0 {
		t.Errorf(`retries_total{kind="paced"} = 0, want the backlog's waits counted there`)
	}
	if dl := sumOf(s, "notification_worker_records_dead_lettered_total{"); dl != 0 {
		t.Errorf("%v records dead-lettered, want 0", dl)
	}
	// Some record waited for the pace over more attempts than the budget
	// allows a failing one: the waits spent none of it.
	most := 0
	perOffset := map[string]int{}
	for _, e := range p.m.Stdout.(*logtest.Buffer).Events(t, "record_retry_scheduled") {
		if e["kind"] == "paced" && e["level"] != "DEBUG" {
			t.Errorf("a paced retry logged at %v, want DEBUG: a backlog at its pace is not a warning: %v", e["level"], e)
		}
		k := fmt.Sprint(e["partition"], "/", e["offset"])
		perOffset[k]++
		most = max(most, perOffset[k])
	}
	if most <= budget {
		t.Errorf("no record was retried more than %d times (most: %d): the backlog did not outlast the budget, and the test shows nothing", budget, most)
	}
	wantEachSMSOnce(t, ev, p.twilio.Messages())
	t.Logf("%d SMS; %v paced retries, a record retried up to %d times; double refused %d", events, paced, most, p.twilio.RateLimited())
}

// fleet is a consumer group of workers on one embedded broker and one
// Redis, sending SMS to the Twilio double and email to the console.
type fleet struct {
	twilio  *double.Double
	brokers []string
	topic   string
	vars    map[string]string
	workers []*Main // in the order started
}

// startFleet starts a fleet's peers, its workers' settings being vars
// over the fleet's own; no worker is started yet.
func startFleet(t *testing.T, vars map[string]string) *fleet {
	t.Helper()
	const sid, token = "AC00000000000000000000000000000002", "fleettoken"
	redisSrv := redistest.MustStart(t)
	f := &fleet{twilio: double.New(sid, token), topic: uniqueName("fleet")}
	api := httptest.NewServer(f.twilio)
	t.Cleanup(api.Close)
	f.brokers = MustStartEmbedded(t, f.topic).Brokers()
	f.vars = map[string]string{
		"KAFKA_BROKERS":          f.brokers[0],
		"KAFKA_TOPIC":            f.topic,
		"KAFKA_GROUP_ID":         uniqueName("group"),
		"REDIS_URL":              redisSrv.URL(),
		"IDEMPOTENCY_KEY_PREFIX": uniqueName("idem") + ":",
		"TWILIO_ACCOUNT_SID":     sid,
		"TWILIO_AUTH_TOKEN":      token,
		"TWILIO_FROM_NUMBER":     "+15550002222",
		"TWILIO_API_URL":         api.URL,
		"EMAIL_NOTIFIER":         "console",
		"HTTP_ADDR":              "127.0.0.1:0",
	}
	maps.Copy(f.vars, vars)
	return f
}

// start opens and runs one more worker of f, its log shown if t fails.
func (f *fleet) start(t *testing.T) *Main {
	t.Helper()
	m := &Main{Config: MustLoadConfig(t, f.vars), Stdout: &logtest.Buffer{}}
	MustOpen(t, m)
	MustRun(t, m)
	logOnFailure(t, fmt.Sprintf("worker %d", len(f.workers)), m, "worker_starting")
	f.workers = append(f.workers, m)
	return m
}

// assigned reports whether m is ready and holding partitions.
func assigned(t *testing.T, m *Main) bool {
	code, body := readyz(t, m)
	return code == http.StatusOK && body["consumer"] == consumerAssigned
}
