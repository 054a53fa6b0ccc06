package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// distinctKeys gives every record its own key, so nothing orders them.
func distinctKeys(i int) string { return fmt.Sprintf("SHP-%d", i) }

// oneKey gives every record the same key, so they are handled in order.
func oneKey(int) string { return "SHP-1" }

func TestNewConsumer(t *testing.T) {
	t.Parallel()
	t.Run("ErrInvalidConfigNamesEveryField", func(t *testing.T) {
		_, err := kafka.NewConsumer(kafka.Config{SASLMechanism: "GSSAPI", RetryInitialBackoff: -1})
		if !errors.Is(err, kafka.ErrInvalidConfig) {
			t.Fatalf("err = %v, want ErrInvalidConfig", err)
		}
		for _, field := range []string{"Brokers", "Topic", "GroupID", "SASLMechanism", "RetryInitialBackoff"} {
			if !strings.Contains(err.Error(), field) {
				t.Errorf("error %q does not name %s", err, field)
			}
		}
	})
	t.Run("IllegalDLQTopic", func(t *testing.T) {
		// A dead letter topic the broker refuses would fail every dead
		// letter write; it is caught at start instead.
		for _, name := range []string{"bad topic", "..", strings.Repeat("d", 250), "dlq/x"} {
			_, err := kafka.NewConsumer(kafka.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", GroupID: "g", DLQTopic: name})
			if !errors.Is(err, kafka.ErrInvalidConfig) || !strings.Contains(err.Error(), "DLQTopic") {
				t.Errorf("DLQTopic %q: err = %v, want ErrInvalidConfig naming DLQTopic", name, err)
			}
		}
	})
	t.Run("MembershipSettings", func(t *testing.T) {
		for _, tt := range []struct {
			field string
			cfg   kafka.Config
		}{
			{"RebalanceStrategy", kafka.Config{RebalanceStrategy: "sticky"}},
			{"RebalanceStrategy", kafka.Config{RebalanceStrategy: "range,cooperative-sticky"}},
			{"GroupInstanceID", kafka.Config{GroupInstanceID: "worker/0"}},
			{"GroupInstanceID", kafka.Config{GroupInstanceID: ".."}},
			{"LagInterval", kafka.Config{LagInterval: -time.Second}},
		} {
			tt.cfg.Brokers, tt.cfg.Topic, tt.cfg.GroupID = []string{"127.0.0.1:1"}, "t", "g"
			_, err := kafka.NewConsumer(tt.cfg)
			if !errors.Is(err, kafka.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("%+v: err = %v, want ErrInvalidConfig naming %s", tt.cfg, err, tt.field)
			}
		}
		for _, s := range []string{"", kafka.StrategyCooperativeSticky, kafka.StrategyRange, kafka.StrategyCooperativeStickyRange} {
			if _, err := kafka.NewConsumer(kafka.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", GroupID: "g", RebalanceStrategy: s, GroupInstanceID: "notification-worker-0"}); err != nil {
				t.Errorf("RebalanceStrategy %q: %v", s, err)
			}
		}
	})
	t.Run("OK", func(t *testing.T) {
		c, err := kafka.NewConsumer(kafka.Config{Brokers: []string{"127.0.0.1:1"}, Topic: "t", GroupID: "g"})
		if err != nil {
			t.Fatalf("NewConsumer: %v", err)
		}
		if c.Ready() {
			t.Error("Ready before Run")
		}
	})
}

// Point 1: an offset is committed only after its record is handled, even
// when later records finished first. Every commit request the broker sees is
// checked, not only the last.
func TestConsumer_CommitsOnlyHandledRecords(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "commit")
	brokers, obs := MustStartObservedBroker(t, 2, topic)
	const n, blocked = 20, 5
	keys0 := keysOn(t, topic, 0, 2, n)
	keys1 := keysOn(t, topic, 1, 2, 3)
	MustPublish(t, brokers, topic, numbered(n, "v", func(i int) string { return keys0[i] })...)

	cfg, _ := testConfig(brokers, topic)
	release := make(chan struct{})
	log := newHandledLog()
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Partition == 0 && rec.Offset == blocked {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		log.handled(rec)
		return nil
	}))

	wait.For(t, 10*time.Second, "every record but the held one handled", func() bool { return log.count() == n-1 })
	// Sarama commits only partitions with new marks, so drive commit cycles
	// through partition 1: each record there is handled and committed,
	// and a wrongly marked partition 0 would ride along.
	for i, key := range keys1 {
		MustPublish(t, brokers, topic, kafka.Message{Key: []byte(key), Value: []byte("p1")})
		wait.For(t, 10*time.Second, "partition 1 commit", func() bool {
			_, _, last := obs.snapshot(1)
			return last == int64(i+1)
		})
	}
	_, maxOff, last := obs.snapshot(0)
	if maxOff > blocked {
		t.Fatalf("a commit reached offset %d while record %d was unhandled", maxOff, blocked)
	}
	if last != blocked {
		t.Fatalf("last commit = %d, want %d (everything before the held record)", last, blocked)
	}
	if got := committedOffsets(t, brokers, cfg.GroupID, topic, 2)[0]; got != blocked {
		t.Fatalf("broker has committed %d, want %d", got, blocked)
	}

	close(release)
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: n, 1: int64(len(keys1))})
	rc.MustStop(t, 10*time.Second)
}

// Point 2: a retryable failure is retried, nothing at or past it is
// committed meanwhile, and a later attempt succeeds.
func TestConsumer_RetryableFailureRetried(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "retry")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	const n = 6
	MustPublish(t, brokers, topic, numbered(n, "v", distinctKeys)...)

	cfg, logs := testConfig(brokers, topic)
	cfg.RetryMaxAttempts = 5
	cfg.CommitInterval = 20 * time.Millisecond
	// Each wait spans several commit intervals, so a commit that should not
	// happen has every chance to.
	cfg.RetryInitialBackoff = 150 * time.Millisecond
	cfg.RetryMaxBackoff = 150 * time.Millisecond
	log := newHandledLog()
	var committedDuringRetry atomic.Int64
	committedDuringRetry.Store(-2)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		attempt := log.call(rec)
		if rec.Offset == 0 && attempt < 3 {
			return errors.New("provider said 503")
		}
		if rec.Offset == 0 {
			committedDuringRetry.Store(committedOffsets(t, brokers, cfg.GroupID, topic, 1)[0])
		}
		log.handled(rec)
		return nil
	}))

	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: n})
	rc.MustStop(t, 10*time.Second)
	if got := committedDuringRetry.Load(); got != -1 {
		t.Errorf("while record 0 was retried the committed offset was %d, want none (-1)", got)
	}
	if got := log.callsFor(0); got != 3 {
		t.Errorf("record 0 was tried %d times, want 3", got)
	}
	if dlq := readTopic(t, brokers, cfg.DLQTopic); len(dlq) != 0 {
		t.Errorf("%d records dead-lettered, want none", len(dlq))
	}
	if !strings.Contains(logs.String(), `"msg":"record_retry_scheduled"`) {
		t.Error("no record_retry_scheduled log")
	}
}

// Point 3: poison records go to the dead letter topic with their reason and
// origin, unchanged, and the partition moves on.
func TestConsumer_PoisonRecordsDeadLettered(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "poison")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	const n = 10
	msgs := numbered(n, "secret-value", func(i int) string { return fmt.Sprintf("SHP-%d", i%3) })
	for i := range msgs {
		msgs[i].Headers = map[string]string{"trace-id": fmt.Sprintf("trace-%d", i)}
	}
	MustPublish(t, brokers, topic, msgs...)

	cfg, logs := testConfig(brokers, topic)
	metrics := newFakeMetrics()
	cfg.Metrics = metrics
	log := newHandledLog()
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 3 || rec.Offset == 7 {
			return ports.MarkPermanent(fmt.Errorf("decode event: unexpected end of JSON input"))
		}
		log.handled(rec)
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: n})
	rc.MustStop(t, 10*time.Second)

	t.Run("DLQHoldsThePoisonRecords", func(t *testing.T) {
		dlq := readTopic(t, brokers, cfg.DLQTopic)
		if len(dlq) != 2 {
			t.Fatalf("%d records in %s, want 2", len(dlq), cfg.DLQTopic)
		}
		seen := map[string]bool{}
		for _, m := range dlq {
			off, _ := header(m, kafka.HeaderDLQOriginalOffset)
			seen[off] = true
			i := map[string]int{"3": 3, "7": 7}[off]
			if string(m.Key) != string(msgs[i].Key) || string(m.Value) != string(msgs[i].Value) {
				t.Errorf("offset %s: key/value %q/%q, want the original %q/%q", off, m.Key, m.Value, msgs[i].Key, msgs[i].Value)
			}
			want := map[string]string{
				kafka.HeaderDLQReason:            "decode event: unexpected end of JSON input",
				kafka.HeaderDLQKind:              "permanent",
				kafka.HeaderDLQOriginalTopic:     topic,
				kafka.HeaderDLQOriginalPartition: "0",
				"trace-id":                       fmt.Sprintf("trace-%d", i),
			}
			for k, v := range want {
				if got, _ := header(m, k); got != v {
					t.Errorf("offset %s: header %s = %q, want %q", off, k, got, v)
				}
			}
		}
		if !seen["3"] || !seen["7"] {
			t.Errorf("dead-lettered offsets %v, want 3 and 7", seen)
		}
	})
	t.Run("PartitionMovedOn", func(t *testing.T) {
		got := log.offsets()
		for i := int64(0); i < n; i++ {
			if want := i != 3 && i != 7; got[i] != want {
				t.Errorf("offset %d handled = %v, want %v", i, got[i], want)
			}
		}
	})
	t.Run("ObservableInLogsAndMetrics", func(t *testing.T) {
		out := logs.String()
		if c := strings.Count(out, `"msg":"event_dead_lettered"`); c != 2 {
			t.Errorf("%d event_dead_lettered logs, want 2", c)
		}
		if strings.Contains(out, "secret-value") {
			t.Error("a record value was logged")
		}
		metrics.mu.Lock()
		defer metrics.mu.Unlock()
		if metrics.deadLettered[ports.Permanent] != 2 {
			t.Errorf("RecordDeadLettered(permanent) = %d, want 2", metrics.deadLettered[ports.Permanent])
		}
		if lag, ok := metrics.lag[0]; !ok || lag < 0 {
			t.Errorf("ConsumerLag for partition 0 = %d (reported %v), want >= 0", lag, ok)
		}
	})
}

// Point 4: a retryable error past the budget is dead-lettered; an
// Unavailable one never is, however long it lasts.
func TestConsumer_RetryBudget(t *testing.T) {
	t.Parallel()
	t.Run("RetriesExhaustedDeadLettered", func(t *testing.T) {
		t.Parallel()
		topic := uniqueName(t, "exhausted")
		brokers := MustStartEmbedded(t, 1, topic).Brokers()
		MustPublish(t, brokers, topic, numbered(4, "v", distinctKeys)...)
		cfg, _ := testConfig(brokers, topic)
		cfg.RetryMaxAttempts = 3
		metrics := newFakeMetrics()
		cfg.Metrics = metrics
		log := newHandledLog()
		rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			log.call(rec)
			if rec.Offset == 2 {
				return errors.New("smtp: 451 try again later")
			}
			return nil
		}))
		waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 4})
		rc.MustStop(t, 10*time.Second)

		if got := log.callsFor(2); got != 3 {
			t.Errorf("record 2 tried %d times, want 3", got)
		}
		dlq := readTopic(t, brokers, cfg.DLQTopic)
		if len(dlq) != 1 {
			t.Fatalf("%d records dead-lettered, want 1", len(dlq))
		}
		reason, _ := header(dlq[0], kafka.HeaderDLQReason)
		if want := "retries exhausted after 3 attempts: smtp: 451 try again later"; reason != want {
			t.Errorf("reason = %q, want %q", reason, want)
		}
		if kind, _ := header(dlq[0], kafka.HeaderDLQKind); kind != "retryable" {
			t.Errorf("kind = %q, want retryable", kind)
		}
		metrics.mu.Lock()
		defer metrics.mu.Unlock()
		if metrics.deadLettered[ports.Retryable] != 1 {
			t.Errorf("RecordDeadLettered(retryable) = %d, want 1", metrics.deadLettered[ports.Retryable])
		}
	})
	t.Run("UnavailableNeverDeadLettered", func(t *testing.T) {
		t.Parallel()
		topic := uniqueName(t, "unavailable")
		brokers := MustStartEmbedded(t, 1, topic).Brokers()
		MustPublish(t, brokers, topic, numbered(4, "v", distinctKeys)...)
		cfg, _ := testConfig(brokers, topic)
		cfg.RetryMaxAttempts = 2
		const outage = 8 // attempts, four times the retry budget
		log := newHandledLog()
		rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			attempt := log.call(rec)
			if rec.Offset == 1 && attempt <= outage {
				return ports.MarkUnavailable(errors.New("idempotency store: connection refused"))
			}
			if rec.Offset == 1 && attempt == outage+1 {
				// One retryable failure after the outage: the outage must
				// not have used up the retry budget.
				return errors.New("provider timeout")
			}
			log.handled(rec)
			return nil
		}))
		waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 4})
		rc.MustStop(t, 10*time.Second)
		if got := log.callsFor(1); got != outage+2 {
			t.Errorf("record 1 tried %d times, want %d", got, outage+2)
		}
		if !log.offsets()[1] {
			t.Error("record 1 never handled")
		}
		if dlq := readTopic(t, brokers, cfg.DLQTopic); len(dlq) != 0 {
			t.Errorf("%d records dead-lettered, want none", len(dlq))
		}
	})
}

// Point 5: cancelling Run commits exactly what was handled, and a fresh
// member of the group resumes at the first unhandled record.
func TestConsumer_CancelCommitsExactlyHandled(t *testing.T) {
	t.Parallel()
	const n, held = 10, 5

	// runUntilHeld starts a strictly sequential consumer whose handler holds
	// record `held`; it returns once that record is in hand.
	type heldRun struct {
		rc      *runningConsumer
		log     *handledLog
		release chan struct{}
		ctxErr  chan error // the handler's ctx.Err() when record held returns
	}
	runUntilHeld := func(t *testing.T, cfg testSetup) *heldRun {
		hr := &heldRun{log: newHandledLog(), release: make(chan struct{}), ctxErr: make(chan error, 1)}
		entered := make(chan struct{})
		hr.rc = MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			if rec.Offset == held {
				close(entered)
				select {
				case <-hr.release:
				case <-ctx.Done():
				}
				hr.ctxErr <- ctx.Err()
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			hr.log.handled(rec)
			return nil
		}))
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatal("record 5 never reached the handler")
		}
		return hr
	}
	// firstOffsetOfFreshMember starts a new consumer in the group and
	// returns the first offset it is given.
	firstOffsetOfFreshMember := func(t *testing.T, cfg testSetup) int64 {
		first := make(chan int64, 1)
		rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			select {
			case first <- rec.Offset:
			default:
			}
			return nil
		}))
		defer rc.MustStop(t, 10*time.Second)
		select {
		case off := <-first:
			return off
		case <-time.After(10 * time.Second):
			t.Fatal("fresh member got no record")
			return -1
		}
	}

	t.Run("RecordInHandFinishesAndIsCommitted", func(t *testing.T) {
		t.Parallel()
		topic := uniqueName(t, "cancel")
		brokers := testBrokers(t, 1, topic)
		// One key, so records are handled strictly in offset order.
		MustPublish(t, brokers, topic, numbered(n, "v", oneKey)...)
		cfg, logs := testConfig(brokers, topic)
		cfg.MaxInFlight = 1
		cfg.CommitInterval = time.Hour // only the shutdown commit counts here

		hr := runUntilHeld(t, cfg)
		hr.rc.cancel()
		// Release only once the partition is stopping, so the record is
		// finished by the shutdown path and not before it.
		wait.For(t, 10*time.Second, "partition_stopping log", func() bool {
			return strings.Contains(logs.String(), `"msg":"partition_stopping"`)
		})
		close(hr.release)
		hr.rc.MustStop(t, 10*time.Second)
		if err := <-hr.ctxErr; err != nil {
			t.Errorf("the handler's ctx was cancelled (%v) although ShutdownTimeout had not passed", err)
		}
		got := hr.log.offsets()
		for i := int64(0); i < n; i++ {
			if want := i <= held; got[i] != want {
				t.Errorf("offset %d handled = %v, want %v", i, got[i], want)
			}
		}
		if c := committedOffsets(t, brokers, cfg.GroupID, topic, 1)[0]; c != held+1 {
			t.Fatalf("committed %d, want %d", c, held+1)
		}
		if first := firstOffsetOfFreshMember(t, cfg); first != held+1 {
			t.Errorf("fresh member started at %d, want %d", first, held+1)
		}
	})
	t.Run("RecordPastShutdownTimeoutIsReplayed", func(t *testing.T) {
		t.Parallel()
		topic := uniqueName(t, "cancel")
		brokers := testBrokers(t, 1, topic)
		// One key, so records are handled strictly in offset order.
		MustPublish(t, brokers, topic, numbered(n, "v", oneKey)...)
		cfg, _ := testConfig(brokers, topic)
		cfg.MaxInFlight = 1
		cfg.CommitInterval = time.Hour
		cfg.ShutdownTimeout = 300 * time.Millisecond

		hr := runUntilHeld(t, cfg)
		hr.rc.MustStop(t, 10*time.Second) // never released: the timeout cancels it
		if err := <-hr.ctxErr; !errors.Is(err, context.Canceled) {
			t.Errorf("handler ctx error = %v, want Canceled after ShutdownTimeout", err)
		}
		if c := committedOffsets(t, brokers, cfg.GroupID, topic, 1)[0]; c != held {
			t.Fatalf("committed %d, want %d", c, held)
		}
		if first := firstOffsetOfFreshMember(t, cfg); first != held {
			t.Errorf("fresh member started at %d, want %d", first, held)
		}
	})
}

// Point 9: a panicking handler dead-letters the record and the consumer
// lives on.
func TestConsumer_PanicDeadLettered(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "panic")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	const n = 5
	MustPublish(t, brokers, topic, numbered(n, "v", distinctKeys)...)
	cfg, logs := testConfig(brokers, topic)
	metrics := newFakeMetrics()
	cfg.Metrics = metrics
	log := newHandledLog()
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 1 {
			var m map[string]int
			m["boom"]++ // nil map write: a real bug, not a panic(string)
		}
		log.handled(rec)
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: n})
	rc.MustStop(t, 10*time.Second)

	dlq := readTopic(t, brokers, cfg.DLQTopic)
	if len(dlq) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(dlq))
	}
	if reason, _ := header(dlq[0], kafka.HeaderDLQReason); !strings.HasPrefix(reason, "panic: ") || !strings.Contains(reason, "nil map") {
		t.Errorf("reason = %q, want panic: ...nil map...", reason)
	}
	if off, _ := header(dlq[0], kafka.HeaderDLQOriginalOffset); off != "1" {
		t.Errorf("original offset = %s, want 1", off)
	}
	if got := log.count(); got != n-1 {
		t.Errorf("%d records handled, want %d", got, n-1)
	}
	metrics.mu.Lock()
	panics := metrics.panics
	metrics.mu.Unlock()
	if panics != 1 {
		t.Errorf("HandlerPanicked called %d times, want 1", panics)
	}
	if !strings.Contains(logs.String(), `"msg":"handler_panicked"`) {
		t.Error("no handler_panicked log")
	}
}

// Point 10: a record over MaxRecordBytes goes to the dead letter topic
// without reaching the handler.
func TestConsumer_OversizedRecordDeadLettered(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "large")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()
	big := []byte(strings.Repeat("x", 300))
	MustPublish(t, brokers, topic,
		kafka.Message{Key: []byte("SHP-1"), Value: []byte("small")},
		kafka.Message{Key: []byte("SHP-1"), Value: big},
		kafka.Message{Key: []byte("SHP-1"), Value: []byte("small again")},
	)
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxRecordBytes = 100
	log := newHandledLog()
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		log.handled(rec)
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 3})
	rc.MustStop(t, 10*time.Second)

	if got := log.offsets(); len(got) != 2 || !got[0] || !got[2] {
		t.Errorf("handled offsets %v, want 0 and 2", got)
	}
	dlq := readTopic(t, brokers, cfg.DLQTopic)
	if len(dlq) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(dlq))
	}
	if string(dlq[0].Value) != string(big) {
		t.Error("dead-lettered value differs from the original")
	}
	if reason, _ := header(dlq[0], kafka.HeaderDLQReason); !strings.Contains(reason, "too large") {
		t.Errorf("reason = %q, want it to say too large", reason)
	}
}

func TestConsumer_Run(t *testing.T) {
	t.Parallel()
	t.Run("ErrNoBroker", func(t *testing.T) {
		t.Parallel()
		cfg, _ := testConfig([]string{"127.0.0.1:1"}, "t")
		c, err := kafka.NewConsumer(cfg.Config)
		if err != nil {
			t.Fatalf("NewConsumer: %v", err)
		}
		done := make(chan error, 1)
		go func() {
			done <- c.Run(context.Background(), ports.HandlerFunc(func(context.Context, ports.Record) error { return nil }))
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("Run without a broker returned nil")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run without a broker did not return")
		}
	})
	t.Run("KeylessRecordsHandled", func(t *testing.T) {
		t.Parallel()
		topic := uniqueName(t, "keyless")
		brokers := MustStartEmbedded(t, 1, topic).Brokers()
		msgs := numbered(5, "v", distinctKeys)
		for i := range msgs {
			msgs[i].Key = nil
		}
		MustPublish(t, brokers, topic, msgs...)
		cfg, _ := testConfig(brokers, topic)
		log := newHandledLog()
		rc := MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
			log.handled(rec)
			return nil
		}))
		waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 5})
		rc.MustStop(t, 10*time.Second)
		if got := log.count(); got != 5 {
			t.Errorf("%d records handled, want 5", got)
		}
	})
	t.Run("ReadyAndErrAlreadyRunning", func(t *testing.T) {
		t.Parallel()
		topic := uniqueName(t, "ready")
		brokers := MustStartEmbedded(t, 1, topic).Brokers()
		cfg, _ := testConfig(brokers, topic)
		h := ports.HandlerFunc(func(context.Context, ports.Record) error { return nil })
		rc := MustRun(t, cfg, h)
		wait.For(t, 10*time.Second, "Ready", rc.c.Ready)
		if err := rc.c.Run(context.Background(), h); !errors.Is(err, kafka.ErrAlreadyRunning) {
			t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
		}
		rc.MustStop(t, 10*time.Second)
		if rc.c.Ready() {
			t.Error("Ready after Run returned")
		}
	})
}
