//go:build integration

package integration_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// This file holds what the issue-4 scenarios (incident, overlap, TTL,
// container) share: real peers per test (the broker shared, the rest the
// test's own), events that can be recognised at the providers, and the
// exactly-once read-back.

// workerStarter is integration.StartWorkerProcess or
// integration.StartWorkerContainer: a scenario written against it runs on
// either, which is how the container scenario reuses the incident's body.
type workerStarter func(testing.TB, map[string]string) *integration.Worker

// peerStack is one test's own Redis, mailpit and Twilio double, the Kafka
// broker the tests share (integration.SharedKafka), and the names that keep
// its data apart (topic, group, key prefix): they keep the tests apart on
// the shared broker, safe to run with t.Parallel, and make a log readable.
type peerStack struct {
	Kafka   *integration.Kafka
	Redis   *integration.Redis
	Mailpit *integration.Mailpit
	Twilio  *integration.Twilio

	Topic, Group, KeyPrefix string
	RunID                   string // short random id, in every event_id and shipment_id
}

// startPeerStack starts the four peers, creates the topic with
// integration.DefaultPartitions partitions (several, so a replay and a
// rebalance cover more than one), and logs which implementation of each
// peer the test got: a fallback changes what the test proves.
func startPeerStack(t *testing.T, name string) *peerStack {
	t.Helper()
	run := randomHex(t, 4)
	p := &peerStack{
		Kafka:     integration.SharedKafka(t),
		Redis:     integration.StartRedis(t),
		Mailpit:   integration.StartMailpit(t),
		Twilio:    integration.StartTwilioDouble(t),
		Topic:     name + "-" + run,
		Group:     name + "-" + run + "-group",
		KeyPrefix: "it-" + name + "-" + run + ":idem:",
		RunID:     run,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Kafka.CreateTopic(ctx, p.Topic, integration.DefaultPartitions); err != nil {
		t.Fatal(err)
	}
	t.Logf("peers: kafka=%s redis=%s mailpit=%s twilio=in-process double; topic=%s group=%s key prefix=%s",
		p.Kafka.Impl, p.Redis.Image, p.Mailpit.Image, p.Topic, p.Group, p.KeyPrefix)
	return p
}

// env is the worker's whole configuration for this stack; extra maps win.
func (p *peerStack) env(extra ...map[string]string) map[string]string {
	base := []map[string]string{
		p.Kafka.Env(p.Topic, p.Group), p.Redis.Env(), p.Mailpit.Env(), p.Twilio.Env(),
		{
			"IDEMPOTENCY_KEY_PREFIX":         p.KeyPrefix,
			"IDEMPOTENCY_COMPACT_KEY_PREFIX": p.KeyPrefix,
			// Short enough that a retry after a provider blip does not eat
			// the test's deadline, long enough for real backoff.
			"RETRY_INITIAL_BACKOFF": "50ms",
			"RETRY_MAX_BACKOFF":     "500ms",
		},
	}
	return integration.Env(append(base, extra...)...)
}

// startWorker starts a worker on this stack, logs what runs, and waits
// until it holds partitions (GET /readyz answers 200, consumer "assigned").
func (p *peerStack) startWorker(t *testing.T, start workerStarter, label string, extra ...map[string]string) *integration.Worker {
	t.Helper()
	w := start(t, p.env(extra...))
	t.Logf("worker %s: %s, HTTP on %s", label, w.Impl, w.HTTPAddr)
	if err := w.WaitAssigned(60 * time.Second); err != nil {
		t.Fatalf("worker %s: %v", label, err)
	}
	return w
}

// stopWorker stops w with SIGTERM and fails unless it exits 0: a graceful
// stop finishes the records in hand and commits them.
func stopWorker(ctx context.Context, t *testing.T, w *integration.Worker, label string) {
	t.Helper()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("stop worker %s: %v", label, err)
	}
	if code, exited := w.ExitCode(); !exited || code != 0 {
		t.Fatalf("worker %s: exit %d (exited %v) after SIGTERM, want 0\n%s", label, code, exited, strings.Join(lastN(w.Logs(), 30), "\n"))
	}
}

// shipEvent is one shipment event of a scenario. Each event has its own
// phone number and email address, so its SMS is recognised at the double by
// To (and its shipment in the body), and its email at mailpit by the
// Message-ID the worker derives from the idempotency key (and by To).
type shipEvent struct {
	EventID, Type, ShipmentID string
	Phone, Email              string
	Channels                  []string
}

// notif is one notification: the pair the idempotency key is made of.
type notif struct{ EventID, Channel string }

func (n notif) String() string { return n.Channel + ":" + n.EventID }

// eventTypes are the types with embedded templates, with data that makes
// each template's optional parts render.
var eventTypes = []struct {
	Type string
	Data func(shipment string) map[string]any
}{
	{"shipment.created", func(s string) map[string]any { return map[string]any{"tracking_url": "https://track.example/" + s} }},
	{"shipment.out_for_delivery", func(s string) map[string]any {
		return map[string]any{"eta": "14:00-16:00", "tracking_url": "https://track.example/" + s}
	}},
	{"shipment.delayed", func(string) map[string]any { return map[string]any{"reason": "weather", "new_eta": "tomorrow"} }},
	{"shipment.delivered", func(string) map[string]any { return map[string]any{"delivered_to": "front desk"} }},
	{"shipment.delivery_failed", func(s string) map[string]any {
		return map[string]any{"reason": "no one home", "reschedule_url": "https://track.example/" + s + "/reschedule"}
	}},
}

// makeEvents returns n events numbered from first, spread over shipments
// shipments (record key = shipment, so they land on several partitions and
// a shipment's events keep their order). Fan-out varies: every fourth event
// is SMS only, the next email only, the other two both.
func makeEvents(runID string, first, n, shipments int) []shipEvent {
	evs := make([]shipEvent, 0, n)
	for i := first; i < first+n; i++ {
		ev := shipEvent{
			EventID:    fmt.Sprintf("evt-%s-%04d", runID, i),
			Type:       eventTypes[i%len(eventTypes)].Type,
			ShipmentID: fmt.Sprintf("SHP-%s-%03d", strings.ToUpper(runID), i%shipments),
			Phone:      fmt.Sprintf("+3120%07d", 1000000+i),
			Email:      fmt.Sprintf("customer%04d@example.com", i),
		}
		switch i % 4 {
		case 0:
			ev.Channels = []string{"sms"}
		case 1:
			ev.Channels = []string{"email"}
		default:
			ev.Channels = []string{"sms", "email"}
		}
		evs = append(evs, ev)
	}
	return evs
}

func (e shipEvent) value(t testing.TB) []byte {
	t.Helper()
	var data map[string]any
	for _, et := range eventTypes {
		if et.Type == e.Type {
			data = et.Data(e.ShipmentID)
		}
	}
	b, err := json.Marshal(map[string]any{
		"event_id":    e.EventID,
		"type":        e.Type,
		"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), // fresh: MAX_EVENT_AGE skips stale events
		"shipment_id": e.ShipmentID,
		"recipient":   map[string]any{"name": "Ada", "phone": e.Phone, "email": e.Email},
		"channels":    e.Channels,
		"data":        data,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// notifications lists every notification evs fan out to.
func notifications(evs []shipEvent) []notif {
	var out []notif
	for _, e := range evs {
		for _, ch := range e.Channels {
			out = append(out, notif{e.EventID, ch})
		}
	}
	return out
}

// countChannels returns how many notifications of evs go to SMS and email.
func countChannels(evs []shipEvent) (sms, email int) {
	for _, n := range notifications(evs) {
		if n.Channel == "sms" {
			sms++
		} else {
			email++
		}
	}
	return sms, email
}

// publish produces evs in one batch, keyed by shipment, and waits for the
// broker's acknowledgement.
func (p *peerStack) publish(ctx context.Context, t *testing.T, evs []shipEvent) {
	t.Helper()
	recs := make([]*kgo.Record, 0, len(evs))
	for _, e := range evs {
		recs = append(recs, &kgo.Record{Topic: p.Topic, Key: []byte(e.ShipmentID), Value: e.value(t)})
	}
	if err := p.Kafka.PublishRecords(ctx, recs...); err != nil {
		t.Fatal(err)
	}
}

// emailMessageID is the Message-ID (without angle brackets) the SMTP
// notifier gives the email of eventID: the first 32 hex digits of
// SHA-256(idempotency key) at the From domain (harborlight.test, from
// Mailpit.Env). Computed here independently, so a change in how the key is
// derived shows up as an unrecognised email.
func emailMessageID(eventID string) string {
	sum := sha256.Sum256([]byte("email:" + eventID))
	return hex.EncodeToString(sum[:16]) + "@harborlight.test"
}

// delivery is what the providers hold, matched to the scenario's
// notifications.
type delivery struct {
	sms, email int              // messages at the double and at mailpit
	byNotif    map[notif]int    // deliveries per expected notification
	unknown    []string         // messages that match no expected notification
	smsMsgs    []double.Message // as read, for failure messages
}

// readDeliveries reads every SMS at the double and every email at mailpit
// and attributes each to the notification it belongs to.
func (p *peerStack) readDeliveries(ctx context.Context, evs []shipEvent) (delivery, error) {
	d := delivery{byNotif: map[notif]int{}}
	byPhone, byMsgID := map[string]shipEvent{}, map[string]shipEvent{}
	for _, e := range evs {
		byPhone[e.Phone] = e
		byMsgID[emailMessageID(e.EventID)] = e
	}
	sms, err := p.Twilio.Messages(ctx)
	if err != nil {
		return d, fmt.Errorf("read the double: %w", err)
	}
	d.sms, d.smsMsgs = len(sms), sms
	for _, m := range sms {
		e, ok := byPhone[m.To]
		if !ok || !strings.Contains(m.Body, e.ShipmentID) || !slices.Contains(e.Channels, "sms") {
			d.unknown = append(d.unknown, fmt.Sprintf("sms to %s: %q", m.To, m.Body))
			continue
		}
		d.byNotif[notif{e.EventID, "sms"}]++
	}
	mails, err := p.Mailpit.Messages(ctx)
	if err != nil {
		return d, fmt.Errorf("read mailpit: %w", err)
	}
	d.email = len(mails)
	for _, m := range mails {
		e, ok := byMsgID[m.MessageID]
		if !ok || len(m.To) != 1 || m.To[0] != e.Email || !strings.Contains(m.Subject+m.Text, e.ShipmentID) || !slices.Contains(e.Channels, "email") {
			d.unknown = append(d.unknown, fmt.Sprintf("email %s to %v: %q", m.MessageID, m.To, m.Subject))
			continue
		}
		d.byNotif[notif{e.EventID, "email"}]++
	}
	return d, nil
}

// waitDelivered polls the providers until they hold at least as many
// messages as evs fan out to, or timeout passes.
func (p *peerStack) waitDelivered(ctx context.Context, t *testing.T, evs []shipEvent, timeout time.Duration) {
	t.Helper()
	wantSMS, wantEmail := countChannels(evs)
	deadline := time.Now().Add(timeout)
	for {
		d, err := p.readDeliveries(ctx, evs)
		if err == nil && d.sms >= wantSMS && d.email >= wantEmail {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d of %d SMS and %d of %d emails at the providers (read error: %v)", timeout, d.sms, wantSMS, d.email, wantEmail, err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// assertEachDeliveredOnce fails unless every notification of evs reached
// its provider exactly once and nothing else arrived: no duplicate, no
// loss, no stray message.
func (p *peerStack) assertEachDeliveredOnce(ctx context.Context, t *testing.T, evs []shipEvent) {
	t.Helper()
	d, err := p.readDeliveries(ctx, evs)
	if err != nil {
		t.Fatal(err)
	}
	want := notifications(evs)
	var dup, lost []string
	for _, n := range want {
		switch c := d.byNotif[n]; {
		case c == 0:
			lost = append(lost, n.String())
		case c > 1:
			dup = append(dup, fmt.Sprintf("%s x%d", n, c))
		}
	}
	wantSMS, wantEmail := countChannels(evs)
	if len(dup) > 0 || len(lost) > 0 || len(d.unknown) > 0 || d.sms != wantSMS || d.email != wantEmail {
		t.Errorf("providers hold %d SMS (want %d) and %d emails (want %d)\nduplicated: %v\nlost: %v\nunrecognised: %v",
			d.sms, wantSMS, d.email, wantEmail, dup, lost, d.unknown)
	}
}

// logged counts the worker's log lines named msg per (event_id, channel).
func logged(ws []*integration.Worker, msg string) map[notif]int {
	out := map[notif]int{}
	for _, w := range ws {
		for _, ev := range w.Events(msg) {
			id, _ := ev["event_id"].(string)
			ch, _ := ev["channel"].(string)
			out[notif{id, ch}]++
		}
	}
	return out
}

// assertLoggedOncePer fails unless the lines named msg across ws name each
// notification of want exactly once, and nothing else.
func assertLoggedOncePer(t *testing.T, ws []*integration.Worker, msg string, want []notif) {
	t.Helper()
	got := logged(ws, msg)
	var missing, extra []string
	for _, n := range want {
		if got[n] != 1 {
			missing = append(missing, fmt.Sprintf("%s x%d", n, got[n]))
		}
		delete(got, n)
	}
	for n, c := range got {
		extra = append(extra, fmt.Sprintf("%s x%d", n, c))
	}
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%q lines: want each of %d notifications once\nnot once: %v\nnot expected: %v", msg, len(want), missing, extra)
	}
}

// waitCommittedToEnd waits until the group's committed offsets equal the
// topic's end offsets on every partition that has records: the group
// handled and committed everything published so far.
func (p *peerStack) waitCommittedToEnd(ctx context.Context, t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		committed, cerr := p.Kafka.CommittedOffsets(ctx, p.Group, p.Topic)
		end, eerr := p.Kafka.EndOffsets(ctx, p.Topic)
		behind := []string{}
		if cerr == nil && eerr == nil {
			for part, o := range end {
				if o > 0 && committed[part] != o {
					behind = append(behind, fmt.Sprintf("p%d %d/%d", part, committed[part], o))
				}
			}
			if len(behind) == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the group has not committed to the end: %v (errors: %v, %v)", timeout, behind, cerr, eerr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rewindGroup deletes the group and its committed offsets, so the next
// member starts from the oldest record, as the 2026-04-02 rebalance
// replayed from stale offsets. The group must be empty: a member that just
// left may still be listed for a moment, so NON_EMPTY_GROUP is retried
// until a deadline.
func (p *peerStack) rewindGroup(ctx context.Context, t *testing.T) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(p.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resps, err := adm.DeleteGroups(ctx, p.Group)
		if err == nil {
			err = resps.Error()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) || (!errors.Is(err, kerr.NonEmptyGroup) && !kerr.IsRetriable(err)) {
			t.Fatalf("delete group %s: %v", p.Group, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Apache Kafka answers a deleted group's offsets with none; kfake with
	// GROUP_ID_NOT_FOUND. Either way nothing is committed.
	committed, err := p.Kafka.CommittedOffsets(ctx, p.Group, p.Topic)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatal(err)
	}
	if len(committed) != 0 {
		t.Fatalf("after deleting group %s it still has offsets %v", p.Group, committed)
	}
	t.Logf("group %s deleted: the next member replays every partition from offset 0", p.Group)
}

// httpGet returns the status and body of GET http://addr/path.
func httpGet(ctx context.Context, addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metricValue returns the value of the sample of name whose labels include
// every one of labels (`channel="sms"` ...) in a Prometheus text exposition,
// and whether one was found.
func metricValue(exposition, name string, labels ...string) (float64, bool) {
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(series, l) {
				match = false
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		return v, true
	}
	return 0, false
}

// waitMetric polls w's /metrics until the sample of name with labels equals
// want. The worker counts a notification just after it logs it, so a
// scrape right after the log line may still show the old value.
func waitMetric(ctx context.Context, t *testing.T, w *integration.Worker, want float64, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got float64
	var found bool
	for {
		text, err := w.Metrics(ctx)
		if err == nil {
			got, found = metricValue(text, name, labels...)
			if found && got == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("%s%v = %v (found %v, error %v), want %v", name, labels, got, found, err, want)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func lastN(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
