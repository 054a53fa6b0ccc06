package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
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
	o.Members = cmp.Or(o.Members, 3)
	o.Partitions = cmp.Or(o.Partitions, 6)
	o.Chaos = cmp.Or(o.Chaos, 60*time.Second)
	o.Drain = cmp.Or(o.Drain, 60*time.Second)
	o.MaxCommitGap = cmp.Or(o.MaxCommitGap, 50*time.Second)
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
	c := newChurn(t, k, opts.withDefaults())
	defer c.cancel()
	for range c.opts.Members {
		c.start()
	}
	for _, w := range c.running {
		if err := w.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	var pubErr error
	stopPublisher := c.background(func(ctx context.Context) { ids, pubErr = c.publish(ctx) })
	var gap time.Duration
	var gapEnd time.Time
	stopWatch := c.background(func(ctx context.Context) { gap, gapEnd = c.watchCommits(ctx) })
	defer c.background(c.traceGroup)()

	c.chaos()
	stopPublisher()
	stopWatch()
	if pubErr != nil {
		t.Fatalf("publish during the chaos: %v", pubErr)
	}
	for len(c.running) < c.opts.Members {
		c.start()
	}
	c.res.Published, c.res.MaxCommitGap = len(ids), gap
	missing, sms, drained := c.drain(ids, time.Now())
	c.count(ids, sms)
	c.judge(ids, missing, drained, gapEnd.Sub(c.began).Round(100*time.Millisecond))
	return c.res
}

// churn is one RunChurn: its group and topic, the send path the members
// share, the members, and what was seen. Its steps run on RunChurn's
// goroutine, but publish, watchCommits and traceGroup, which run beside
// them and read only what newChurn set.
type churn struct {
	t      *testing.T
	k      *Kafka
	opts   ChurnOptions
	ctx    context.Context
	cancel context.CancelFunc
	rnd    *rand.Rand
	run    string // names the run's topic, group and events
	topic  string
	group  string
	env    map[string]string
	twilio *double.Double

	res     ChurnResult
	all     []*Worker // every worker started, alive or not: their logs count
	running []*Worker
	began   time.Time // when the chaos began
}

// newChurn seeds the run (CHURN_SEED, or the clock), creates its topic and
// starts the send path.
func newChurn(t *testing.T, k *Kafka, opts ChurnOptions) *churn {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHURN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHURN_SEED %q: %v", s, err)
		}
		seed = v
	}
	t.Logf("churn seed %d (CHURN_SEED=%d replays the same actions)", seed, seed)
	c := &churn{t: t, k: k, opts: opts, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.run = strconv.FormatUint(seed%1_000_000, 36)
	c.topic, c.group = "churn-"+c.run, "churn-"+c.run
	if err := k.CreateTopic(c.ctx, c.topic, opts.Partitions); err != nil {
		c.cancel()
		t.Fatal(err)
	}
	c.env = Env(k.Env(c.topic, c.group), c.sendPath(), opts.Env)
	return c
}

// sendPath starts the real send path, a redis-server shared by the members
// and the Twilio double over HTTP, answering each send after a provider's
// latency so that records are in hand when a member dies or its
// partitions are revoked; it returns the members' environment for them.
func (c *churn) sendPath() map[string]string {
	redis := redistest.MustStart(c.t)
	const sid, token = "AC00000000000000000000000000000c4e", "churntoken"
	c.twilio = double.New(sid, token)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			time.Sleep(churnSendLatency)
		}
		c.twilio.ServeHTTP(w, r)
	}))
	c.t.Cleanup(api.Close)
	return map[string]string{
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
	}
}

// start starts a member.
func (c *churn) start() {
	w := StartWorkerProcess(c.t, c.env)
	c.all = append(c.all, w)
	c.running = append(c.running, w)
	c.res.Starts++
	c.k.trace.note(fmt.Sprintf("member %d started, pid %d", len(c.all), w.PID()))
}

// background runs f on a goroutine of its own until the function it
// returns is called, which cancels f's context and waits for f to return.
func (c *churn) background(f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(c.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// logf logs a chaos action, and notes it in the broker's group trace among
// the requests it caused.
func (c *churn) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf(format, args...)
	c.k.trace.note(fmt.Sprintf(format, args...))
}

// chaos acts every 1 to 4 seconds for opts.Chaos (see RunChurn).
func (c *churn) chaos() {
	c.began = time.Now()
	c.k.trace.note("chaos begins")
	c.t.Logf("chaos: %d members, %d partitions, for %v", c.opts.Members, c.opts.Partitions, c.opts.Chaos)
	for time.Since(c.began) < c.opts.Chaos {
		time.Sleep(time.Second + time.Duration(c.rnd.Int64N(int64(3*time.Second))))
		c.act(time.Since(c.began).Round(100 * time.Millisecond))
	}
	c.k.trace.note("chaos ends")
}

// act is one chaos action, at into the chaos: a start when members are
// missing, else a SIGKILL (two times in three) or a SIGTERM of a running
// member picked at random.
func (c *churn) act(at time.Duration) {
	if len(c.running) < c.opts.Members {
		c.start()
		c.logf("%6v: start member %d, pid %d (%d running)", at, len(c.all), c.running[len(c.running)-1].PID(), len(c.running))
		return
	}
	i := c.rnd.IntN(len(c.running))
	w := c.running[i]
	c.running = append(c.running[:i], c.running[i+1:]...)
	if c.rnd.IntN(3) < 2 {
		if err := w.Kill(c.ctx); err != nil {
			c.t.Fatal(err)
		}
		c.res.Kills++
		c.logf("%6v: SIGKILL pid %d (%d running)", at, w.PID(), len(c.running))
		return
	}
	// A graceful leave runs beside the chaos, as a pod's shutdown does.
	c.res.Stops++
	c.logf("%6v: SIGTERM pid %d (%d running)", at, w.PID(), len(c.running))
	go func() { _ = w.Stop(c.ctx) }()
}

// publish publishes a batch of 4 events every 250 ms until ctx is done
// or a publish failed, and returns the events published and that failure.
func (c *churn) publish(ctx context.Context) ([]string, error) {
	var ids []string
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n += 4 {
		select {
		case <-ctx.Done():
			return ids, nil
		case <-tick.C:
		}
		batch, err := c.publishBatch(n, 4)
		if err != nil {
			return ids, err
		}
		ids = append(ids, batch...)
	}
}

// publishBatch publishes events first to first+count-1, each an SMS to a
// phone number of its own, and returns their ids, none if it failed.
func (c *churn) publishBatch(first, count int) ([]string, error) {
	var recs []*kgo.Record
	var ids []string
	for n := first; n < first+count; n++ {
		id := fmt.Sprintf("evt-%s-%05d", c.run, n)
		shipment := fmt.Sprintf("SHP-%s-%03d", c.run, n%97)
		recs = append(recs, &kgo.Record{Topic: c.topic, Key: []byte(shipment), Value: churnEvent(id, shipment, churnPhone(n))})
		ids = append(ids, id)
	}
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if err := c.k.PublishRecords(ctx, recs...); err != nil {
		return nil, err
	}
	return ids, nil
}

// watchCommits polls the sum of the group's committed offsets until ctx is
// done, and returns the longest time it did not move while records waited,
// and when that time ended.
func (c *churn) watchCommits(ctx context.Context) (gap time.Duration, gapEnd time.Time) {
	last, lastMove := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			return gap, gapEnd
		case <-time.After(250 * time.Millisecond):
		}
		committed, end, err := c.offsets(ctx)
		if err != nil {
			continue
		}
		now := time.Now()
		if sum := total(committed); sum != last || sum == total(end) {
			last, lastMove = sum, now
		} else if now.Sub(lastMove) > gap {
			gap, gapEnd = now.Sub(lastMove), now
		}
	}
}

// offsets reads the group's committed offsets and the topic's end offsets,
// within 5 s.
func (c *churn) offsets(ctx context.Context) (committed, end map[int32]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if committed, err = c.k.CommittedOffsets(ctx, c.group, c.topic); err != nil {
		return nil, nil, err
	}
	end, err = c.k.EndOffsets(ctx, c.topic)
	return committed, end, err
}

func total(offsets map[int32]int64) (sum int64) {
	for _, o := range offsets {
		sum += o
	}
	return sum
}

// traceGroup notes the group's state, as the broker describes it, in the
// trace whenever it changes, until ctx is done; without a trace, it
// returns at once.
func (c *churn) traceGroup(ctx context.Context) {
	for last := ""; c.k.trace != nil && ctx.Err() == nil; {
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		if d, err := c.k.DescribeGroup(qctx, c.group); err == nil && d != last {
			last = d
			c.k.trace.note(strings.ReplaceAll(d, "\n", "\n            "))
		}
		qcancel()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drain waits, from chaosEnded for opts.Drain, for an SMS at the double
// for every event of ids and the group committed to the end. It returns
// the events still without an SMS, the SMS the double holds by phone, and
// whether the drain completed; it puts Handled and DrainedIn in c's result.
func (c *churn) drain(ids []string, chaosEnded time.Time) (missing []string, sms map[string]int, drained bool) {
	for deadline := chaosEnded.Add(c.opts.Drain); time.Now().Before(deadline); time.Sleep(time.Second) {
		sms = map[string]int{}
		for _, m := range c.twilio.Messages() {
			sms[m.To]++
		}
		missing = missing[:0]
		for n, id := range ids {
			if sms[churnPhone(n)] == 0 {
				missing = append(missing, id)
			}
		}
		c.res.Handled = len(ids) - len(missing)
		if len(missing) == 0 && c.committedToEnd() {
			c.res.DrainedIn = time.Since(chaosEnded).Round(100 * time.Millisecond)
			return missing, sms, true
		}
	}
	return missing, sms, false
}

// committedToEnd reports whether the group committed every partition to
// its end.
func (c *churn) committedToEnd() bool {
	committed, end, err := c.offsets(c.ctx)
	if err != nil {
		return false
	}
	for p, o := range end {
		if committed[p] != o {
			return false
		}
	}
	return true
}

// count puts in c's result the events sent more than once and the
// members' consume_failed lines.
func (c *churn) count(ids []string, sms map[string]int) {
	for n := range ids {
		if sms[churnPhone(n)] > 1 {
			c.res.Duplicates++
		}
	}
	for _, w := range c.all {
		for _, ev := range w.Events("consume_failed") {
			c.res.ConsumeFailed++
			if e, _ := ev["error"].(string); strings.Contains(e, "i/o timeout") {
				c.res.IOTimeouts++
			}
		}
	}
}

// judge logs the run and fails t as RunChurn says, reporting the group when
// it did.
func (c *churn) judge(ids, missing []string, drained bool, gapAt time.Duration) {
	t, res := c.t, c.res
	t.Helper()
	t.Logf("churn on %s: %d kills, %d stops, %d starts; %d events published, %d sent, %d sent more than once; longest time without a commit while records waited %v (ending %v into the chaos); %d consume_failed lines, %d of them i/o timeouts; drained %v after the chaos",
		c.k.Impl, res.Kills, res.Stops, res.Starts, res.Published, res.Handled, res.Duplicates, res.MaxCommitGap.Round(100*time.Millisecond), gapAt,
		res.ConsumeFailed, res.IOTimeouts, res.DrainedIn)
	if res.MaxCommitGap >= c.opts.MaxCommitGap {
		t.Errorf("the group committed nothing for %v during the chaos (ending %v into it) while records waited; want under %v",
			res.MaxCommitGap.Round(100*time.Millisecond), gapAt, c.opts.MaxCommitGap)
	}
	// No member's death may cost a customer a second SMS: a send in flight
	// at a SIGKILL is found at the double by whoever takes its claim over.
	if res.Duplicates > 0 {
		t.Errorf("%d events were sent more than once", res.Duplicates)
	}
	if !drained {
		t.Errorf("%v after the chaos, %d of %d events have no SMS at the double (first: %v) or the group has not committed to the end",
			c.opts.Drain, len(missing), len(ids), missing[:min(5, len(missing))])
		for _, w := range c.running {
			t.Logf("running worker pid %d:\n%s", w.PID(), w.tail())
		}
	}
	if t.Failed() {
		churnReport(t, c.k, c.group, c.topic, c.all)
	}
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
