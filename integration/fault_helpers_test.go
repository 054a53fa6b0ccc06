//go:build integration

package integration_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/ports"
)

// This file holds what the fault scenarios (outage, providers, poison,
// crash) share: a rig of peers per test with unique names, an event
// builder, bounded waits, a scriptable SMTP server, and readers for the
// dead letter topic and the idempotency keys. Names carry a "fault" prefix
// because other scenario files share this package.

// faultRig is one test's peers and the names that keep its data apart from
// every other test's: its own topic, group and key prefix.
type faultRig struct {
	t      *testing.T
	Kafka  *integration.Kafka
	Redis  *integration.Redis
	Twilio *integration.Twilio
	SMTP   *faultSMTP // nil unless the test asked for it

	Topic, Group, Prefix string
}

// faultRigOptions says which optional peers a test needs.
type faultRigOptions struct {
	SMTP bool // an in-process scripted SMTP server for the email channel
	// KafkaNodes > 1 runs an Apache Kafka cluster of that many nodes, the
	// topic replicated to all (integration.StartKafkaCluster), the test's
	// own; else the one broker the tests share (integration.SharedKafka).
	KafkaNodes int
}

// startFaultRig starts Redis and the Twilio double (and, if asked, the
// scripted SMTP server), starts a Kafka cluster or takes the shared broker,
// creates the test's topic, and logs which implementation of each peer
// runs: a fallback changes what a test proves.
func startFaultRig(t *testing.T, opts faultRigOptions) *faultRig {
	t.Helper()
	name := faultName(t)
	var kafka *integration.Kafka
	if opts.KafkaNodes > 1 {
		kafka = integration.StartKafkaCluster(t, opts.KafkaNodes)
	} else {
		kafka = integration.SharedKafka(t)
	}
	r := &faultRig{
		t:      t,
		Kafka:  kafka,
		Redis:  integration.StartRedis(t),
		Twilio: integration.StartTwilioDouble(t),
		Topic:  name,
		Group:  name + "-group",
		Prefix: "it:" + name + ":",
	}
	if opts.SMTP {
		r.SMTP = startFaultSMTP(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Kafka.CreateTopic(ctx, r.Topic, integration.DefaultPartitions); err != nil {
		t.Fatal(err)
	}
	smtpImpl := "console (email unused)"
	if r.SMTP != nil {
		smtpImpl = "in-process emersion/go-smtp on " + r.SMTP.Addr()
	}
	t.Logf("peers: kafka=%s redis=%s twilio=in-process double smtp=%s; topic=%s group=%s prefix=%s",
		r.Kafka.Impl, r.Redis.Image, smtpImpl, r.Topic, r.Group, r.Prefix)
	return r
}

// faultName is a topic-safe name unique to this test and this run.
func faultName(t *testing.T) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	n := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	return strings.Trim(n, "-") + "-" + hex.EncodeToString(b[:])
}

// WorkerEnv is the worker's whole environment for this rig, with retries
// fast enough for a test; extra wins.
func (r *faultRig) WorkerEnv(extra map[string]string) map[string]string {
	envs := []map[string]string{
		r.Kafka.Env(r.Topic, r.Group), r.Redis.Env(), r.Twilio.Env(),
		{
			"IDEMPOTENCY_KEY_PREFIX":         r.Prefix,
			"IDEMPOTENCY_COMPACT_KEY_PREFIX": r.Prefix,
			"RETRY_INITIAL_BACKOFF":          "50ms",
			"RETRY_MAX_BACKOFF":              "250ms",
			"LOG_LEVEL":                      "info",
		},
	}
	if r.SMTP != nil {
		envs = append(envs, r.SMTP.Env())
	} else {
		// Chosen, not defaulted: beside the Redis store the worker refuses
		// a console notifier it was not told to use.
		envs = append(envs, map[string]string{"EMAIL_NOTIFIER": "console"})
	}
	return integration.Env(append(envs, extra)...)
}

// StartWorker runs a worker process on this rig and waits until it holds
// partitions, so records published next are handled by it.
func (r *faultRig) StartWorker(extra map[string]string) *integration.Worker {
	r.t.Helper()
	w := integration.StartWorkerProcess(r.t, r.WorkerEnv(extra))
	if err := w.WaitReady(60 * time.Second); err != nil {
		r.t.Fatal(err)
	}
	r.t.Logf("worker: %s", w.Impl)
	return w
}

// Publish produces events in order, each keyed by its shipment, and waits
// for the broker's acknowledgement. It returns the records, whose Partition
// and Offset the broker assigned.
func (r *faultRig) Publish(ctx context.Context, events ...faultEvent) []*kgo.Record {
	r.t.Helper()
	recs := make([]*kgo.Record, len(events))
	for i, e := range events {
		recs[i] = &kgo.Record{Topic: r.Topic, Key: []byte(e.Shipment), Value: e.JSON()}
	}
	r.PublishRecords(ctx, recs...)
	return recs
}

// PublishRecords produces raw records (poison included) to the rig's topic,
// in order, and fills in their partition and offset.
func (r *faultRig) PublishRecords(ctx context.Context, recs ...*kgo.Record) {
	r.t.Helper()
	for _, rec := range recs {
		rec.Topic = r.Topic
	}
	if err := r.Kafka.PublishRecords(ctx, recs...); err != nil {
		r.t.Fatal(err)
	}
}

// Key is the Redis key of one notification: the worker's prefix, the
// channel, a colon, the event_id (domain.NotificationKey).
func (r *faultRig) Key(channel, eventID string) string {
	return storeKey(r.Prefix, channel, eventID)
}

// SMSCount returns how many SMS the double accepted, by recipient.
func (r *faultRig) SMSCount(ctx context.Context) map[string]int {
	r.t.Helper()
	msgs, err := r.Twilio.Messages(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range msgs {
		out[m.To]++
	}
	return out
}

// WaitSMS waits until every phone in phones received at least one SMS, and
// returns the counts by recipient.
func (r *faultRig) WaitSMS(ctx context.Context, phones []string, timeout time.Duration) map[string]int {
	r.t.Helper()
	var got map[string]int
	faultWait(r.t, timeout, fmt.Sprintf("SMS to %d phones", len(phones)), func() (bool, string) {
		got = r.SMSCount(ctx)
		missing := 0
		for _, p := range phones {
			if got[p] == 0 {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d phones still without an SMS", missing, len(phones))
	})
	return got
}

// Values returns the value of every notification's key under the rig's
// prefix (SCAN and GET; a key that expires in between is left out).
func (r *faultRig) Values(ctx context.Context) map[string]string {
	r.t.Helper()
	keys, err := r.Redis.Keys(ctx, r.Prefix+"*")
	if err != nil {
		r.t.Fatal(err)
	}
	keys = withoutMarkers(r.Prefix, keys)
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		v, ok, err := r.Redis.Get(ctx, k)
		if err != nil {
			r.t.Fatal(err)
		}
		if ok {
			out[k] = v
		}
	}
	return out
}

// WaitSentRecord waits until key holds a sent record and returns it.
func (r *faultRig) WaitSentRecord(ctx context.Context, key string, timeout time.Duration) string {
	r.t.Helper()
	var val string
	faultWait(r.t, timeout, "sent record at "+key, func() (bool, string) {
		v, ok, err := r.Redis.Get(ctx, key)
		if err != nil {
			return false, err.Error()
		}
		val = v
		return ok && isSentRecord(v), fmt.Sprintf("value %q, present %v", v, ok)
	})
	return val
}

// WaitCommitted waits until the group committed every record of the topic:
// nothing handled is left to replay, and nothing was skipped unhandled
// (the worker marks a record only once it is sent, a duplicate, or
// dead-lettered).
func (r *faultRig) WaitCommitted(ctx context.Context, timeout time.Duration) {
	r.t.Helper()
	faultWait(r.t, timeout, "committed offsets at the end of "+r.Topic, func() (bool, string) {
		end, err := r.Kafka.EndOffsets(ctx, r.Topic)
		if err != nil {
			return false, err.Error()
		}
		committed, err := r.Kafka.CommittedOffsets(ctx, r.Group, r.Topic)
		if err != nil {
			return false, err.Error()
		}
		for p, o := range end {
			if o > 0 && committed[p] != o {
				return false, fmt.Sprintf("committed %v, end %v", committed, end)
			}
		}
		return true, ""
	})
}

// DeadLetters reads the first n records of the rig's dead letter topic.
// Callers take n from the worker's event_dead_lettered lines, which it logs
// only once a dead letter is acknowledged, so the read ends at once; an
// extra dead letter would have its own line and be read too.
func (r *faultRig) DeadLetters(ctx context.Context, n int) []*kgo.Record {
	r.t.Helper()
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	recs, err := r.Kafka.ReadDLQ(ctx, r.Topic, n)
	if err != nil {
		r.t.Fatal(err)
	}
	return recs
}

// AssertNoDeadLetters checks the dead letter topic stays empty over a short
// window: an absence can only be checked for a while.
func (r *faultRig) AssertNoDeadLetters(ctx context.Context, window time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	if recs, _ := r.Kafka.ReadDLQ(ctx, r.Topic, 1); len(recs) > 0 {
		r.t.Fatalf("dead letter topic holds %d records, want none; first: key %q reason %q",
			len(recs), recs[0].Key, faultHeader(recs[0], "dlq.reason"))
	}
}

// faultHeader returns the value of a record's header, "" when absent.
func faultHeader(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// faultWait polls cond every 50 ms until it holds, failing the test after
// timeout with cond's last description of what is missing.
func faultWait(t *testing.T, timeout time.Duration, what string, cond func() (ok bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %s", timeout, what, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// faultEvents returns the worker's log events named msg whose event_id is
// id.
func faultEvents(w *integration.Worker, msg, id string) []map[string]any {
	var out []map[string]any
	for _, ev := range w.Events(msg) {
		if ev["event_id"] == id {
			out = append(out, ev)
		}
	}
	return out
}

// faultEvent is a shipment event as the producer writes it.
type faultEvent struct {
	ID, Type, Shipment string
	Phone, Email       string
	Channels           []string
}

// JSON is the record value (README: "The event").
func (e faultEvent) JSON() []byte {
	typ := e.Type
	if typ == "" {
		typ = "shipment.out_for_delivery"
	}
	recipient := map[string]string{"name": "Ada"}
	if e.Phone != "" {
		recipient["phone"] = e.Phone
	}
	if e.Email != "" {
		recipient["email"] = e.Email
	}
	v := map[string]any{
		"event_id":    e.ID,
		"type":        typ,
		"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), // fresh: MAX_EVENT_AGE skips stale events
		"shipment_id": e.Shipment,
		"recipient":   recipient,
		"data":        map[string]string{"eta": "14:00-16:00"},
	}
	if e.Channels != nil {
		v["channels"] = e.Channels
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// faultSMSEvents returns n SMS-only events, each with its own shipment and
// phone number, so the double's messages tell them apart; tag keeps event
// ids and shipments apart between batches of one test.
func faultSMSEvents(tag string, n int) ([]faultEvent, []string) {
	events := make([]faultEvent, n)
	phones := make([]string, n)
	for i := range n {
		phones[i] = faultPhone(tag, i)
		events[i] = faultEvent{
			ID:       fmt.Sprintf("evt-%s-%03d", tag, i),
			Shipment: fmt.Sprintf("SHP-%s-%03d", tag, i),
			Phone:    phones[i],
			Channels: []string{"sms"},
		}
	}
	return events, phones
}

// faultPhone is an E.164 number derived from tag and i; different tags of
// one test must differ in their first letter.
func faultPhone(tag string, i int) string {
	return fmt.Sprintf("+3120%03d%04d", int(tag[0]), i)
}

// faultSMTP is the SMTP server in the test process (smtptest), for what
// mailpit cannot do on demand: answer 451 to the first attempts at a
// recipient, or 550 to one recipient for good, or reply late. Its
// smtptest.Server counts every RCPT TO, so a test sees the retries a
// provider saw, and keeps every message it accepted. The faults may be
// set while the worker sends.
type faultSMTP struct {
	*smtptest.Server

	mu        sync.Mutex
	temporary map[string]int  // recipient -> 451 answers left
	rejected  map[string]bool // recipient -> 550 for good
	late      time.Duration   // the mean wait of the reply to an accepted message
}

func startFaultSMTP(t *testing.T) *faultSMTP {
	t.Helper()
	s := &faultSMTP{temporary: map[string]int{}, rejected: map[string]bool{}}
	s.Server = smtptest.StartServer(t, smtptest.Script{
		RcptReply: s.rcptReply,
		// From d/4 to 7d/4, varying from message to message.
		ReplyDelay: func(n int) time.Duration {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.late / 4 * time.Duration(1+n%7)
		},
	})
	return s
}

func (s *faultSMTP) rcptReply(rcpt string, _ int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rejected[rcpt] {
		return &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "No such user here"}
	}
	if s.temporary[rcpt] > 0 {
		s.temporary[rcpt]--
		return &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "Try again later"}
	}
	return nil
}

// Addr is "127.0.0.1:port".
func (s *faultSMTP) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Env is the worker's environment for this server: plain SMTP on loopback,
// no authentication.
func (s *faultSMTP) Env() map[string]string {
	return map[string]string{
		"SMTP_HOST":       s.Host,
		"SMTP_PORT":       strconv.Itoa(s.Port),
		"SMTP_FROM":       "Harborlight <notifications@harborlight.test>",
		"SMTP_TLS_POLICY": "none",
	}
}

// FailTemporarily makes the next n attempts at rcpt answer 451.
func (s *faultSMTP) FailTemporarily(rcpt string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.temporary[rcpt] = n
}

// Reject makes every attempt at rcpt answer 550 5.1.1.
func (s *faultSMTP) Reject(rcpt string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected[rcpt] = true
}

// AnswerLate makes the server take each message the moment its DATA ends,
// and reply later, d on average (from d/4 to 7d/4, varying from message to
// message, so concurrent senders drift apart): a sender that dies in
// between never learns its message went out.
func (s *faultSMTP) AnswerLate(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.late = d
}

// faultReadyStore returns the "store" field of the worker's /readyz body:
// "open-circuit" while the breaker refuses calls.
func faultReadyStore(addr string) (string, error) {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Get("http://" + addr + "/readyz")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return "", err
	}
	s, _ := body["store"].(string)
	return s, nil
}

// storeKey is the Redis key of eventID's notification on channel, for a
// worker whose compact key prefix is prefix (the harness's default format).
func storeKey(prefix, channel, eventID string) string {
	return redis.Config{CompactPrefix: prefix}.Key(domain.NotificationKey(eventID, ports.Channel(channel)))
}

// withoutMarkers returns keys without the marker keys of a worker whose
// compact key prefix is prefix: the notifications' keys among them.
func withoutMarkers(prefix string, keys []string) []string {
	markers := redis.Config{CompactPrefix: prefix}.MarkerKeys()
	return slices.DeleteFunc(keys, func(k string) bool { return slices.Contains(markers, k) })
}

// isSentRecord reports whether v is a sent record, in any format.
func isSentRecord(v string) bool {
	c, ok := redis.Decode(v)
	return ok && c.State == ports.AlreadySent
}
