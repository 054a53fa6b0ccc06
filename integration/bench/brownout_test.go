package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// A Twilio brownout: every SMS of a backlog is answered 503, half after
// Twilio took it and half before, and the worker must reconcile each
// (docs/reconciliation.md). The baseline revision's worker and this
// checkout's each drain a backlog of their own.
const (
	runBrownout     = "brownout"
	runBrownoutBase = "brownout/base"
	brownoutSMS     = 500
	// brownoutBound bounds one run: the list lag (a minute by default)
	// and RECONCILE_TIMEOUT (two) with room.
	brownoutBound = 5 * time.Minute
	brownoutPoll  = 250 * time.Millisecond
	// brownoutListsMax is the most list requests the target allows for
	// one unknown send.
	brownoutListsMax = 3
)

// brownoutRun is one backlog drained through one worker.
type brownoutRun struct {
	sms      int
	sent     float64 // SMS the worker counted sent (its own, or reconciled)
	accepted int     // SMS the double accepted, duplicates included
	distinct int     // different SMS the double accepted
	lists    int     // list requests
	maxLists int     // the most list requests for one SMS
	retries  map[string]float64
	dead     float64
	elapsed  time.Duration // from the backlog's publication to its last SMS finished
	finished bool
}

func (r brownoutRun) duplicates() int { return r.accepted - r.distinct }
func (r brownoutRun) lost() int       { return r.sms - r.distinct }

// BenchmarkTwilioBrownout drains a backlog of 500 SMS, each to its own
// number and on its own shipment key, through the worker binary with
// default settings (TWILIO_LIST_LAG 1m, RECONCILE_TIMEOUT 2m, the Redis
// store) against the Twilio double, which answers each SMS's first send
// 503: for half of them after taking it, for the other half before. It
// reports the Messages list requests per unknown send, the time to drain,
// the retries by kind, and the SMS accepted twice or never, for the
// baseline revision's worker (BENCH_BASE) and this checkout's, each on a
// broker, a Redis and a double of its own.
func BenchmarkTwilioBrownout(b *testing.B) {
	needRedis(b)
	base, commit := baseWorker(b)
	results.setCPUBase(commit)
	for range b.N {
		results.putBrownout(runBrownoutBase, measureBrownout(b, base))
		results.putBrownout(runBrownout, measureBrownout(b, binary(b, "cmd/notification-worker")))
	}
}

// measureBrownout runs the backlog through the worker binary bin. The run
// ends when the worker counted every SMS sent or dead-lettered, or at
// brownoutBound; the worker is then stopped, so a send still in flight
// reaches the double before it is read.
func measureBrownout(b *testing.B, bin string) brownoutRun {
	b.Helper()
	topic := "brownout-events"
	broker, stopBroker := mustBrokerProcess(b, topic)
	defer stopBroker()
	srv := mustRedis(b)
	const sid, token = "ACbenchbrownout", "benchbrownoutsecret"
	d := double.New(sid, token)
	api := httptest.NewServer(d)
	defer api.Close()

	seq := prefixSeq.Add(1)
	w := startWorkerBinary(b, bin, map[string]string{
		"KAFKA_BROKERS":                  broker,
		"KAFKA_TOPIC":                    topic,
		"KAFKA_GROUP_ID":                 fmt.Sprintf("bench-brownout-%d", groupSeq.Add(1)),
		"REDIS_URL":                      srv.URL(),
		"IDEMPOTENCY_KEY_PREFIX":         fmt.Sprintf("bench-brownout-%d:", seq),
		"IDEMPOTENCY_COMPACT_KEY_PREFIX": fmt.Sprintf("b%d:", seq),
		"TWILIO_ACCOUNT_SID":             sid,
		"TWILIO_AUTH_TOKEN":              token,
		"TWILIO_FROM_NUMBER":             "+15550005555",
		"TWILIO_API_URL":                 api.URL,
		// Asked for by name: beside Redis the worker assumes no console.
		"EMAIL_NOTIFIER": "console",
	})
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopWorker(b, w)
		}
	}
	defer stop()
	if err := w.WaitAssigned(time.Minute); err != nil {
		b.Fatal(err)
	}

	msgs := make([]kafka.Message, brownoutSMS)
	phones := make([]string, brownoutSMS)
	for i := range msgs {
		phone := fmt.Sprintf("+3120%07d", 2000000+i)
		phones[i] = phone
		f := double.Fault{To: phone, Count: 1, Status: http.StatusServiceUnavailable, Accept: i%2 == 0}
		d.Fail(f)
		shipment := fmt.Sprintf("SHP-B%05d", i)
		msgs[i] = kafka.Message{Key: []byte(shipment), Value: []byte(strings.Replace(string(eventJSON(newUUID(), shipment)), "+31201234567", phone, 1))}
	}
	p, err := kafka.NewPublisher(kafka.Config{Brokers: []string{broker}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	if err := p.Publish(context.Background(), topic, msgs...); err != nil {
		b.Fatal(err)
	}

	r := brownoutRun{sms: brownoutSMS, retries: map[string]float64{}}
	ctx, cancel := context.WithTimeout(context.Background(), brownoutBound)
	defer cancel()
	for ctx.Err() == nil {
		if code, exited := w.ExitCode(); exited {
			b.Fatalf("the worker exited (code %d) during the run\n%v", code, lastLines(w.Logs(), 20))
		}
		sent, err1 := metricValue(ctx, w, sentSeries)
		dead, err2 := sumOver(ctx, []*integration.Worker{w}, "notification_worker_records_dead_lettered_total{")
		if err1 == nil && err2 == nil && int(sent+dead) >= brownoutSMS {
			r.finished = true
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(brownoutPoll):
		}
	}
	r.elapsed = time.Since(start)
	read, cancelRead := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelRead()
	if r.sent, err = metricValue(read, w, sentSeries); err != nil {
		b.Fatalf("read the worker's sent count: %v", err)
	}
	if r.dead, err = sumOver(read, []*integration.Worker{w}, "notification_worker_records_dead_lettered_total{"); err != nil {
		b.Fatalf("read the worker's dead letters: %v", err)
	}
	for _, kind := range []string{"retryable", "unavailable", "paced"} {
		// Its labels in name order: kind, then topic.
		if r.retries[kind], err = sumOver(read, []*integration.Worker{w}, `notification_worker_retries_total{kind="`+kind+`"`); err != nil {
			b.Fatalf("read the worker's retries: %v", err)
		}
	}
	stop()
	accepted := d.Messages()
	r.accepted, r.distinct = len(accepted), distinct(accepted)
	r.lists = int(d.ListRequests(""))
	for _, phone := range phones {
		r.maxLists = max(r.maxLists, int(d.ListRequests(phone)))
	}
	if !r.finished {
		b.Logf("brownout: %v of %d SMS finished within %v", r.sent+r.dead, brownoutSMS, brownoutBound)
	}
	return r
}

func (r *registry) printBrownout(w io.Writer) {
	cur, ok := r.getBrownout(runBrownout)
	base, okBase := r.getBrownout(runBrownoutBase)
	if !ok && !okBase {
		return
	}
	fmt.Fprintf(w, "\n### 16. A Twilio brownout: %d SMS answered 503, half after Twilio took them, half before (worker binary, default settings: TWILIO_LIST_LAG 1m, RECONCILE_TIMEOUT 2m, MAX_IN_FLIGHT 64; Redis store; the Twilio double in the benchmark's process; kfake broker in its own process)\n\n", brownoutSMS)
	fmt.Fprintln(w, "Each SMS is its own number and shipment key. List requests are the Messages list requests the double answered, per unknown send")
	fmt.Fprintln(w, "and the most for one; seconds run from the backlog's publication until the worker counted every SMS sent or dead-lettered.")
	fmt.Fprintf(w, "A duplicate is an SMS accepted twice, a lost one never accepted. The baseline is the worker of %s, on a backlog of its own.\n\n", r.baseCommit())
	header(w, "worker", "SMS", "sent", "seconds", "list requests", "per unknown send", "most for one", "retries: paced / unavailable / retryable", "dead letters", "duplicates", "lost", "target")
	for _, c := range []struct {
		label string
		m     brownoutRun
		ok    bool
	}{{"baseline " + r.baseCommit(), base, okBase}, {"this checkout", cur, ok}} {
		if !c.ok {
			continue
		}
		m := c.m
		seconds := fmt.Sprintf("%.1f", m.elapsed.Seconds())
		if !m.finished {
			seconds += fmt.Sprintf(" (time bound %v hit)", brownoutBound)
		}
		target := "reported"
		if c.label == "this checkout" {
			var missed []string
			if m.maxLists > brownoutListsMax {
				missed = append(missed, fmt.Sprintf("at most %d list requests per unknown send", brownoutListsMax))
			}
			if m.duplicates() != 0 {
				missed = append(missed, "0 duplicates")
			}
			if m.lost() != 0 || !m.finished {
				missed = append(missed, "0 lost")
			}
			target = "all met"
			if len(missed) > 0 {
				target = "MISSED: " + strings.Join(missed, ", ")
			}
		}
		row(w, c.label, fmt.Sprint(m.sms), fmt.Sprintf("%.0f", m.sent), seconds, fmt.Sprint(m.lists),
			fmt.Sprintf("%.2f", float64(m.lists)/float64(m.sms)), fmt.Sprint(m.maxLists),
			fmt.Sprintf("%.0f / %.0f / %.0f", m.retries["paced"], m.retries["unavailable"], m.retries["retryable"]),
			fmt.Sprintf("%.0f", m.dead), fmt.Sprint(m.duplicates()), fmt.Sprint(m.lost()), target)
	}
}

func (r *registry) putBrownout(name string, m brownoutRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.brownouts[name] = m
}

func (r *registry) getBrownout(name string) (brownoutRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.brownouts[name]
	return m, ok
}
