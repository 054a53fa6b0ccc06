package bench

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// An SMS backlog at the provider's pace: three worker processes of one
// consumer group send a backlog to the Twilio double, which allows the
// sender rateDoublePerSecond, once without SMS_RATE_LIMIT and once with it
// at the same pace, shared through one Redis.
const (
	runRateOff = "ratelimit/off"
	runRateOn  = "ratelimit/on"
	// rateDoublePerSecond is the pace the double allows the sender, and
	// SMS_RATE_LIMIT in the limited run.
	rateDoublePerSecond = 50
	// rateDoubleBurst is the sends the double lets through at once: room
	// for the jitter of loopback HTTP on a loaded machine (a send a few
	// milliseconds late brings the next one closer), not for more than
	// rateDoublePerSecond over time.
	rateDoubleBurst = 5
	rateReplicas    = 3
	// rateSMSDefault is BENCH_RATE_SMS's default: 200 s at the pace.
	rateSMSDefault = 10000
	rateShare      = 0.95 // of rateDoublePerSecond, the target with the limit
	rate429Share   = 0.01 // of the sends, the most 429s the target allows
	ratePoll       = 250 * time.Millisecond
)

// rateRun is one run of the backlog through the three workers.
type rateRun struct {
	limit      int           // SMS_RATE_LIMIT (0: none)
	sms        int           // published
	sent       int           // distinct SMS the double accepted
	accepted   int           // SMS the double accepted, duplicates included
	sends      int           // send requests the double answered, 429s included
	refused    int64         // sends the double refused for the pace (429)
	dead       float64       // records the workers dead-lettered
	span       time.Duration // from the first accepted SMS to the last
	elapsed    time.Duration // from the backlog's publication to its last record handled
	finished   bool          // every record sent or dead-lettered within the time bound
	timeBound  time.Duration
	perReplica []float64 // SMS each worker counted sent
}

// perSecond is the accepted SMS a second over the span they arrived in.
func (r rateRun) perSecond() float64 {
	if r.accepted < 2 || r.span <= 0 {
		return 0
	}
	return float64(r.accepted-1) / r.span.Seconds()
}

func (r rateRun) duplicates() int { return r.accepted - r.sent }

func (r rateRun) refusedShare() float64 {
	if r.sends == 0 {
		return 0
	}
	return float64(r.refused) / float64(r.sends)
}

// rateSMS is BENCH_RATE_SMS, the size of the backlog (default 10 000).
func rateSMS(b *testing.B) int {
	b.Helper()
	v := os.Getenv("BENCH_RATE_SMS")
	if v == "" {
		return rateSMSDefault
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 2 || n > 1_000_000 {
		b.Fatalf("BENCH_RATE_SMS=%q: want a whole number from 2 to 1000000", v)
	}
	return n
}

// BenchmarkSMSRateLimit sends a backlog of BENCH_RATE_SMS SMS (each to its
// own shipment key) through three worker binaries of one consumer group,
// on one Redis, to the Twilio double limiting the sender to 50 a second
// (burst 5). It runs without SMS_RATE_LIMIT, then with SMS_RATE_LIMIT=50
// (KAFKA_EXPECTED_REPLICAS=3), each on a broker, a Redis and a double of
// its own, and reports the sends a second against the limit, the 429s
// against the sends, the dead letters and the duplicates (an SMS body,
// which names its shipment, accepted twice).
func BenchmarkSMSRateLimit(b *testing.B) {
	needRedis(b)
	n := rateSMS(b)
	for range b.N {
		results.putRate(runRateOff, measureRate(b, n, 0))
		results.putRate(runRateOn, measureRate(b, n, rateDoublePerSecond))
	}
}

// measureRate runs n SMS through three workers with SMS_RATE_LIMIT limit.
// The workers join first and the backlog is published once all three hold
// partitions. The run ends when every record was sent or dead-lettered, or
// at its time bound (half again the time the backlog takes at the double's
// pace, and a minute); the workers are then stopped (SIGTERM), so any send
// still in flight reaches the double before it is read.
func measureRate(b *testing.B, n, limit int) rateRun {
	b.Helper()
	topic := "rate-events"
	broker, stopBroker := mustBrokerProcess(b, topic)
	defer stopBroker()
	srv := mustRedis(b)
	const sid, token = "ACbenchrate", "benchratesecret"
	d := double.New(sid, token)
	d.LimitRate(double.RateLimit{PerSecond: rateDoublePerSecond, Burst: rateDoubleBurst})
	api := httptest.NewServer(d)
	defer api.Close()

	seq := prefixSeq.Add(1)
	env := map[string]string{
		"KAFKA_BROKERS":                  broker,
		"KAFKA_TOPIC":                    topic,
		"KAFKA_GROUP_ID":                 fmt.Sprintf("bench-rate-%d", groupSeq.Add(1)),
		"KAFKA_EXPECTED_REPLICAS":        strconv.Itoa(rateReplicas),
		"REDIS_URL":                      srv.URL(),
		"IDEMPOTENCY_KEY_PREFIX":         fmt.Sprintf("bench-rate-%d:", seq),
		"IDEMPOTENCY_COMPACT_KEY_PREFIX": fmt.Sprintf("l%d:", seq),
		"TWILIO_ACCOUNT_SID":             sid,
		"TWILIO_AUTH_TOKEN":              token,
		"TWILIO_FROM_NUMBER":             "+15550003333",
		"TWILIO_API_URL":                 api.URL,
		// Asked for by name: beside Redis the worker assumes no console.
		"EMAIL_NOTIFIER": "console",
		"SMS_RATE_LIMIT": strconv.Itoa(limit),
	}
	workers := make([]*integration.Worker, 0, rateReplicas)
	for range rateReplicas {
		workers = append(workers, startWorker(b, env))
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			for _, w := range workers {
				stopWorker(b, w)
			}
		}
	}
	defer stopAll()
	for i, w := range workers {
		if err := w.WaitAssigned(time.Minute); err != nil {
			b.Fatalf("worker %d: %v", i, err)
		}
	}

	size := len(eventJSON(newUUID(), "SHP-000000"))
	start := time.Now()
	// Every SMS its own key: none waits for another's, only for the pace.
	publishBacklog(b, broker, topic, int64(n)*int64(size), size, n)

	r := rateRun{limit: limit, sms: n, timeBound: time.Duration(n)*time.Second/rateDoublePerSecond*3/2 + time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeBound)
	defer cancel()
	for ctx.Err() == nil {
		for i, w := range workers {
			if code, exited := w.ExitCode(); exited {
				b.Fatalf("worker %d exited (code %d) during the run\n%v", i, code, lastLines(w.Logs(), 20))
			}
		}
		dead, err := sumOver(ctx, workers, "notification_worker_records_dead_lettered_total{")
		if err == nil && distinct(d.Messages())+int(dead) >= n {
			r.finished = true
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(ratePoll):
		}
	}
	r.elapsed = time.Since(start)
	// Read what the workers counted before they stop (a stopped worker
	// serves no /metrics), then stop them and read the double.
	read, cancelRead := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelRead()
	for _, w := range workers {
		v, err := metricValue(read, w, sentSeries)
		if err != nil {
			b.Logf("read a worker's sent count: %v", err)
		}
		r.perReplica = append(r.perReplica, v)
	}
	dead, err := sumOver(read, workers, "notification_worker_records_dead_lettered_total{")
	if err != nil {
		b.Fatalf("read the workers' dead letters: %v", err)
	}
	stopAll()
	r.dead = dead
	msgs := d.Messages()
	r.accepted, r.sent, r.sends, r.refused = len(msgs), distinct(msgs), len(d.Attempts()), d.RateLimited()
	if len(msgs) > 1 {
		first, last := msgs[0].Created, msgs[0].Created
		for _, m := range msgs {
			first, last = minTime(first, m.Created), maxTime(last, m.Created)
		}
		r.span = last.Sub(first)
	}
	if !r.finished {
		b.Logf("SMS_RATE_LIMIT=%d: %d of %d SMS sent and %v dead-lettered within %v", limit, r.sent, n, r.dead, r.timeBound)
	}
	return r
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// distinct is how many different SMS bodies msgs hold: each names its
// shipment, and every record of the backlog has one of its own.
func distinct(msgs []double.Message) int {
	seen := make(map[string]struct{}, len(msgs))
	for _, m := range msgs {
		seen[m.Body] = struct{}{}
	}
	return len(seen)
}

// sumOver adds up, across workers, every series of their /metrics whose
// name and labels start with prefix.
func sumOver(ctx context.Context, workers []*integration.Worker, prefix string) (float64, error) {
	total := 0.0
	for _, w := range workers {
		text, err := w.Metrics(ctx)
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err != nil {
				return 0, fmt.Errorf("%q: %w", line, err)
			}
			total += v
		}
	}
	return total, nil
}

func (r *registry) printRateLimit(w io.Writer) {
	off, okOff := r.getRate(runRateOff)
	on, okOn := r.getRate(runRateOn)
	if !okOff && !okOn {
		return
	}
	fmt.Fprintf(w, "\n### 15. An SMS backlog at the provider's pace (%d worker binaries in one group, one Redis; the Twilio double allows the sender %d/s, burst %d; kfake broker in its own process)\n\n",
		rateReplicas, rateDoublePerSecond, rateDoubleBurst)
	fmt.Fprintln(w, "Every SMS is its own shipment key, published once the three workers hold partitions. Sends/s are the SMS the double accepted over the")
	fmt.Fprintln(w, "time from the first to the last; 429s are the sends it refused for the pace, against every send it answered; dead letters are the")
	fmt.Fprintln(w, "workers' count; a duplicate is an SMS body (it names the shipment) accepted again. Other settings are the defaults (MAX_IN_FLIGHT 64).")
	fmt.Fprintln(w)
	header(w, "SMS_RATE_LIMIT", "SMS", "sent (by worker)", "seconds", "sends/s", "sends/s / limit", "sends", "429s", "429s / sends", "dead letters", "duplicates", "target")
	for _, c := range []struct {
		label string
		m     rateRun
		ok    bool
	}{
		{"0 (none)", off, okOff},
		{fmt.Sprintf("%d, shared through Redis (KAFKA_EXPECTED_REPLICAS %d)", rateDoublePerSecond, rateReplicas), on, okOn},
	} {
		if !c.ok {
			continue
		}
		m := c.m
		seconds := fmt.Sprintf("%.1f", m.elapsed.Seconds())
		if !m.finished {
			seconds += fmt.Sprintf(" (time bound %v hit)", m.timeBound)
		}
		share := m.perSecond() / rateDoublePerSecond
		target := "reported"
		if m.limit > 0 {
			var missed []string
			if share < rateShare {
				missed = append(missed, fmt.Sprintf("sends/s >= %.2f of the limit", rateShare))
			}
			if m.refusedShare() > rate429Share {
				missed = append(missed, fmt.Sprintf("429s <= %g%%", rate429Share*100))
			}
			if m.dead != 0 {
				missed = append(missed, "0 dead letters")
			}
			if m.duplicates() != 0 {
				missed = append(missed, "0 duplicates")
			}
			if !m.finished || m.sent != m.sms {
				missed = append(missed, "every SMS sent")
			}
			target = "all met"
			if len(missed) > 0 {
				target = "MISSED: " + strings.Join(missed, ", ")
			}
		}
		by := make([]string, len(m.perReplica))
		for i, v := range m.perReplica {
			by[i] = fmt.Sprintf("%.0f", v)
		}
		row(w, c.label, fmt.Sprint(m.sms), fmt.Sprintf("%d (%s)", m.sent, strings.Join(by, ", ")), seconds,
			fmt.Sprintf("%.1f", m.perSecond()), fmt.Sprintf("%.3f", share), fmt.Sprint(m.sends), fmt.Sprint(m.refused),
			fmt.Sprintf("%.2f%%", 100*m.refusedShare()), fmt.Sprintf("%.0f", m.dead), fmt.Sprint(m.duplicates()), target)
	}
}
