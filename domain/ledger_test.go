package domain_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// errStoreDown is what a fake store answers while "Redis is down".
var errStoreDown = errors.New("dial tcp 127.0.0.1:6379: connection refused")

// storeDown makes every call of w's store fail, as a stopped Redis does,
// until up is cleared. The service writes owed records in the background,
// so the switch is an atomic, not a change of the fake's functions.
func (w *world) storeDown() (up func()) {
	var down atomic.Bool
	down.Store(true)
	w.store.ClaimFunc = func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
		if down.Load() {
			return ports.Claim{}, errStoreDown
		}
		return w.store.Store.Claim(ctx, key, token, digest, sender, ttl)
	}
	w.store.RecordFunc = func(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
		if down.Load() {
			return errStoreDown
		}
		return w.store.Store.Record(ctx, key, r, ttl)
	}
	w.store.ReleaseFunc = func(ctx context.Context, key, token string) error {
		if down.Load() {
			return errStoreDown
		}
		return w.store.Store.Release(ctx, key, token)
	}
	return func() { down.Store(false) }
}

// attempt handles rec once, as the event source does on each attempt.
func (w *world) attempt(t *testing.T, rec ports.Record) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.svc.Handle(ctx, rec)
}

// record is one record of the log, delivered once: its attempts share one
// DeliveryID.
func record(value string) ports.Record {
	return ports.Record{Topic: "shipment-events", Partition: 1, Offset: 7, Value: []byte(value), DeliveryID: ports.NewDeliveryID()}
}

// failFirst returns a FailFunc failing the first n sends with err.
func failFirst(n int32, err error) func(ports.Message) error {
	var calls atomic.Int32
	return func(ports.Message) error {
		if calls.Add(1) <= n {
			return err
		}
		return nil
	}
}

func TestService_OwnRetriesNeverResend(t *testing.T) {
	t.Run("StoreDownRetryResendsOnlyTheFailedChannel", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.storeDown()
		w.email.FailFunc = failFirst(3, errors.New("451 4.3.0 try again later"))
		rec := record(event("e1", "sms", "email"))
		for i := range 3 {
			if err := w.attempt(t, rec); ports.KindOf(err) != ports.Retryable {
				t.Fatalf("attempt %d: %v (kind %v), want a retryable error", i+1, err, ports.KindOf(err))
			}
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 4: %v", err)
		}
		if s, e := len(w.sms.Sent()), len(w.email.Sent()); s != 1 || e != 1 {
			t.Fatalf("provider got %d SMS and %d emails over 4 attempts, want 1 and 1", s, e)
		}
		if w.outcomes[ports.OutcomeSent] != 2 {
			t.Fatalf("outcomes %v, want each channel counted sent once", w.outcomes)
		}
	})

	t.Run("StoreDownUnavailableEmailForManyAttempts", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.storeDown()
		w.email.FailFunc = failFirst(100, ports.MarkUnavailable(errors.New("535 5.7.8 authentication failed")))
		rec := record(event("e1", "sms", "email"))
		for i := range 100 {
			if err := w.attempt(t, rec); ports.KindOf(err) != ports.Unavailable {
				t.Fatalf("attempt %d: %v, want unavailable", i+1, err)
			}
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("provider got %d SMS over 100 attempts, want 1", n)
		}
	})

	t.Run("RecordFailedOnceWrittenOnTheNextAttempt", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		var records atomic.Int32
		w.store.RecordFunc = func(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
			if records.Add(1) == 1 {
				return context.DeadlineExceeded
			}
			return w.store.Store.Record(ctx, key, r, ttl)
		}
		w.email.FailFunc = failFirst(1, errors.New("451 4.3.0 try again later"))
		rec := record(event("e1", "sms", "email"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Retryable {
			t.Fatalf("attempt 1: %v, want a retryable error", err)
		}
		start := time.Now()
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("attempt 2 took %v: it waited on its own claim", d)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("provider got %d SMS, want 1", n)
		}
		if s := w.claimState(t, "sms:e1"); s != ports.AlreadySent {
			t.Fatalf("SMS key %v after the second attempt, want the owed record written", s)
		}
		if owed, _ := w.svc.Owed(); owed != 0 {
			t.Fatalf("ledger still owes %d records", owed)
		}
	})

	t.Run("ReplayWhileStoreDownSuppressed", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.storeDown()
		if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatal(err)
		}
		// The same event again, as a new record: a replay this process handles.
		if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatal(err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("provider got %d SMS, want 1", n)
		}
		dups := w.logs.Events(t, "duplicate_suppressed")
		if len(dups) != 1 || dups[0]["recorded"] != false {
			t.Fatalf("duplicate_suppressed lines %v, want one with recorded=false", dups)
		}
		if w.outcomes[ports.OutcomeDuplicate] != 1 {
			t.Fatalf("outcomes %v, want one duplicate", w.outcomes)
		}
	})

	// A replay that finds this process's own pending claim while its send
	// is under way: once the send is delivered and its record write fails,
	// the claim is "ours, delivered", not another worker's to wait out.
	t.Run("OwnPendingClaimOfADeliveredSendIsNotWaitedOn", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		w.store.RecordFunc = func(context.Context, string, ports.Receipt, time.Duration) error {
			return context.DeadlineExceeded
		}
		sending, finish := make(chan struct{}), make(chan struct{})
		var sends atomic.Int32
		w.sms.FailFunc = func(ports.Message) error {
			if sends.Add(1) == 1 {
				close(sending)
				<-finish
			}
			return nil
		}
		first := make(chan error, 1)
		go func() { first <- w.attempt(t, record(event("e1", "sms"))) }()
		<-sending
		var inFlight atomic.Int32
		w.store.ClaimFunc = func(ctx context.Context, k, tok, digest, sender string, ttl time.Duration) (ports.Claim, error) {
			c, err := w.store.Store.Claim(ctx, k, tok, digest, sender, ttl)
			if c.State == ports.InFlight && inFlight.Add(1) == 1 {
				close(finish) // the first send returns while the replay waits
			}
			return c, err
		}
		start := time.Now()
		if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatalf("replay: %v", err)
		}
		if err := <-first; err != nil {
			t.Fatalf("first: %v", err)
		}
		if d := time.Since(start); d >= 2*time.Second {
			t.Fatalf("replay took %v, the claim TTL: it waited on our own delivered claim", d)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("provider got %d SMS, want 1", n)
		}
	})

	t.Run("OwedRecordsWrittenWhenTheStoreAnswers", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen)
		up := w.storeDown()
		for _, id := range []string{"e1", "e2", "e3"} {
			if err := w.attempt(t, record(event(id, "sms"))); err != nil {
				t.Fatal(err)
			}
		}
		if owed, _ := w.svc.Owed(); owed != 3 {
			t.Fatalf("ledger owes %d records, want 3", owed)
		}
		// No record arrives any more: the owed ones are written all the same.
		up()
		w.waitOwed(t, 0)
		for _, key := range []string{"sms:e1", "sms:e2", "sms:e3"} {
			if s := w.claimState(t, key); s != ports.AlreadySent {
				t.Fatalf("%s is %v after the drain, want already_sent", key, s)
			}
		}
	})

	// A full ledger takes no new record: it waits, unsent, and goes out
	// once the store has taken the owed records.
	t.Run("LedgerFullRefusesNewRecords", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) { c.LedgerSize = 2 })
		up := w.storeDown()
		for _, id := range []string{"e1", "e2"} {
			if err := w.attempt(t, record(event(id, "sms"))); err != nil {
				t.Fatal(err)
			}
		}
		e3 := record(event("e3", "sms", "email"))
		err := w.attempt(t, e3)
		if ports.KindOf(err) != ports.Unavailable {
			t.Fatalf("e3 with the ledger full: %v (kind %v), want unavailable", err, ports.KindOf(err))
		}
		if s, e := len(w.sms.Sent()), len(w.email.Sent()); s != 2 || e != 0 {
			t.Fatalf("provider got %d SMS and %d emails, want e1's and e2's SMS only", s, e)
		}
		full := w.logs.Events(t, "ledger_full")
		if len(full) != 1 || full[0]["event_id"] != "e3" || full[0]["owed"] != 2.0 || full[0]["ledger_size"] != 2.0 {
			t.Fatalf("ledger_full lines %v, want one for e3 with owed 2, ledger_size 2", full)
		}
		if owed, refused := w.svc.Owed(); owed != 2 || refused != 1 {
			t.Fatalf("owed %d, refused %d; want 2 and 1", owed, refused)
		}
		up()
		w.waitOwed(t, 0)
		if err := w.attempt(t, e3); err != nil {
			t.Fatalf("e3 once the store took the owed records: %v", err)
		}
		if s, e := len(w.sms.Sent()), len(w.email.Sent()); s != 3 || e != 1 {
			t.Fatalf("provider got %d SMS and %d emails, want 3 and 1", s, e)
		}
	})

	// The drain computes an owed record's TTL before it calls the store,
	// so the clock must move, and the store come back, while no drain is
	// between the two: the test does both while the drain's first try is
	// held in the store, and the next try reads the clock afresh.
	t.Run("OwedRecordKeepsItsSendTimeTTL", func(t *testing.T) {
		now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		var clock atomic.Int64
		clock.Store(now.UnixNano())
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) {
			c.Now = func() time.Time { return time.Unix(0, clock.Load()) }
		})
		var down atomic.Bool
		down.Store(true)
		var failed atomic.Int32
		draining, resume := make(chan struct{}), make(chan struct{})
		release := sync.OnceFunc(func() { close(resume) })
		t.Cleanup(release) // before the world's Close, which waits for the drain
		written := make(chan time.Duration, 1)
		w.store.RecordFunc = func(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
			if down.Load() {
				// The first write is the send's own; the second, the
				// drain's first try.
				if failed.Add(1) == 2 {
					close(draining)
					<-resume
				}
				return errStoreDown
			}
			written <- ttl
			return w.store.Store.Record(ctx, key, r, ttl)
		}
		if err := w.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatal(err)
		}
		select {
		case <-draining:
		case <-time.After(5 * time.Second):
			t.Fatal("the drain did not try to write the owed record within 5s")
		}
		clock.Add(int64(40 * time.Minute)) // of the world's 1h TTL
		down.Store(false)
		release()
		select {
		case ttl := <-written:
			if ttl != 20*time.Minute {
				t.Fatalf("owed record written with TTL %v, want 20m: what is left of the TTL since the send", ttl)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("owed record not written within 5s of the store answering")
		}
	})
}

// TestService_CloseBy: an SMS sent while the store is down leaves its
// record owed. Close's final attempt writes it when the store answers
// again before the deadline, and otherwise reports it lost.
func TestService_CloseBy(t *testing.T) {
	key := domain.NotificationKey("e1", ports.ChannelSMS)
	sendOwed := func(t *testing.T) (*world, func()) {
		t.Helper()
		w := newWorld(t, domain.FailOpen)
		up := w.storeDown()
		if err := w.handle(t, event("e1", "sms")); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		if owed, _ := w.svc.Owed(); owed != 1 {
			t.Fatalf("owed %d, want the SMS's record owed", owed)
		}
		return w, up
	}

	t.Run("StoreBackBeforeTheDeadline", func(t *testing.T) {
		w, up := sendOwed(t)
		// The store answers again while Close is already trying: only a
		// retry within the deadline can write the record.
		time.AfterFunc(300*time.Millisecond, up)
		if lost := w.svc.CloseBy(time.Now().Add(30 * time.Second)); lost != 0 {
			t.Errorf("CloseBy lost %d, want 0", lost)
		}
		if got := w.claimState(t, key); got != ports.AlreadySent {
			t.Errorf("after Close, the store holds %v for %s, want the sent record", got, key)
		}
		if strings.Contains(w.logs.String(), "owed_records_lost") {
			t.Errorf("owed_records_lost logged with nothing lost:\n%s", w.logs.String())
		}
	})

	// A delivery already taken goes on past the ledger size: every record
	// it owes is counted lost, not only the ledger size's worth.
	t.Run("OwedPastTheLedgerSizeAllCounted", func(t *testing.T) {
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) { c.LedgerSize = 1 })
		w.storeDown()
		w.email.FailFunc = failFirst(1, errors.New("451 4.3.0 try again later"))
		rec := record(event("e1", "sms", "email"))
		if err := w.attempt(t, rec); ports.KindOf(err) != ports.Retryable {
			t.Fatalf("attempt 1: %v, want retryable", err)
		}
		if err := w.attempt(t, rec); err != nil {
			t.Fatalf("attempt 2, with the ledger full of its own SMS: %v", err)
		}
		if owed, _ := w.svc.Owed(); owed != 2 {
			t.Fatalf("owed %d, want the SMS's and the email's records", owed)
		}
		if lost := w.svc.CloseBy(time.Now()); lost != 2 {
			t.Errorf("CloseBy lost %d, want 2", lost)
		}
	})

	t.Run("StoreDownThroughTheDeadline", func(t *testing.T) {
		w, _ := sendOwed(t)
		if lost := w.svc.CloseBy(time.Now().Add(300 * time.Millisecond)); lost != 1 {
			t.Errorf("CloseBy lost %d, want 1", lost)
		}
		var line struct {
			Level string
			Msg   string
			Count int
		}
		for _, l := range strings.Split(w.logs.String(), "\n") {
			if strings.Contains(l, `"msg":"owed_records_lost"`) {
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatal(err)
				}
			}
		}
		if line.Level != "ERROR" || line.Count != 1 {
			t.Errorf("owed_records_lost line: %+v, want level ERROR, count 1; logs:\n%s", line, w.logs.String())
		}
		if lost := w.svc.CloseBy(time.Now().Add(time.Second)); lost != 0 {
			t.Errorf("a second CloseBy lost %d, want 0: only the first one acts", lost)
		}
	})

	// A handler can outlive the shutdown: a notifier ignoring its
	// context (a provider call without one) hangs past SHUTDOWN_TIMEOUT
	// and the consumer's grace, the worker closes, and its SMS goes out
	// after CloseBy has counted what was owed; or the handler was still
	// on its way to the send. Either way its record is never written: the
	// store is down, and nothing writes owed records after CloseBy. What
	// the operator reads (owed_records_lost's count, Config.OwedLost) must
	// not be below what was lost.
	// sending says the handler is in its send when CloseBy counts: the
	// count then includes it, since the process may exit before it ends.
	outlived := func(t *testing.T, sending bool, hang func(w *world, entered, release chan struct{})) {
		var reported atomic.Int64
		w := newWorld(t, domain.FailOpen, func(c *domain.Config) {
			c.OwedLost = func(n int) { reported.Add(int64(n)) }
		})
		entered, release := make(chan struct{}), make(chan struct{})
		hang(w, entered, release)
		done := make(chan error, 1)
		go func() { done <- w.handle(t, event("e1", "sms")) }()
		select {
		case <-entered:
		case <-time.After(5 * time.Second):
			t.Fatal("the handler did not reach the hang within 5s")
		}
		counted := w.svc.CloseBy(time.Now()) // SHUTDOWN_TIMEOUT has passed
		if sending && counted != 1 {
			t.Errorf("CloseBy counted %d lost, with a send in progress that cannot be recorded after it, want 1", counted)
		}
		close(release)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Handle: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Handle did not return within 10s of the release")
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("the provider accepted %d SMS, want 1", n)
		}
		if owed, _ := w.svc.Owed(); owed != 1 {
			t.Fatalf("owed %d records, want the SMS's record owed", owed)
		}
		logged := 0
		for _, l := range strings.Split(w.logs.String(), "\n") {
			if strings.Contains(l, `"msg":"owed_records_lost"`) {
				var line struct{ Count int }
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatal(err)
				}
				logged += line.Count
			}
		}
		if got := reported.Load(); got < 1 || logged < 1 {
			t.Errorf("one record lost; reported lost: %d to OwedLost, %d in owed_records_lost (CloseBy returned %d), want at least 1 each; logs:\n%s", got, logged, counted, w.logs.String())
		}
		if got := reported.Load(); got > 1 || logged > 1 {
			t.Errorf("one record lost; reported lost: %d to OwedLost, %d in owed_records_lost, want it counted once", got, logged)
		}
	}
	t.Run("SendOutlivesTheShutdown", func(t *testing.T) {
		outlived(t, true, func(w *world, entered, release chan struct{}) {
			w.storeDown()
			w.sms.FailFunc = func(ports.Message) error {
				close(entered)
				<-release // ignores its context
				return nil
			}
		})
	})
	t.Run("SendStartsAfterTheCount", func(t *testing.T) {
		outlived(t, false, func(w *world, entered, release chan struct{}) {
			w.storeDown()
			down := w.store.ClaimFunc
			w.store.ClaimFunc = func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
				close(entered)
				<-release // a store call past its deadline
				return down(ctx, key, token, digest, sender, ttl)
			}
		})
	})
}
