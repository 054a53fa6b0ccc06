package domain_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// fakeClock is a clock tests move by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// datedEvent is event(id, channels...) of type typ with occurred_at at.
func datedEvent(id, typ string, at time.Time, channels ...string) string {
	ev := strings.Replace(event(id, channels...), `"type":"shipment.out_for_delivery"`,
		`"type":"`+typ+`","occurred_at":"`+at.Format(time.RFC3339Nano)+`"`, 1)
	if !strings.Contains(ev, "occurred_at") {
		panic("datedEvent: event() changed shape")
	}
	return ev
}

// staleWorld is a world on clock, whose store expires records on the same
// clock, with the event ages of ages applied to its Config.
func staleWorld(t *testing.T, clock *fakeClock, opts ...func(*domain.Config)) *world {
	t.Helper()
	opts = append([]func(*domain.Config){func(c *domain.Config) { c.Now = clock.Now }}, opts...)
	w := newWorld(t, domain.FailOpen, opts...)
	w.store.Store = memory.New(clock.Now)
	return w
}

func TestService_StaleEvents(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const typ = "shipment.out_for_delivery"

	t.Run("OlderThanMaxAgeIsSkippedBeforeAnyClaim", func(t *testing.T) {
		w := staleWorld(t, newFakeClock(now)) // MaxEventAge: the TTL, 1h
		if err := w.handle(t, datedEvent("e1", typ, now.Add(-2*time.Hour), "sms", "email")); err != nil {
			t.Fatalf("Handle: %v, want nil: a stale event is acknowledged, not dead-lettered", err)
		}
		if n := len(w.sms.Sent()) + len(w.email.Sent()); n != 0 {
			t.Fatalf("sent %d notifications of a stale event, want 0", n)
		}
		for _, key := range []string{"sms:e1", "email:e1"} {
			if s := w.claimState(t, key); s != ports.Claimed {
				t.Errorf("%s is %v, want absent: a stale event claims nothing", key, s)
			}
		}
		lines := w.logs.Events(t, "stale_event_skipped")
		if len(lines) != 1 || lines[0]["age"] == nil || lines[0]["max_age"] == nil || lines[0]["event_id"] != "e1" {
			t.Fatalf("stale_event_skipped lines %v, want one with event_id, age and max_age", lines)
		}
		if w.outcomes[ports.OutcomeStale] != 2 {
			t.Fatalf("outcomes %v, want stale on both channels", w.outcomes)
		}
	})

	t.Run("WithinMaxAgeIsSent", func(t *testing.T) {
		w := staleWorld(t, newFakeClock(now))
		if err := w.handle(t, datedEvent("e1", typ, now.Add(-59*time.Minute), "sms")); err != nil {
			t.Fatal(err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("sent %d SMS, want 1", n)
		}
	})

	t.Run("PerTypeOverride", func(t *testing.T) {
		w := staleWorld(t, newFakeClock(now), func(c *domain.Config) {
			c.MaxEventAgeByType = map[string]time.Duration{typ: 10 * time.Minute}
		})
		if err := w.handle(t, datedEvent("late", typ, now.Add(-30*time.Minute), "sms")); err != nil {
			t.Fatal(err)
		}
		if err := w.handle(t, datedEvent("other", "shipment.delayed", now.Add(-30*time.Minute), "sms")); err != nil {
			t.Fatal(err)
		}
		sent := w.sms.Sent()
		if len(sent) != 1 || sent[0].EventID != "other" {
			t.Fatalf("sent %v, want only the shipment.delayed event: out_for_delivery is stale after 10m", sent)
		}
	})

	t.Run("FutureBeyondSkewIsPoison", func(t *testing.T) {
		w := staleWorld(t, newFakeClock(now))
		err := w.handle(t, datedEvent("e1", typ, now.Add(domain.ClockSkew+time.Minute), "sms"))
		if ports.KindOf(err) != ports.Permanent || !strings.Contains(err.Error(), "ahead of this worker's clock") {
			t.Fatalf("Handle: %v, want a permanent error naming the clock", err)
		}
		if n := len(w.sms.Sent()); n != 0 {
			t.Fatalf("sent %d SMS, want 0", n)
		}
	})

	t.Run("FutureWithinSkewIsSent", func(t *testing.T) {
		w := staleWorld(t, newFakeClock(now))
		if err := w.handle(t, datedEvent("e1", typ, now.Add(domain.ClockSkew-time.Second), "sms")); err != nil {
			t.Fatal(err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("sent %d SMS, want 1", n)
		}
	})

	t.Run("WithoutOccurredAtTheRecordTimestampCounts", func(t *testing.T) {
		w := staleWorld(t, newFakeClock(now))
		old := record(event("old", "sms"))
		old.Timestamp = now.Add(-2 * time.Hour)
		if err := w.attempt(t, old); err != nil {
			t.Fatal(err)
		}
		undated := record(event("undated", "sms")) // no occurred_at, no timestamp: no age
		if err := w.attempt(t, undated); err != nil {
			t.Fatal(err)
		}
		sent := w.sms.Sent()
		if len(sent) != 1 || sent[0].EventID != "undated" {
			t.Fatalf("sent %v, want only the event without any date", sent)
		}
		if lines := w.logs.Events(t, "stale_event_skipped"); len(lines) != 1 || lines[0]["age_from"] != "record_timestamp" {
			t.Fatalf("stale_event_skipped lines %v, want one aged from the record timestamp", lines)
		}
	})

	// ADR-0006's last duplicate window: a replay after the sent record
	// expired. With MaxEventAge at most the TTL, the replay is stale.
	t.Run("ReplayAfterTTLIsSkippedNotSent", func(t *testing.T) {
		clock := newFakeClock(now)
		w := staleWorld(t, clock)
		ev := datedEvent("e1", typ, now, "sms")
		if err := w.handle(t, ev); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour + time.Second) // the TTL, and a second
		if s := w.claimState(t, "sms:e1"); s != ports.Claimed {
			t.Fatalf("sms:e1 is %v after the TTL, want forgotten", s)
		}
		if err := w.handle(t, ev); err != nil {
			t.Fatal(err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("sent %d SMS, want 1: the replay after the TTL went out again", n)
		}
		if n := len(w.logs.Events(t, "stale_event_skipped")); n != 1 {
			t.Fatalf("%d stale_event_skipped lines, want 1", n)
		}
	})

	t.Run("OverrideMustBePositive", func(t *testing.T) {
		_, err := domain.NewService(domain.Config{
			Store:             memory.New(nil),
			Notifiers:         map[ports.Channel]ports.Notifier{ports.ChannelSMS: &provider{}},
			MaxEventAgeByType: map[string]time.Duration{typ: 0},
		})
		if err == nil || !strings.Contains(err.Error(), typ) {
			t.Fatalf("NewService: %v, want an error naming %s", err, typ)
		}
	})
}
