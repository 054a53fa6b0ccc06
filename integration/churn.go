package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// ChurnOptions shapes RunChurn. Zero fields take the defaults named on each.
type ChurnOptions struct {
	// Members is how many workers run when the group is whole; default 3.
	Members int
	// Partitions of the topic RunChurn creates; default 6.
	Partitions int32
	// Chaos is how long members are killed, stopped and started; default
	// 60s.
	Chaos time.Duration
	// Drain is how long after the chaos every record may take to be handled
	// and committed; default 60s.
	Drain time.Duration
	// MaxCommitGap is the longest the group may go without committing
	// further while records wait, during the chaos; default 50s. Some
	// pause is in the protocol: a rebalance that starts after a SIGKILL
	// waits for the dead member's session (10 s) to expire, every member
	// that rejoined waits in JoinGroup meanwhile, and on one broker their
	// fetches and commits wait behind it on the same connection; a second
	// kill as that rebalance ends starts another. Kills a few seconds
	// apart chain three or four such rebalances (34.6 s seen on Apache
	// Kafka, 39 s on kfake); five session timeouts leave room for them. A
	// stall, as a join loop makes, lasts minutes, and leaves records
	// unsent after the drain.
	MaxCommitGap time.Duration
	// Env is added to every worker's environment.
	Env map[string]string
}

func (o ChurnOptions) withDefaults() ChurnOptions {
	if o.Members == 0 {
		o.Members = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 6
	}
	if o.Chaos == 0 {
		o.Chaos = 60 * time.Second
	}
	if o.Drain == 0 {
		o.Drain = 60 * time.Second
	}
	if o.MaxCommitGap == 0 {
		o.MaxCommitGap = 50 * time.Second
	}
	return o
}

// ChurnResult is what RunChurn saw.
type ChurnResult struct {
	// Published counts the events published, Handled those with an SMS at
	// the double.
	Published, Handled int
	// Kills, Stops and Starts count the chaos's actions (Starts includes the
	// first members and the restarts after the chaos).
	Kills, Stops, Starts int
	// MaxCommitGap is the longest time during the chaos in which the
	// group's committed offsets did not move while records waited.
	MaxCommitGap time.Duration
	// ConsumeFailed counts the workers' consume_failed lines, and
	// IOTimeouts those of them that name an i/o timeout.
	ConsumeFailed, IOTimeouts int
	// DrainedIn is how long after the chaos ended every record was handled
	// and committed.
	DrainedIn time.Duration
	// Duplicates counts the events whose SMS the double accepted more
	// than once.
	Duplicates int
}

// RunChurn runs a consumer group of worker processes (StartWorkerProcess)
// on k through a chaos of membership changes and fails t unless the group
// keeps consuming through it.
//
// For opts.Chaos, every 1 to 4 seconds (drawn from a seeded source; the
// seed is logged, and CHURN_SEED replays it), one action: when fewer than
// opts.Members run, a new member starts (a join, or the restart of one
// that died); otherwise a running member, picked at random, gets SIGKILL
// (two times in three: it leaves nothing behind, its partitions wait for
// its session to expire) or SIGTERM (a graceful leave). Meanwhile events
// are published in small batches every 250 ms, each event an SMS to a
// phone number of its own, sent through a redis-server the members share
// and the Twilio double.
//
// It fails t when, during the chaos, the group's committed offsets do not
// move for opts.MaxCommitGap while records wait (the group stalled), or
// when, opts.Drain after the chaos (with opts.Members members running
// again), some published event has no SMS at the double or the group has
// not committed to the end of the topic; and when any event's SMS reached
// the double twice. A failed run reports the group, its offsets and its
// members' assignments, and keeps every member's log and, on the
// in-process kfake, a trace of the group's requests (see churnReport).
func RunChurn(t *testing.T, k *Kafka, opts ChurnOptions) ChurnResult {
	t.Helper()
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHURN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHURN_SEED %q: %v", s, err)
		}
		seed = v
	}
	t.Logf("churn seed %d (CHURN_SEED=%d replays the same actions)", seed, seed)
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	run := strconv.FormatUint(seed%1_000_000, 36)
	topic, group := "churn-"+run, "churn-"+run
	if err := k.CreateTopic(ctx, topic, opts.Partitions); err != nil {
		t.Fatal(err)
	}
	// The send path is the real one: a redis-server shared by the members,
	// and the Twilio double over HTTP, answering each send after a
	// provider's latency, so that records are in hand when a member dies
	// or its partitions are revoked.
	redis := redistest.MustStart(t)
	const sid, token = "AC00000000000000000000000000000c4e", "churntoken"
	twilio := double.New(sid, token)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			time.Sleep(churnSendLatency)
		}
		twilio.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	env := Env(k.Env(topic, group), map[string]string{
		"IDEMPOTENCY_STORE":  "redis",
		"REDIS_URL":          "redis://" + redis.Addr() + "/0",
		"SMS_NOTIFIER":       "twilio",
		"TWILIO_ACCOUNT_SID": sid,
		"TWILIO_AUTH_TOKEN":  token,
		"TWILIO_FROM_NUMBER": "+15550001111",
		"TWILIO_API_URL":     api.URL,
		// SMS only; the console takes no email, and says so at start.
		"EMAIL_NOTIFIER": "console",
		// A killed member's claims are taken over after 5 s, and Twilio's
		// list is asked about them with a lag of 1 s, so the records it
		// held are sent within the drain.
		"IDEMPOTENCY_CLAIM_TTL": "5s",
		"SEND_TIMEOUT":          "3s",
		"TWILIO_LIST_LAG":       "1s",
		"RECONCILE_TIMEOUT":     "30s",
	}, opts.Env)

	// logf logs a chaos action, and notes it in the broker's group trace
	// among the requests it caused.
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf(format, args...)
		k.trace.note(fmt.Sprintf(format, args...))
	}
	var res ChurnResult
	var all []*Worker // every worker started, alive or not: their logs count
	var running []*Worker
	start := func() {
		w := StartWorkerProcess(t, env)
		all = append(all, w)
		running = append(running, w)
		res.Starts++
		k.trace.note(fmt.Sprintf("member %d started, pid %d", len(all), w.PID()))
	}
	for range opts.Members {
		start()
	}
	for _, w := range running {
		if err := w.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// The publisher: a batch of 4 events every 250 ms until the chaos ends.
	var (
		pubMu     sync.Mutex
		published []string
		pubErr    error
	)
	pubCtx, stopPub := context.WithCancel(ctx)
	var pubWG sync.WaitGroup
	pubWG.Add(1)
	go func() {
		defer pubWG.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; {
			select {
			case <-pubCtx.Done():
				return
			case <-tick.C:
			}
			var recs []*kgo.Record
			var ids []string
			for range 4 {
				id := fmt.Sprintf("evt-%s-%05d", run, n)
				shipment := fmt.Sprintf("SHP-%s-%03d", run, n%97)
				recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(shipment), Value: churnEvent(id, shipment, churnPhone(n))})
				ids = append(ids, id)
				n++
			}
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			err := k.PublishRecords(pctx, recs...)
			pcancel()
			pubMu.Lock()
			if err != nil {
				pubErr = err
			} else {
				published = append(published, ids...)
			}
			pubMu.Unlock()
			if err != nil {
				return
			}
		}
	}()

	// The progress watch: the sum of committed offsets, polled; the longest
	// time it did not move while records waited.
	var (
		watchMu    sync.Mutex
		maxGap     time.Duration
		maxGapAt   time.Time
		watchEnded = make(chan struct{})
	)
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() {
		defer close(watchEnded)
		last, lastMove := int64(-1), time.Now()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			qctx, qcancel := context.WithTimeout(watchCtx, 5*time.Second)
			committed, cerr := k.CommittedOffsets(qctx, group, topic)
			end, eerr := k.EndOffsets(qctx, topic)
			qcancel()
			if cerr != nil || eerr != nil {
				continue
			}
			var sum, endSum int64
			for _, o := range committed {
				sum += o
			}
			for _, o := range end {
				endSum += o
			}
			now := time.Now()
			if sum != last || sum == endSum {
				last, lastMove = sum, now
				continue
			}
			watchMu.Lock()
			if gap := now.Sub(lastMove); gap > maxGap {
				maxGap, maxGapAt = gap, now
			}
			watchMu.Unlock()
		}
	}()

	if k.trace != nil {
		// The group's state as the broker describes it, noted in the
		// trace when it changes, until the scenario ends.
		traceCtx, stopTrace := context.WithCancel(ctx)
		traced := make(chan struct{})
		defer func() {
			stopTrace()
			<-traced
		}()
		go func() {
			defer close(traced)
			last := ""
			for traceCtx.Err() == nil {
				qctx, qcancel := context.WithTimeout(traceCtx, 5*time.Second)
				if d, err := k.DescribeGroup(qctx, group); err == nil && d != last {
					last = d
					k.trace.note(strings.ReplaceAll(d, "\n", "\n            "))
				}
				qcancel()
				select {
				case <-traceCtx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}

	began := time.Now()
	k.trace.note("chaos begins")
	t.Logf("chaos: %d members, %d partitions, for %v", opts.Members, opts.Partitions, opts.Chaos)
	for time.Since(began) < opts.Chaos {
		time.Sleep(time.Second + time.Duration(rnd.Int64N(int64(3*time.Second))))
		at := time.Since(began).Round(100 * time.Millisecond)
		if len(running) < opts.Members {
			start()
			logf("%6v: start member %d, pid %d (%d running)", at, len(all), running[len(running)-1].PID(), len(running))
			continue
		}
		i := rnd.IntN(len(running))
		w := running[i]
		running = append(running[:i], running[i+1:]...)
		if rnd.IntN(3) < 2 {
			if err := w.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			res.Kills++
			logf("%6v: SIGKILL pid %d (%d running)", at, w.PID(), len(running))
			continue
		}
		// A graceful leave runs beside the chaos, as a pod's shutdown does.
		res.Stops++
		logf("%6v: SIGTERM pid %d (%d running)", at, w.PID(), len(running))
		go func() { _ = w.Stop(ctx) }()
	}
	k.trace.note("chaos ends")
	stopPub()
	pubWG.Wait()
	stopWatch()
	<-watchEnded
	for len(running) < opts.Members {
		start()
	}
	chaosEnded := time.Now()

	pubMu.Lock()
	res.Published = len(published)
	ids := append([]string(nil), published...)
	perr := pubErr
	pubMu.Unlock()
	if perr != nil {
		t.Fatalf("publish during the chaos: %v", perr)
	}
	watchMu.Lock()
	res.MaxCommitGap = maxGap
	gapAt := maxGapAt.Sub(began).Round(100 * time.Millisecond)
	watchMu.Unlock()

	// The drain: an SMS at the double for every event, and the group
	// committed to the end.
	var missing []string
	var sms map[string]int
	drained := false
	for deadline := chaosEnded.Add(opts.Drain); time.Now().Before(deadline); time.Sleep(time.Second) {
		sms = map[string]int{}
		for _, m := range twilio.Messages() {
			sms[m.To]++
		}
		missing = missing[:0]
		for n, id := range ids {
			if sms[churnPhone(n)] == 0 {
				missing = append(missing, id)
			}
		}
		res.Handled = len(ids) - len(missing)
		if len(missing) > 0 {
			continue
		}
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		committed, cerr := k.CommittedOffsets(qctx, group, topic)
		end, eerr := k.EndOffsets(qctx, topic)
		qcancel()
		if cerr != nil || eerr != nil {
			continue
		}
		behind := false
		for p, o := range end {
			if committed[p] != o {
				behind = true
			}
		}
		if !behind {
			drained = true
			res.DrainedIn = time.Since(chaosEnded).Round(100 * time.Millisecond)
			break
		}
	}

	for n := range ids {
		if sms[churnPhone(n)] > 1 {
			res.Duplicates++
		}
	}
	for _, w := range all {
		for _, ev := range w.Events("consume_failed") {
			res.ConsumeFailed++
			if e, _ := ev["error"].(string); strings.Contains(e, "i/o timeout") {
				res.IOTimeouts++
			}
		}
	}
	t.Logf("churn on %s: %d kills, %d stops, %d starts; %d events published, %d sent, %d sent more than once; longest time without a commit while records waited %v (ending %v into the chaos); %d consume_failed lines, %d of them i/o timeouts; drained %v after the chaos",
		k.Impl, res.Kills, res.Stops, res.Starts, res.Published, res.Handled, res.Duplicates, res.MaxCommitGap.Round(100*time.Millisecond), gapAt,
		res.ConsumeFailed, res.IOTimeouts, res.DrainedIn)
	if res.MaxCommitGap >= opts.MaxCommitGap {
		t.Errorf("the group committed nothing for %v during the chaos (ending %v into it) while records waited; want under %v",
			res.MaxCommitGap.Round(100*time.Millisecond), gapAt, opts.MaxCommitGap)
	}
	// No member's death may cost a customer a second SMS: a send in flight
	// at a SIGKILL is found at the double by whoever takes its claim over.
	if res.Duplicates > 0 {
		t.Errorf("%d events were sent more than once", res.Duplicates)
	}
	if !drained {
		t.Errorf("%v after the chaos, %d of %d events have no SMS at the double (first: %v) or the group has not committed to the end",
			opts.Drain, len(missing), len(ids), missing[:min(5, len(missing))])
		for _, w := range running {
			t.Logf("running worker pid %d:\n%s", w.PID(), w.tail())
		}
	}
	if t.Failed() {
		churnReport(t, k, group, topic, all)
	}
	return res
}

// churnReport logs what a stalled group looks like: the group as the
// broker describes it, each partition's committed and end offsets, each
// member's assignments by generation, and where each member's whole log
// was kept (the dead ones' too: a stall's cause is often in a rebalance
// long before the drain).
func churnReport(t *testing.T, k *Kafka, group, topic string, members []*Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d, err := k.DescribeGroup(ctx, group); err != nil {
		t.Logf("group: %v", err)
	} else {
		t.Log(d)
	}
	committed, cerr := k.CommittedOffsets(ctx, group, topic)
	end, eerr := k.EndOffsets(ctx, topic)
	if cerr != nil || eerr != nil {
		t.Logf("offsets: %v %v", cerr, eerr)
	}
	for p := range int32(len(end)) {
		c, ok := committed[p]
		if !ok {
			c = -1
		}
		t.Logf("partition %d: committed %d, end %d", p, c, end[p])
	}
	for i, w := range members {
		var gens []string
		for _, ev := range w.Events("partitions_assigned") {
			gens = append(gens, fmt.Sprintf("gen %v %v", ev["generation"], ev["partitions"]))
		}
		file := keepLog(t, fmt.Sprintf("member%02d-pid%d", i+1, w.PID()), w.r.output())
		t.Logf("member %d (pid %d): assigned %s; whole log in %s", i+1, w.PID(), strings.Join(gens, ", "), file)
	}
	if k.trace != nil {
		t.Logf("the broker's group requests, with the chaos and the group's states among them: %s", keepLog(t, "group-trace", k.trace.text()))
	}
}

// churnSendLatency is how long the Twilio double takes to answer a send.
const churnSendLatency = 100 * time.Millisecond

// churnPhone is the phone number of the n-th event: each event its own, so
// its SMS is recognised at the double.
func churnPhone(n int) string { return fmt.Sprintf("+3120%07d", 1000000+n) }

// churnEvent is the JSON of an SMS-only shipment event, fresh (MAX_EVENT_AGE
// skips stale ones).
func churnEvent(id, shipment, phone string) []byte {
	b, _ := json.Marshal(map[string]any{
		"event_id":    id,
		"type":        "shipment.delivered",
		"occurred_at": time.Now().UTC().Format(time.RFC3339Nano),
		"shipment_id": shipment,
		"recipient":   map[string]any{"name": "Ada", "phone": phone},
		"channels":    []string{"sms"},
		"data":        map[string]any{"delivered_to": "front desk"},
	})
	return b
}
