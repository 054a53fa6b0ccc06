package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// letter is one dead letter as the sink received it.
type letter struct {
	rec    ports.Record
	kind   ports.Kind
	reason string
}

// memorySink keeps dead letters in memory; refuse, when set, fails a write.
type memorySink struct {
	mu       sync.Mutex
	letters  []letter
	attempts int
	refuse   func(attempt int) error
}

func (s *memorySink) DeadLetter(_ context.Context, rec ports.Record, kind ports.Kind, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.refuse != nil {
		if err := s.refuse(s.attempts); err != nil {
			return err
		}
	}
	s.letters = append(s.letters, letter{rec, kind, reason})
	return nil
}

func (s *memorySink) written() []letter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]letter(nil), s.letters...)
}

// counts is a policy.Metrics that counts.
type counts struct {
	mu                          sync.Mutex
	deadLettered, panics, retry map[ports.Kind]int
}

func newCounts() *counts {
	return &counts{deadLettered: map[ports.Kind]int{}, panics: map[ports.Kind]int{}, retry: map[ports.Kind]int{}}
}

func (c *counts) RecordDeadLettered(_ string, k ports.Kind) { c.add(c.deadLettered, k) }
func (c *counts) HandlerPanicked(string)                    { c.add(c.panics, ports.Permanent) }
func (c *counts) RecordRetried(_ string, k ports.Kind)      { c.add(c.retry, k) }

func (c *counts) add(m map[ports.Kind]int, k ports.Kind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m[k]++
}

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), `"msg":"`+msg+`"`)
}

// lines returns the logged lines whose msg is msg, decoded.
func (l *logBuffer) lines(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func testConfig() (policy.Config, *counts, *logBuffer) {
	m, logs := newCounts(), &logBuffer{}
	return policy.Config{
		MaxRecordBytes:      100,
		RetryMaxAttempts:    3,
		RetryInitialBackoff: time.Millisecond,
		RetryMaxBackoff:     2 * time.Millisecond,
		Logger:              slog.New(slog.NewJSONHandler(logs, nil)),
		Metrics:             m,
	}, m, logs
}

// chain is the worker's chain around h, in the worker's order.
func chain(cfg policy.Config, sink ports.DeadLetterSink, h ports.HandlerFunc) ports.Handler {
	return policy.Chain(h,
		policy.DeadLetter(sink, cfg),
		policy.MaxBytes(cfg),
		policy.Recover(cfg),
		policy.Retry(cfg),
	)
}

var rec = ports.Record{Topic: "shipment-events", Partition: 2, Offset: 7, Key: []byte("SHP-1"), Value: []byte(`{}`),
	Headers: []ports.Header{{Key: "traceparent", Value: []byte("00-abc")}}}

func TestRecover(t *testing.T) {
	t.Parallel()
	cfg, m, logs := testConfig()
	sink := &memorySink{}
	err := chain(cfg, sink, func(context.Context, ports.Record) error { panic("boom") }).Handle(context.Background(), rec)
	if err != nil {
		t.Fatalf("Handle = %v, want nil: a panic is dead-lettered, which finishes the record", err)
	}
	got := sink.written()
	if len(got) != 1 || got[0].kind != ports.Permanent || got[0].reason != "panic: boom" {
		t.Fatalf("dead letters = %+v, want one Permanent with reason %q", got, "panic: boom")
	}
	if m.panics[ports.Permanent] != 1 || m.deadLettered[ports.Permanent] != 1 {
		t.Errorf("panics %d, dead letters %d; want 1 and 1", m.panics[ports.Permanent], m.deadLettered[ports.Permanent])
	}
	if logs.count("handler_panicked") != 1 {
		t.Error("no handler_panicked log")
	}
	if m.retry[ports.Retryable] != 0 {
		t.Error("a panic was retried")
	}
}

func TestMaxBytes(t *testing.T) {
	t.Parallel()
	cfg, _, _ := testConfig()
	sink := &memorySink{}
	handled := 0
	big := rec
	big.Value = make([]byte, cfg.MaxRecordBytes+1)
	h := chain(cfg, sink, func(context.Context, ports.Record) error { handled++; return nil })
	if err := h.Handle(context.Background(), big); err != nil {
		t.Fatalf("Handle = %v", err)
	}
	got := sink.written()
	if len(got) != 1 || got[0].kind != ports.Permanent || !strings.Contains(got[0].reason, "too large") {
		t.Fatalf("dead letters = %+v, want one Permanent saying too large", got)
	}
	if handled != 0 {
		t.Errorf("the oversized record was handled %d times", handled)
	}
	// At the limit it is handled.
	at := rec
	at.Value = make([]byte, cfg.MaxRecordBytes)
	if err := h.Handle(context.Background(), at); err != nil || handled != 1 || len(sink.written()) != 1 {
		t.Errorf("record at the limit: err %v, handled %d, dead letters %d", err, handled, len(sink.written()))
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	t.Run("RetryableExhaustsTheBudget", func(t *testing.T) {
		t.Parallel()
		cfg, m, logs := testConfig()
		sink := &memorySink{}
		calls := 0
		err := chain(cfg, sink, func(context.Context, ports.Record) error {
			calls++
			return errors.New("twilio: 503")
		}).Handle(context.Background(), rec)
		if err != nil {
			t.Fatalf("Handle = %v", err)
		}
		got := sink.written()
		if calls != cfg.RetryMaxAttempts || len(got) != 1 || got[0].kind != ports.Retryable ||
			got[0].reason != "retries exhausted after 3 attempts: twilio: 503" {
			t.Fatalf("%d calls, dead letters %+v; want %d calls and one Retryable dead letter saying retries exhausted", calls, got, cfg.RetryMaxAttempts)
		}
		if m.retry[ports.Retryable] != 2 || logs.count("record_retry_scheduled") != 2 {
			t.Errorf("%d retries counted, %d logged; want 2", m.retry[ports.Retryable], logs.count("record_retry_scheduled"))
		}
	})
	// A record waiting for a dependency or for its sender's pace is
	// retried for as long as it takes, counted under its own kind only.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"UnavailableNeverExhaustsTheBudget", ports.MarkUnavailable(errors.New("redis down"))},
		{"PacedNeverExhaustsTheBudget", ports.MarkPaced(errors.New("rate limited: no turn of sender +15550001111"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, m, _ := testConfig()
			sink := &memorySink{}
			calls := 0
			err := chain(cfg, sink, func(context.Context, ports.Record) error {
				calls++
				if calls <= 3*cfg.RetryMaxAttempts {
					return tc.err
				}
				return nil
			}).Handle(context.Background(), rec)
			if err != nil || len(sink.written()) != 0 || calls != 3*cfg.RetryMaxAttempts+1 {
				t.Fatalf("err %v, %d dead letters, %d calls; want nil, none, %d", err, len(sink.written()), calls, 3*cfg.RetryMaxAttempts+1)
			}
			kind := ports.KindOf(tc.err)
			if m.retry[kind] != 3*cfg.RetryMaxAttempts || len(m.retry) != 1 {
				t.Errorf("retries counted by kind %v, want %d %v only", m.retry, 3*cfg.RetryMaxAttempts, kind)
			}
		})
	}
	t.Run("UnavailableDoesNotSpendTheRetryableBudget", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		sink := &memorySink{}
		calls := 0
		// Retryable, then many Unavailable, then Retryable again, then
		// success: two Retryable failures stay under a budget of three.
		err := chain(cfg, sink, func(context.Context, ports.Record) error {
			calls++
			switch {
			case calls == 1 || calls == 10:
				return errors.New("smtp: 421")
			case calls < 10:
				return ports.MarkUnavailable(errors.New("redis down"))
			}
			return nil
		}).Handle(context.Background(), rec)
		if err != nil || len(sink.written()) != 0 || calls != 11 {
			t.Fatalf("err %v, %d dead letters, %d calls; want nil, none, 11", err, len(sink.written()), calls)
		}
	})
	t.Run("PacedWaitsTheFirstBackoffAndSpendsNothing", func(t *testing.T) {
		t.Parallel()
		cfg, _, logs := testConfig()
		cfg.RetryMaxBackoff = time.Second
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		sink := &memorySink{}
		calls := 0
		// Retryable, Unavailable, many Paced, Retryable again, then
		// success: two Retryable failures stay under a budget of three,
		// the paced retries wait the first step's backoff whatever came
		// before, and the last Retryable one backs off at the third step,
		// as if the paced attempts had not been.
		err := chain(cfg, sink, func(context.Context, ports.Record) error {
			calls++
			switch {
			case calls == 1 || calls == 23:
				return errors.New("twilio: 503")
			case calls == 2:
				return ports.MarkUnavailable(errors.New("redis down"))
			case calls < 23:
				return ports.MarkPaced(errors.New("rate limited: no turn of sender +15550001111"))
			}
			return nil
		}).Handle(context.Background(), rec)
		if err != nil || len(sink.written()) != 0 || calls != 24 {
			t.Fatalf("err %v, %d dead letters, %d calls; want nil, none, 24", err, len(sink.written()), calls)
		}
		type retry struct {
			kind    string
			backoff time.Duration
		}
		var retries []retry
		for _, l := range logs.lines("record_retry_scheduled") {
			retries = append(retries, retry{fmt.Sprint(l["kind"]), time.Duration(l["backoff"].(float64))})
		}
		if len(retries) != 23 {
			t.Fatalf("%d retries logged, want 23: %v", len(retries), retries)
		}
		in := func(i int, kind string, lo, hi time.Duration) {
			if r := retries[i]; r.kind != kind || r.backoff < lo || r.backoff > hi {
				t.Errorf("retry %d: %s after %v, want %s with a backoff in [%v, %v]; all: %v", i+1, r.kind, r.backoff, kind, lo, hi, retries)
			}
		}
		ms := time.Millisecond
		in(0, "retryable", ms/2, ms)
		in(1, "unavailable", ms, 2*ms)
		for i := 2; i < 22; i++ {
			in(i, "paced", ms/2, ms)
		}
		in(22, "retryable", 2*ms, 4*ms)
		// A wait for the pace is the normal course of a backlog: logged at
		// debug, the others at warn.
		for i, l := range logs.lines("record_retry_scheduled") {
			want := "WARN"
			if l["kind"] == "paced" {
				want = "DEBUG"
			}
			if l["level"] != want {
				t.Errorf("retry %d (%v) logged at %v, want %s", i+1, l["kind"], l["level"], want)
			}
		}
	})
	t.Run("PacedWaitsWhatItCarriesAndSpendsNothing", func(t *testing.T) {
		// A record due again in 30 ms (a send of unknown outcome whose
		// next ask is then), three times, then done: three retries of the
		// first step's backoff plus the wait, no budget spent (a budget
		// of one), nothing dead-lettered, and the source's stopping ends
		// the wait.
		t.Parallel()
		cfg, _, logs := testConfig()
		cfg.RetryMaxAttempts = 1
		cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		sink := &memorySink{}
		const due = 30 * time.Millisecond
		calls := 0
		var at []time.Time
		err := chain(cfg, sink, func(context.Context, ports.Record) error {
			calls++
			at = append(at, time.Now())
			if calls <= 3 {
				return ports.MarkPacedFor(errors.New("reconcile sms:e1: asked next once the list may show the send"), due)
			}
			return nil
		}).Handle(context.Background(), rec)
		if err != nil || len(sink.written()) != 0 || calls != 4 {
			t.Fatalf("err %v, %d dead letters, %d calls; want nil, none, 4", err, len(sink.written()), calls)
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < due {
				t.Errorf("attempt %d came %v after the one before, want at least the %v it was due in", i+1, gap, due)
			}
		}
		for _, l := range logs.lines("record_retry_scheduled") {
			if l["kind"] != "paced" || time.Duration(l["backoff"].(float64)) < due {
				t.Errorf("retry logged %v after %v, want paced after at least %v", l["kind"], time.Duration(l["backoff"].(float64)), due)
			}
		}

		stopping := make(chan struct{})
		ctx := ports.WithDelivery(context.Background(), ports.Delivery{Stopping: stopping})
		time.AfterFunc(20*time.Millisecond, func() { close(stopping) })
		err = chain(cfg, sink, func(context.Context, ports.Record) error {
			return ports.MarkPacedFor(errors.New("reconcile sms:e1: asked next in an hour"), time.Hour)
		}).Handle(ctx, rec)
		if !errors.Is(err, ports.ErrStopping) || len(sink.written()) != 0 {
			t.Fatalf("a record due in an hour, the source stopping: %v, %d dead letters; want ErrStopping, none", err, len(sink.written()))
		}
	})
	t.Run("PermanentIsNotRetried", func(t *testing.T) {
		t.Parallel()
		cfg, m, _ := testConfig()
		sink := &memorySink{}
		calls := 0
		err := chain(cfg, sink, func(context.Context, ports.Record) error {
			calls++
			return ports.MarkPermanent(errors.New("unknown event type"))
		}).Handle(context.Background(), rec)
		got := sink.written()
		if err != nil || calls != 1 || len(got) != 1 || got[0].kind != ports.Permanent || got[0].reason != "unknown event type" {
			t.Fatalf("err %v, %d calls, dead letters %+v; want one call and one Permanent dead letter", err, calls, got)
		}
		if m.retry[ports.Retryable]+m.retry[ports.Permanent] != 0 {
			t.Error("a permanent failure was retried")
		}
	})
	t.Run("DeliveryIDSharedAcrossAttempts", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		sink := &memorySink{}
		var seen []uint64
		sent := 0
		delivered := map[uint64]bool{} // what a handler remembers by DeliveryID
		err := chain(cfg, sink, func(_ context.Context, r ports.Record) error {
			seen = append(seen, r.DeliveryID)
			if !delivered[r.DeliveryID] {
				sent++
				delivered[r.DeliveryID] = true
			}
			if len(seen) < 3 {
				return errors.New("email: 421")
			}
			return nil
		}).Handle(context.Background(), rec)
		if err != nil || len(seen) != 3 {
			t.Fatalf("err %v after %d attempts", err, len(seen))
		}
		if seen[0] == 0 || seen[1] != seen[0] || seen[2] != seen[0] {
			t.Errorf("attempts saw DeliveryIDs %d %d %d, want one shared, not zero", seen[0], seen[1], seen[2])
		}
		if sent != 1 {
			t.Errorf("the SMS was sent %d times across attempts, want 1", sent)
		}
	})
	t.Run("DeliveryIDOnePerRecordTheSourcesKept", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		var seen []uint64
		h := chain(cfg, &memorySink{}, func(_ context.Context, r ports.Record) error {
			seen = append(seen, r.DeliveryID)
			return nil
		})
		given := rec
		given.DeliveryID = ports.NewDeliveryID()
		for _, r := range []ports.Record{rec, rec, given} {
			if err := h.Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		if seen[0] == 0 || seen[1] == 0 || seen[0] == seen[1] {
			t.Errorf("two deliveries without an id got %d and %d, want two distinct ids", seen[0], seen[1])
		}
		if seen[2] != given.DeliveryID {
			t.Errorf("a delivery the source named %d was handled as %d", given.DeliveryID, seen[2])
		}
	})
	// The delivery Retry named ends as it returns, its retries spent: a
	// handler learns it may forget what it kept for the delivery. One the
	// source named is the source's to end.
	t.Run("DeliveryItNamedEndsWithIt", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		sourceEnded := make(chan struct{})
		var ends []<-chan struct{}
		h := chain(cfg, &memorySink{}, func(ctx context.Context, _ ports.Record) error {
			ended := ports.DeliveryOf(ctx).Ended
			select {
			case <-ended:
				t.Error("an attempt ran after its delivery ended")
			default:
			}
			ends = append(ends, ended)
			return errors.New("twilio: 503")
		})
		if err := h.Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		given := rec
		given.DeliveryID = ports.NewDeliveryID()
		if err := h.Handle(ports.WithDelivery(context.Background(), ports.Delivery{Ended: sourceEnded}), given); err != nil {
			t.Fatal(err)
		}
		if n := cfg.RetryMaxAttempts; len(ends) != 2*n || ends[0] == nil || ends[n-1] != ends[0] || ends[n] != sourceEnded {
			t.Fatalf("attempts saw Ended %v; want one of Retry's own for the first record, the source's for the second", ends)
		}
		select {
		case <-ends[0]:
		default:
			t.Error("the delivery Retry named did not end when Retry returned")
		}
	})
	t.Run("StoppingEndsTheBackoff", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		cfg.RetryInitialBackoff, cfg.RetryMaxBackoff = time.Hour, time.Hour
		sink := &memorySink{}
		stopping := make(chan struct{})
		ctx := ports.WithDelivery(context.Background(), ports.Delivery{Stopping: stopping})
		calls := make(chan struct{}, 1)
		done := make(chan error, 1)
		go func() {
			done <- chain(cfg, sink, func(context.Context, ports.Record) error {
				calls <- struct{}{}
				return errors.New("twilio: 503")
			}).Handle(ctx, rec)
		}()
		<-calls
		close(stopping)
		select {
		case err := <-done:
			if !errors.Is(err, ports.ErrStopping) {
				t.Errorf("Handle = %v, want ErrStopping", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the backoff did not end when the source stopped")
		}
		if n := len(sink.written()); n != 0 {
			t.Errorf("%d dead letters for a record given up at stopping, want 0: it is replayed", n)
		}
	})
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	t.Run("KeepsTheRecord", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		sink := &memorySink{}
		if err := chain(cfg, sink, func(context.Context, ports.Record) error {
			return ports.MarkPermanent(errors.New("bad phone"))
		}).Handle(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		got := sink.written()
		if len(got) != 1 || got[0].rec.Offset != rec.Offset || string(got[0].rec.Value) != string(rec.Value) ||
			len(got[0].rec.Headers) != 1 || got[0].rec.Headers[0].Key != "traceparent" {
			t.Fatalf("dead letters = %+v, want the record with its value and headers", got)
		}
	})
	t.Run("RetriedUntilWritten", func(t *testing.T) {
		t.Parallel()
		cfg, m, logs := testConfig()
		sink := &memorySink{refuse: func(attempt int) error {
			if attempt <= 10 {
				return fmt.Errorf("dlq write %d refused", attempt)
			}
			return nil
		}}
		if err := chain(cfg, sink, func(context.Context, ports.Record) error {
			return ports.MarkPermanent(errors.New("bad phone"))
		}).Handle(context.Background(), rec); err != nil {
			t.Fatalf("Handle = %v, want nil once written", err)
		}
		if n := len(sink.written()); n != 1 || m.deadLettered[ports.Permanent] != 1 {
			t.Errorf("%d written, %d counted; want 1 and 1", n, m.deadLettered[ports.Permanent])
		}
		// Ten failures within a few milliseconds: one log, rate-limited.
		if got := logs.count("dead_letter_failed"); got != 1 {
			t.Errorf("%d dead_letter_failed logs, want 1", got)
		}
	})
	t.Run("StoppingWhileFailingLeavesTheRecord", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		stopping := make(chan struct{})
		sink := &memorySink{refuse: func(attempt int) error {
			if attempt == 3 {
				close(stopping)
			}
			return errors.New("dlq down")
		}}
		ctx := ports.WithDelivery(context.Background(), ports.Delivery{Stopping: stopping})
		err := chain(cfg, sink, func(context.Context, ports.Record) error {
			return ports.MarkPermanent(errors.New("bad phone"))
		}).Handle(ctx, rec)
		if !errors.Is(err, ports.ErrStopping) {
			t.Errorf("Handle = %v, want ErrStopping: the record is not finished", err)
		}
	})
	t.Run("StoppingSourcePassesThrough", func(t *testing.T) {
		t.Parallel()
		cfg, _, _ := testConfig()
		sink := &memorySink{}
		// What the source's bound on handler calls returns once it stops.
		err := chain(cfg, sink, func(context.Context, ports.Record) error { return ports.ErrStopping }).Handle(context.Background(), rec)
		if !errors.Is(err, ports.ErrStopping) || len(sink.written()) != 0 {
			t.Errorf("Handle = %v with %d dead letters, want ErrStopping and none", err, len(sink.written()))
		}
	})
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	err := policy.Config{RetryMaxAttempts: -1, MaxRecordBytes: -1, RetryInitialBackoff: time.Second, RetryMaxBackoff: time.Millisecond}.Validate()
	if !errors.Is(err, policy.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"RetryMaxAttempts", "MaxRecordBytes", "RetryMaxBackoff"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if err := (policy.Config{}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
