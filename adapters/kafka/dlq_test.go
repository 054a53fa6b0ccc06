package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// dlqRefuser answers produce requests to the dead letter topic with an
// error while refusing is on, counting them.
type dlqRefuser struct {
	mu       sync.Mutex
	refusing bool
	refused  int
}

func (r *dlqRefuser) set(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusing = on
}

func (r *dlqRefuser) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// install makes c refuse produce requests to dlqTopic with code while
// refusing is on (at most limit of them when limit > 0).
func (r *dlqRefuser) install(c *kfake.Cluster, dlqTopic string, code int16, limit int) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(pr.Topics) == 0 || pr.Topics[0].Topic != dlqTopic || !r.refusing || (limit > 0 && r.refused == limit) {
			return nil, nil, false
		}
		r.refused++
		c.KeepControl()
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(pr.GetVersion())
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

// A dead letter write that fails is retried while the session lives, and
// the record is committed only once its dead letter is safe.
func TestConsumer_DeadLetterWriteRetried(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "dlqfail")
	c := MustStartCluster(t, 1, []string{topic, topic + ".dlq"})
	brokers := c.ListenAddrs()
	MustPublish(t, brokers, topic, numbered(3, "v", oneKey)...)

	const failures = 2
	refuser := &dlqRefuser{refusing: true}
	// Not one Sarama retries by itself (the consumer must), nor one that
	// means the record can never be written (MESSAGE_TOO_LARGE has its own
	// fallback): a dead letter topic the worker may not write to yet.
	refuser.install(c, topic+".dlq", kerr.TopicAuthorizationFailed.Code, failures)

	cfg, logs := testConfig(brokers, topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 1 {
			return ports.MarkPermanent(errors.New("unknown event type"))
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 3})
	rc.MustStop(t, 10*time.Second)

	dlq := readTopic(t, brokers, cfg.DLQTopic)
	if len(dlq) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(dlq))
	}
	if string(dlq[0].Value) != "v-1" {
		t.Errorf("dead-lettered value %q, want v-1", dlq[0].Value)
	}
	if got := refuser.count(); got != failures {
		t.Errorf("%d dead letter writes refused, want %d", got, failures)
	}
	// Both failures came within deadLetterLogEvery: one log line says so.
	if got := strings.Count(logs.String(), `"msg":"dead_letter_failed"`); got != 1 {
		t.Errorf("%d dead_letter_failed logs, want 1 (rate-limited)", got)
	}
}

// A dead letter write whose answer is lost after the broker appended it
// (REQUEST_TIMED_OUT after the append: what a client sees when the
// in-sync replicas are slow to confirm, and, as a lost connection, when
// the leader dies after appending) is sent again by the producer, and the
// broker knows the retry by its producer id and sequence number: the dead
// letter topic holds the dead letter once.
func TestConsumer_DeadLetterAnswerLostWrittenOnce(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "dlqlost")
	c := MustStartCluster(t, 1, []string{topic, topic + ".dlq"})
	brokers := c.ListenAddrs()
	MustPublish(t, brokers, topic, numbered(3, "v", oneKey)...)
	const lostAnswers = 2
	lost := c.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: topic + ".dlq",
		Err:   kerr.RequestTimedOut,
		Count: lostAnswers,
	})

	cfg, _ := testConfig(brokers, topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 1 {
			return ports.MarkPermanent(errors.New("unknown event type"))
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 3})
	rc.MustStop(t, 10*time.Second)

	if got := lost.Hits(); got != lostAnswers {
		t.Fatalf("%d dead letter writes answered REQUEST_TIMED_OUT, want %d", got, lostAnswers)
	}
	dlq := readTopic(t, brokers, cfg.DLQTopic)
	if len(dlq) != 1 {
		t.Fatalf("%d records in the dead letter topic for one dead letter whose answer was lost %d times, want 1",
			len(dlq), lostAnswers)
	}
	if string(dlq[0].Value) != "v-1" {
		t.Errorf("dead-lettered value %q, want v-1", dlq[0].Value)
	}
}

// A dead letter the broker refuses as too large (the poison value plus the
// dlq headers over max.message.bytes) would be refused forever, and the
// partition's commit would never pass it. It is written once more without
// the value, saying how large it was, and the partition moves on.
func TestConsumer_DeadLetterTooLargeDropsValue(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "dlqlarge")
	dlqTopic := topic + ".dlq"
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	// The dead letter topic takes smaller records than the one it serves.
	mustCreateSmallTopic(t, brokers, dlqTopic)
	poison := strings.Repeat("p", 4096)
	MustPublish(t, brokers, topic,
		kafka.Message{Key: []byte("SHP-1"), Value: []byte("ok-0")},
		kafka.Message{Key: []byte("SHP-2"), Value: []byte(poison), Headers: map[string]string{"trace-id": "abc"}},
		kafka.Message{Key: []byte("SHP-1"), Value: []byte("ok-2")},
	)

	m, logs := mustDeadLetterSecond(t, brokers, topic, dlqTopic, "unknown event type")
	if len(m.Value) != 0 {
		t.Errorf("dead letter value is %d bytes, want it dropped", len(m.Value))
	}
	if string(m.Key) != "SHP-2" {
		t.Errorf("dead letter key %q, want SHP-2", m.Key)
	}
	want := map[string]string{
		"trace-id":                       "abc",
		kafka.HeaderDLQValueDropped:      strconv.Itoa(len(poison)),
		kafka.HeaderDLQKind:              ports.Permanent.String(),
		kafka.HeaderDLQOriginalTopic:     topic,
		kafka.HeaderDLQOriginalPartition: "0",
		kafka.HeaderDLQOriginalOffset:    "1",
	}
	for k, v := range want {
		if got, ok := header(m, k); !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if reason, _ := header(m, kafka.HeaderDLQReason); !strings.Contains(reason, "unknown event type") {
		t.Errorf("reason = %q, want the handler's error", reason)
	}
	wantMarked(t, logs, "dead_letter_value_dropped")
	wantMarked(t, logs, "event_dead_lettered")
}

// TestConsumer_DeadLetterStrippedWhenStillTooLarge: a record whose key and
// headers alone are over the dead letter topic's limit. Written without its
// value it is still refused, so it goes stripped to the headers that say
// where it is, and the partition moves on instead of retrying forever.
func TestConsumer_DeadLetterStrippedWhenStillTooLarge(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "dlqstrip")
	dlqTopic := topic + ".dlq"
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	mustCreateSmallTopic(t, brokers, dlqTopic)
	bigKey := strings.Repeat("k", 2048)
	bigReason := "x" + strings.Repeat("é", 1000) // byte 512 is the first of an é
	MustPublish(t, brokers, topic,
		kafka.Message{Key: []byte("SHP-1"), Value: []byte("ok-0")},
		kafka.Message{Key: []byte(bigKey), Value: []byte("poison"), Headers: map[string]string{"trace-id": strings.Repeat("t", 1500), "tenant": "acme"}},
		kafka.Message{Key: []byte("SHP-1"), Value: []byte("ok-2")},
	)

	m, logs := mustDeadLetterSecond(t, brokers, topic, dlqTopic, bigReason)
	if len(m.Key) != 0 || len(m.Value) != 0 {
		t.Errorf("stripped dead letter has a %d-byte key and a %d-byte value, want neither", len(m.Key), len(m.Value))
	}
	want := map[string]string{
		kafka.HeaderDLQValueDropped:      "6",
		kafka.HeaderDLQKeyDropped:        strconv.Itoa(len(bigKey)),
		kafka.HeaderDLQHeadersDropped:    "2",
		kafka.HeaderDLQKind:              ports.Permanent.String(),
		kafka.HeaderDLQOriginalTopic:     topic,
		kafka.HeaderDLQOriginalPartition: "0",
		kafka.HeaderDLQOriginalOffset:    "1",
	}
	for k, v := range want {
		if got, ok := header(m, k); !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{"trace-id", "tenant"} {
		if _, ok := header(m, k); ok {
			t.Errorf("the record's own header %s was kept", k)
		}
	}
	// Cut to 512 bytes, less the half é at the end, and marked as cut.
	reason, _ := header(m, kafka.HeaderDLQReason)
	if want := "x" + strings.Repeat("é", 255) + "..."; reason != want || !utf8.ValidString(reason) {
		t.Errorf("reason is %d bytes (valid UTF-8 %v), want %d: the handler's error cut at a rune boundary", len(reason), utf8.ValidString(reason), len(want))
	}
	for _, event := range []string{"dead_letter_value_dropped", "dead_letter_stripped", "event_dead_lettered"} {
		wantMarked(t, logs, event)
	}
}

// While a partition cannot write a dead letter (the dead letter topic is
// down), the record is retried, not lost, and the consumer says it is not
// Ready, so the stuck partition is noticed; dead_letter_failed is logged
// once per interval, not once per attempt. When the topic is back, the
// record is written, committed past, and the consumer is Ready again.
func TestConsumer_NotReadyWhileDeadLetterFails(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "dlqdown")
	c := MustStartCluster(t, 1, []string{topic, topic + ".dlq"})
	brokers := c.ListenAddrs()
	refuser := &dlqRefuser{refusing: true}
	refuser.install(c, topic+".dlq", kerr.TopicAuthorizationFailed.Code, 0)

	cfg, logs := testConfig(brokers, topic)
	consumer, err := kafka.NewConsumer(cfg.Config)
	if err != nil {
		t.Fatalf("NewConsumer: %v", err)
	}
	kafka.SetDeadLetterUnreadyAfter(consumer, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- consumer.RunPolicy(ctx, ports.HandlerFunc(func(context.Context, ports.Record) error {
			return ports.MarkPermanent(errors.New("unknown event type"))
		}), workerPolicy(cfg, consumer)...)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})

	wait.For(t, 10*time.Second, "Ready after assignment", consumer.Ready)
	MustPublish(t, brokers, topic, numbered(1, "v", oneKey)...)
	wait.For(t, 10*time.Second, "the dead letter write refused", func() bool { return refuser.count() > 0 })
	wait.For(t, 10*time.Second, "not Ready while the dead letter fails", func() bool { return !consumer.Ready() })
	wait.For(t, 10*time.Second, "several refused attempts", func() bool { return refuser.count() >= 10 })
	// Ten attempts with a 20ms max backoff take well under 5s.
	if got := strings.Count(logs.String(), `"msg":"dead_letter_failed"`); got != 1 {
		t.Errorf("%d dead_letter_failed logs for %d failed attempts, want 1", got, refuser.count())
	}
	if got := committedOffsets(t, brokers, cfg.GroupID, topic, 1)[0]; got > 0 {
		t.Fatalf("committed offset %d while the dead letter is not written", got)
	}

	refuser.set(false)
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 1})
	wait.For(t, 10*time.Second, "Ready once the dead letter is written", consumer.Ready)
	if dlq := readTopic(t, brokers, cfg.DLQTopic); len(dlq) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(dlq))
	}
}

// mustCreateSmallTopic creates topic with one partition that takes records
// of at most 1024 bytes (max.message.bytes).
func mustCreateSmallTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	limit := "1024"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := mustAdmin(t, brokers).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, topic); err != nil {
		t.Fatalf("CreateTopic(%s): %v", topic, err)
	}
}

// mustDeadLetterSecond consumes topic's three records, failing the second
// (offset 1) for good with reason, waits until all three are committed, and
// returns the one dead letter in dlqTopic and the consumer's logs. Each
// record is handled with a context marked with its offset, and a line
// written with such a context carries the mark.
func mustDeadLetterSecond(t *testing.T, brokers []string, topic, dlqTopic, reason string) (*sarama.ConsumerMessage, *logtest.Buffer) {
	t.Helper()
	cfg, logs := testConfig(brokers, topic)
	cfg.Logger = slog.New(logtest.MarkHandler(cfg.Logger.Handler()))
	cfg.First = func(next ports.Handler) ports.Handler {
		return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			return next.Handle(logtest.WithMark(ctx, "offset-"+strconv.FormatInt(rec.Offset, 10)), rec)
		})
	}
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 1 {
			return ports.MarkPermanent(errors.New(reason))
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 3})
	rc.MustStop(t, 10*time.Second)
	dlq := readTopic(t, brokers, dlqTopic)
	if len(dlq) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(dlq))
	}
	return dlq[0], logs
}

// wantMarked fails t unless logs has a line msg, and every one is marked as
// written with the context of the record at offset 1.
func wantMarked(t *testing.T, logs *logtest.Buffer, msg string) {
	t.Helper()
	lines := logs.Events(t, msg)
	if len(lines) == 0 {
		t.Errorf("no %s log", msg)
	}
	for _, l := range lines {
		if l["mark"] != "offset-1" {
			t.Errorf("%s written with the context of %v, want offset-1's", msg, l["mark"])
		}
	}
}
