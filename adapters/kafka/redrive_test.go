package kafka_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/ports"
)

// The traceparent the poison records carry, which a redrive must keep.
const redriveTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// redriveOriginalTime is the timestamp the poison records were produced
// with, long before the test runs: a redrive must keep it.
var redriveOriginalTime = time.Date(2026, 4, 2, 9, 30, 0, 0, time.UTC)

// mustPublishAt writes records to partition p of topic with the given
// timestamp and headers.
func mustPublishAt(tb testing.TB, brokers []string, topic string, p int32, ts time.Time, headers map[string]string, kv ...string) {
	tb.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_4_0_0
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sp, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		tb.Fatalf("NewSyncProducer: %v", err)
	}
	defer sp.Close()
	var msgs []*sarama.ProducerMessage
	for i := 0; i+1 < len(kv); i += 2 {
		pm := &sarama.ProducerMessage{Topic: topic, Partition: p, Timestamp: ts, Key: sarama.StringEncoder(kv[i]), Value: sarama.StringEncoder(kv[i+1])}
		for k, v := range headers {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
		}
		msgs = append(msgs, pm)
	}
	if err := sp.SendMessages(msgs); err != nil {
		tb.Fatalf("SendMessages: %v", err)
	}
}

// mustDeadLetterPoison runs the worker's consumer over topic (two
// partitions), failing "poison-permanent" for good and "poison-retry" until
// its retries run out, until every record is committed, and returns the
// dead letters it wrote.
func mustDeadLetterPoison(t *testing.T, brokers []string, topic string, committed map[int32]int64, want int) []*sarama.ConsumerMessage {
	t.Helper()
	cfg, _ := testConfig(brokers, topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		switch string(rec.Value) {
		case "poison-permanent":
			return ports.MarkPermanent(errors.New("unknown event type"))
		case "poison-retry":
			return errors.New("provider answered 500")
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, committed)
	rc.MustStop(t, 10*time.Second)
	dlq := readTopic(t, brokers, cfg.DLQTopic)
	if len(dlq) != want {
		t.Fatalf("%d dead letters, want %d", len(dlq), want)
	}
	return dlq
}

func mustRedrive(t *testing.T, cfg kafka.RedriveConfig) kafka.RedriveResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kafka.Redrive(ctx, cfg)
	if err != nil {
		t.Fatalf("Redrive: %v", err)
	}
	return res
}

// onlyPoison returns the records whose value starts with "poison": in the
// topic, the ones beyond the originals are the redriven ones.
func onlyPoison(msgs []*sarama.ConsumerMessage) []*sarama.ConsumerMessage {
	var out []*sarama.ConsumerMessage
	for _, m := range msgs {
		if strings.HasPrefix(string(m.Value), "poison") {
			out = append(out, m)
		}
	}
	return out
}

// Dead letters the worker wrote for poison records go back to the topic
// they came from, into their partition, with their key, their own headers
// (traceparent included, the dead letter's removed) and their original
// timestamp; a dry run writes nothing; a kind filter redrives only that
// kind; a later run redrives each of them at most once.
func TestRedrive(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redrive")
	dlqTopic := topic + ".dlq"
	c := MustStartCluster(t, 2, []string{topic, dlqTopic})
	brokers := c.ListenAddrs()
	hs := map[string]string{"traceparent": redriveTraceparent, "tenant": "acme"}
	mustPublishAt(t, brokers, topic, 0, redriveOriginalTime, hs, "SHP-1", "ok", "SHP-2", "poison-permanent", "SHP-3", "ok")
	mustPublishAt(t, brokers, topic, 1, redriveOriginalTime, hs, "SHP-4", "poison-retry", "SHP-5", "poison-permanent")
	mustDeadLetterPoison(t, brokers, topic, map[int32]int64{0: 3, 1: 2}, 3)
	poisonBefore := len(onlyPoison(readTopic(t, brokers, topic)))

	base := kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic}}

	t.Run("DryRunWritesNothing", func(t *testing.T) {
		cfg := base
		cfg.DryRun = true
		res := mustRedrive(t, cfg)
		if res.Read != 3 || res.Redriven != 3 {
			t.Errorf("dry run read %d and would redrive %d, want 3 and 3", res.Read, res.Redriven)
		}
		byKind := map[string]int{}
		for _, rc := range res.ByReason {
			byKind[rc.Kind] += rc.Count
		}
		if byKind["permanent"] != 2 || byKind["retryable"] != 1 {
			t.Errorf("dry run counts by kind %v, want permanent 2, retryable 1", byKind)
		}
		if got := len(onlyPoison(readTopic(t, brokers, topic))); got != poisonBefore {
			t.Errorf("topic holds %d poison records after a dry run, want %d", got, poisonBefore)
		}
		if got := len(readTopic(t, brokers, dlqTopic)); got != 3 {
			t.Errorf("dead letter topic holds %d records after a dry run, want the 3 dead letters", got)
		}
	})

	t.Run("ReasonFilters", func(t *testing.T) {
		cfg := base
		cfg.Kind = "retryable"
		res := mustRedrive(t, cfg)
		if res.Redriven != 1 || res.PassedOver != 2 {
			t.Errorf("redrove %d, passed over %d, want 1 and 2", res.Redriven, res.PassedOver)
		}
		poison := onlyPoison(readTopic(t, brokers, topic))
		if got := len(poison) - poisonBefore; got != 1 {
			t.Fatalf("%d records redriven to the topic, want 1", got)
		}
		retried := 0
		for _, m := range poison {
			if string(m.Value) == "poison-retry" {
				retried++
			}
		}
		if retried != 2 {
			t.Errorf("topic holds poison-retry %d times, want 2 (original and redriven)", retried)
		}
		poisonBefore = len(poison)
	})

	t.Run("RedrivenOnce", func(t *testing.T) {
		res := mustRedrive(t, base)
		if res.Read != 3 || res.Redriven != 2 || res.AlreadyRedriven != 1 {
			t.Errorf("read %d, redrove %d, already redriven %d; want 3, 2, 1", res.Read, res.Redriven, res.AlreadyRedriven)
		}
		poison := onlyPoison(readTopic(t, brokers, topic))
		if got := len(poison) - poisonBefore; got != 2 {
			t.Fatalf("%d records redriven to the topic, want 2", got)
		}
		seen := map[string]int{}
		for _, m := range poison {
			seen[string(m.Key)+"/"+string(m.Value)+"/"+strconv.Itoa(int(m.Partition))]++
			if !m.Timestamp.Equal(redriveOriginalTime) {
				t.Errorf("%s at %d/%d has timestamp %s, want %s", m.Key, m.Partition, m.Offset, m.Timestamp, redriveOriginalTime)
			}
			if v, _ := header(m, "traceparent"); v != redriveTraceparent {
				t.Errorf("%s at %d/%d: traceparent %q, want %q", m.Key, m.Partition, m.Offset, v, redriveTraceparent)
			}
			if v, _ := header(m, "tenant"); v != "acme" {
				t.Errorf("%s at %d/%d: tenant %q, want acme", m.Key, m.Partition, m.Offset, v)
			}
			for _, h := range m.Headers {
				if strings.HasPrefix(string(h.Key), "dlq.") {
					t.Errorf("%s at %d/%d carries dead letter header %s", m.Key, m.Partition, m.Offset, h.Key)
				}
			}
			if len(m.Headers) != 2 {
				t.Errorf("%s at %d/%d has %d headers, want 2", m.Key, m.Partition, m.Offset, len(m.Headers))
			}
		}
		// Each the original and one copy: the filtered run's, or this one's.
		want := map[string]int{"SHP-2/poison-permanent/0": 2, "SHP-4/poison-retry/1": 2, "SHP-5/poison-permanent/1": 2}
		for k, n := range want {
			if seen[k] != n {
				t.Errorf("topic holds %s %d times, want %d (all: %v)", k, seen[k], n, seen)
			}
		}
		poisonBefore = len(poison)
	})

	t.Run("SecondRunRedrivesNothing", func(t *testing.T) {
		res := mustRedrive(t, base)
		if res.Read != 3 || res.Redriven != 0 || res.AlreadyRedriven != 3 {
			t.Errorf("second run read %d, redrove %d, already redriven %d; want 3, 0, 3", res.Read, res.Redriven, res.AlreadyRedriven)
		}
		if got := len(onlyPoison(readTopic(t, brokers, topic))); got != poisonBefore {
			t.Errorf("topic holds %d poison records after the second run, want %d", got, poisonBefore)
		}
	})

	t.Run("From", func(t *testing.T) {
		cfg := base
		cfg.DryRun = true
		cfg.From = map[int32]int64{1: 1}
		res := mustRedrive(t, cfg)
		if res.Read != 1 || res.Redriven != 0 {
			t.Errorf("from 1:1 read %d dead letters, would redrive %d; want 1 (partition 0 not read) and 0", res.Read, res.Redriven)
		}
	})

	t.Run("Since", func(t *testing.T) {
		cfg := base
		cfg.DryRun = true
		cfg.Since = time.Now().Add(time.Hour)
		if res := mustRedrive(t, cfg); res.Read != 0 {
			t.Errorf("since an hour ahead read %d dead letters, want none", res.Read)
		}
		cfg.Since = time.Now().Add(-time.Hour)
		if res := mustRedrive(t, cfg); res.Read != 3 || res.Redriven != 0 {
			t.Errorf("since an hour ago read %d dead letters, would redrive %d; want 3 and 0", res.Read, res.Redriven)
		}
	})
}

// mustWriteDeadLetters writes a dead letter to partition 0 of dlqTopic
// for each kind given, as the worker writes them: the value "dl-N" and
// the origin topic/0/N, N counting on from *n.
func mustWriteDeadLetters(t *testing.T, brokers []string, topic, dlqTopic string, n *int, kinds ...string) {
	t.Helper()
	for _, kind := range kinds {
		*n++
		hs := map[string]string{
			kafka.HeaderDLQKind: kind, kafka.HeaderDLQReason: "a reason of kind " + kind,
			kafka.HeaderDLQOriginalTopic: topic, kafka.HeaderDLQOriginalPartition: "0", kafka.HeaderDLQOriginalOffset: strconv.Itoa(*n),
		}
		mustPublishAt(t, brokers, dlqTopic, 0, redriveOriginalTime, hs, "SHP-"+strconv.Itoa(*n), "dl-"+strconv.Itoa(*n))
	}
}

// copiesOf counts the records of topic by value.
func copiesOf(t *testing.T, brokers []string, topic string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range readTopic(t, brokers, topic) {
		out[string(m.Value)]++
	}
	return out
}

// Any sequence of runs, whatever their filters, redrives each dead letter
// at most once: a filtered run then a plain one, a plain one then a
// filtered one, the same filter twice, overlapping filters; and a dead
// letter written between two runs is redriven by the next.
func TestRedrive_AtMostOnceWhateverTheFilters(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redriveonce")
	dlqTopic := topic + ".dlq"
	brokers := MustStartCluster(t, 2, []string{topic, dlqTopic}).ListenAddrs()
	base := kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic}}
	run := func(kind string, from map[int32]int64) kafka.RedriveResult {
		cfg := base
		cfg.Kind, cfg.From = kind, from
		return mustRedrive(t, cfg)
	}
	n := 0
	// want: how many copies of each dead letter the topic must hold.
	want := map[string]int{}
	check := func(step string) {
		t.Helper()
		got := copiesOf(t, brokers, topic)
		for v, w := range want {
			if got[v] != w {
				t.Errorf("%s: topic holds %s %d times, want %d (all: %v)", step, v, got[v], w, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: topic holds %v, want %v", step, got, want)
		}
	}

	mustWriteDeadLetters(t, brokers, topic, dlqTopic, &n, "permanent", "retryable", "unavailable", "permanent")
	run("permanent", nil)
	want["dl-1"], want["dl-4"] = 1, 1
	check("-reason permanent")
	run("", nil)
	want["dl-2"], want["dl-3"] = 1, 1
	check("then a plain run")
	run("permanent", nil)
	run("", nil)
	check("the same runs again")

	mustWriteDeadLetters(t, brokers, topic, dlqTopic, &n, "retryable", "permanent")
	run("", nil)
	want["dl-5"], want["dl-6"] = 1, 1
	check("a plain run after new dead letters")
	run("permanent", nil)
	check("then -reason permanent")

	mustWriteDeadLetters(t, brokers, topic, dlqTopic, &n, "paced", "retryable", "permanent")
	run("paced", map[int32]int64{0: 10})
	want["dl-7"] = 1
	check("-reason paced -from past the first dead letters")
	res := run("", map[int32]int64{0: 0})
	want["dl-8"], want["dl-9"] = 1, 1
	check("then -from the start")
	if res.Redriven != 2 || res.AlreadyRedriven != 7 {
		t.Errorf("the last run redrove %d, passed over %d as already redriven; want 2 and 7", res.Redriven, res.AlreadyRedriven)
	}
}

// A run that wrote a batch and failed before marking it loses nothing:
// the next run writes that batch again (the idempotency store makes the
// copies send nothing), and marks it.
func TestRedrive_FailedMarkingRedrivesAgain(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redrivemark")
	dlqTopic := topic + ".dlq"
	c := MustStartCluster(t, 1, []string{topic, dlqTopic})
	brokers := c.ListenAddrs()
	n := 0
	mustWriteDeadLetters(t, brokers, topic, dlqTopic, &n, "permanent", "retryable")
	refuser := &dlqRefuser{refusing: true}
	refuser.install(c, dlqTopic, kerr.TopicAuthorizationFailed.Code, 0)

	cfg := kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic, RetryInitialBackoff: time.Millisecond, RetryMaxBackoff: time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kafka.Redrive(ctx, cfg); err == nil {
		t.Fatal("Redrive returned nil with its markers refused")
	}
	if got := copiesOf(t, brokers, topic); got["dl-1"] != 1 || got["dl-2"] != 1 {
		t.Fatalf("topic holds %v after the failed run, want dl-1 and dl-2 once", got)
	}
	refuser.set(false)
	if res := mustRedrive(t, cfg); res.Redriven != 2 {
		t.Errorf("the run after redrove %d, want the 2 it had not marked", res.Redriven)
	}
	if res := mustRedrive(t, cfg); res.Redriven != 0 || res.AlreadyRedriven != 2 {
		t.Errorf("the third run redrove %d, already redriven %d; want 0 and 2", res.Redriven, res.AlreadyRedriven)
	}
	if got := copiesOf(t, brokers, topic); got["dl-1"] != 2 || got["dl-2"] != 2 {
		t.Errorf("topic holds %v, want dl-1 and dl-2 twice", got)
	}
}

// A dead letter whose value the dead letter topic refused is redriven from
// the record in its original topic: value, key and headers as they were.
func TestRedrive_ValueDroppedReadFromSource(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redrivedrop")
	dlqTopic := topic + ".dlq"
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	mustCreateSmallTopic(t, brokers, dlqTopic)
	poison := "poison-" + strings.Repeat("p", 2048)
	mustPublishAt(t, brokers, topic, 0, redriveOriginalTime, map[string]string{"traceparent": redriveTraceparent},
		"SHP-1", "ok", "SHP-2", poison, "SHP-3", "ok")
	m, _ := mustDeadLetterSecond(t, brokers, topic, dlqTopic, "unknown event type")
	if _, ok := header(m, kafka.HeaderDLQValueDropped); !ok {
		t.Fatal("the dead letter kept its value; the test needs one without")
	}

	res := mustRedrive(t, kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic}})
	if res.Redriven != 1 || res.FromSource != 1 {
		t.Errorf("redrove %d, %d from source, want 1 and 1", res.Redriven, res.FromSource)
	}
	got := onlyPoison(readTopic(t, brokers, topic))
	if len(got) != 2 {
		t.Fatalf("topic holds the poison record %d times, want 2", len(got))
	}
	r := got[1]
	if string(r.Value) != poison || string(r.Key) != "SHP-2" || !r.Timestamp.Equal(redriveOriginalTime) {
		t.Errorf("redriven record key %q, %d-byte value, timestamp %s; want SHP-2, the %d-byte original, %s",
			r.Key, len(r.Value), r.Timestamp, len(poison), redriveOriginalTime)
	}
	if v, _ := header(r, "traceparent"); v != redriveTraceparent {
		t.Errorf("traceparent %q, want %q", v, redriveTraceparent)
	}
}

// The dead letter topic is at least once: two dead letters of one record
// (a replay after a rebalance dead-letters it again) are redriven once.
func TestRedrive_RepeatsRedrivenOnce(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redriverepeat")
	dlqTopic := topic + ".dlq"
	brokers := MustStartCluster(t, 1, []string{topic, dlqTopic}).ListenAddrs()
	hs := map[string]string{
		kafka.HeaderDLQKind: "permanent", kafka.HeaderDLQReason: "unknown event type",
		kafka.HeaderDLQOriginalTopic: topic, kafka.HeaderDLQOriginalPartition: "0", kafka.HeaderDLQOriginalOffset: "7",
	}
	mustPublishAt(t, brokers, dlqTopic, 0, redriveOriginalTime, hs, "SHP-1", "poison", "SHP-1", "poison")

	cfg := kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic}}
	res := mustRedrive(t, cfg)
	if res.Read != 2 || res.Redriven != 1 || res.AlreadyRedriven != 1 {
		t.Errorf("read %d, redrove %d, already redriven %d; want 2, 1, 1", res.Read, res.Redriven, res.AlreadyRedriven)
	}
	// A third dead letter of the record, written after the run.
	mustPublishAt(t, brokers, dlqTopic, 0, redriveOriginalTime, hs, "SHP-1", "poison")
	if res := mustRedrive(t, cfg); res.Redriven != 0 || res.AlreadyRedriven != 3 {
		t.Errorf("the next run redrove %d, already redriven %d; want 0 and 3", res.Redriven, res.AlreadyRedriven)
	}
	if got := readTopic(t, brokers, topic); len(got) != 1 {
		t.Errorf("topic holds %d records, want the one redriven", len(got))
	}
}

// A dead letter without its value whose original record is gone cannot be
// redriven: the run redrives the others, marks it, and says so (an error
// naming it); later runs count it, and pass it over without an error.
func TestRedrive_OriginGoneMarked(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redrivegone")
	dlqTopic := topic + ".dlq"
	brokers := MustStartCluster(t, 1, []string{topic, dlqTopic}).ListenAddrs()
	origin := func(off string) map[string]string {
		return map[string]string{
			kafka.HeaderDLQKind: "permanent", kafka.HeaderDLQReason: "unknown event type",
			kafka.HeaderDLQOriginalTopic: topic, kafka.HeaderDLQOriginalPartition: "0", kafka.HeaderDLQOriginalOffset: off,
		}
	}
	mustPublishAt(t, brokers, dlqTopic, 0, redriveOriginalTime, origin("3"), "SHP-1", "poison")
	gone := origin("99")
	gone[kafka.HeaderDLQValueDropped] = "4096"
	mustPublishAt(t, brokers, dlqTopic, 0, redriveOriginalTime, gone, "SHP-2", "")
	mustPublishAt(t, brokers, dlqTopic, 0, redriveOriginalTime, origin("5"), "SHP-3", "poison")

	cfg := kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kafka.Redrive(ctx, cfg)
	if !errors.Is(err, kafka.ErrRedriveOriginGone) || !strings.Contains(err.Error(), "offset 99") {
		t.Fatalf("Redrive: %v, want ErrRedriveOriginGone naming offset 99", err)
	}
	if res.Redriven != 2 || res.Gone != 1 {
		t.Errorf("redrove %d, gone %d; want 2 and 1", res.Redriven, res.Gone)
	}
	if got := readTopic(t, brokers, topic); len(got) != 2 || string(got[0].Key) != "SHP-1" || string(got[1].Key) != "SHP-3" {
		t.Errorf("topic holds %d records, want SHP-1 and SHP-3", len(got))
	}
	res = mustRedrive(t, cfg)
	if res.Redriven != 0 || res.Gone != 1 || res.AlreadyRedriven != 2 {
		t.Errorf("the next run redrove %d, gone %d, already redriven %d; want 0, 1, 2", res.Redriven, res.Gone, res.AlreadyRedriven)
	}
}

// A record that carries a marker's header when it is dead-lettered is a
// dead letter like any other: the worker drops the header, and the record
// is redriven, not taken for a marker.
func TestRedrive_MarkerHeaderOnARecordIsNoMarker(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "redriveforged")
	dlqTopic := topic + ".dlq"
	brokers := MustStartCluster(t, 1, []string{topic, dlqTopic}).ListenAddrs()
	mustPublishAt(t, brokers, topic, 0, redriveOriginalTime, map[string]string{kafka.HeaderDLQRedriven: kafka.MarkerRedriven},
		"SHP-1", "poison-permanent")
	dlq := mustDeadLetterPoison(t, brokers, topic, map[int32]int64{0: 1}, 1)
	if v, ok := header(dlq[0], kafka.HeaderDLQRedriven); ok {
		t.Errorf("the dead letter carries %s=%q", kafka.HeaderDLQRedriven, v)
	}
	res := mustRedrive(t, kafka.RedriveConfig{Config: kafka.Config{Brokers: brokers, Topic: topic, DLQTopic: dlqTopic}})
	if res.Read != 1 || res.Redriven != 1 {
		t.Errorf("read %d, redrove %d; want 1 and 1", res.Read, res.Redriven)
	}
}
