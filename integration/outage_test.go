//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRedisOutage stops the real Redis mid-stream and starts it again, on
// the same port, with the worker running (issue 4, scenario 3).
func TestRedisOutage(t *testing.T) {
	t.Parallel()

	// FailOpen: the default. The worker keeps sending while Redis is down,
	// warns, pays no per-record stall (the breaker answers for Redis), and
	// suppresses duplicates again once Redis is back.
	t.Run("FailOpen", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		rig := startFaultRig(t, faultRigOptions{})
		w := rig.StartWorker(nil)

		before, beforePhones := faultSMSEvents("a", 10)
		rig.Publish(ctx, before...)
		rig.WaitSMS(ctx, beforePhones, 30*time.Second)
		for _, e := range before {
			rig.WaitSentRecord(ctx, rig.Key("sms", e.ID), 10*time.Second)
		}

		if err := rig.Redis.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		outageStart := time.Now()
		during, duringPhones := faultSMSEvents("b", 40)
		rig.Publish(ctx, during...)
		// Throughput, not a stopwatch on one record: all of them out within
		// a generous deadline. A worker that waited for Redis, or paid a
		// long stall per record, misses it.
		got := rig.WaitSMS(ctx, duringPhones, 30*time.Second)
		t.Logf("%d records published during the outage were all sent %v after Redis stopped", len(during), time.Since(outageStart).Round(time.Millisecond))
		for _, p := range duringPhones {
			if got[p] != 1 {
				t.Errorf("phone %s got %d SMS during the outage, want 1", p, got[p])
			}
		}
		if w.Count("idempotency_check_unavailable") == 0 {
			t.Fatalf("no idempotency_check_unavailable warning during the outage\n%s", strings.Join(w.Logs(), "\n"))
		}
		// Each was sent without a check: proof they went out while Redis
		// was really down, not after it came back. The worker logs a send
		// after its record attempt, which may end after the double counted
		// the SMS: wait for every line before judging them.
		faultWait(t, 15*time.Second, "a notification_sent line for every record of the outage", func() (bool, string) {
			logged := 0
			for _, e := range during {
				if len(faultEvents(w, "notification_sent", e.ID)) > 0 {
					logged++
				}
			}
			return logged == len(during), fmt.Sprintf("%d of %d logged", logged, len(during))
		})
		for _, e := range during {
			sent := faultEvents(w, "notification_sent", e.ID)
			if len(sent) != 1 || sent[0]["idempotency_checked"] != false {
				t.Fatalf("event %s: notification_sent lines %v, want one with idempotency_checked=false", e.ID, sent)
			}
		}

		if err := rig.Redis.Start(ctx); err != nil {
			t.Fatal(err)
		}
		// The breaker probes in the background; until it closes, calls are
		// refused without asking Redis. Wait for it rather than guess.
		faultWait(t, 15*time.Second, "the store circuit to close after Redis returned", func() (bool, string) {
			s, err := faultReadyStore(w.HTTPAddr)
			return err == nil && s != "open-circuit", fmt.Sprintf("store %q, %v", s, err)
		})

		after := faultEvent{ID: "evt-after-recovery", Shipment: "SHP-after", Phone: faultPhone("c", 0), Channels: []string{"sms"}}
		rig.Publish(ctx, after)
		record := rig.WaitSentRecord(ctx, rig.Key("sms", after.ID), 15*time.Second)
		// The replay, as in the incident: the same event again.
		rig.Publish(ctx, after)
		if _, err := w.WaitLog("duplicate_suppressed", 1, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		if sup := faultEvents(w, "duplicate_suppressed", after.ID); len(sup) != 1 {
			t.Fatalf("duplicate_suppressed for %s: %d lines, want 1", after.ID, len(sup))
		}
		rig.WaitCommitted(ctx, 15*time.Second)
		if n := rig.SMSCount(ctx)[after.Phone]; n != 1 {
			t.Fatalf("the event sent after recovery reached the double %d times, want 1", n)
		}
		ttl, ok, err := rig.Redis.PTTL(ctx, rig.Key("sms", after.ID))
		if err != nil || !ok || ttl < 47*time.Hour {
			t.Fatalf("sent record %q: PTTL %v, present %v, %v; want about 48h", record, ttl, ok, err)
		}
		rig.AssertNoDeadLetters(ctx, time.Second)
	})

	// FailClosed: the operator's choice to stop instead. While Redis is
	// down nothing reaches the provider and nothing is dead-lettered; once
	// it is back every notification goes out exactly once.
	t.Run("FailClosed", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		rig := startFaultRig(t, faultRigOptions{})
		w := rig.StartWorker(map[string]string{"IDEMPOTENCY_FAILURE_MODE": "closed"})

		before, beforePhones := faultSMSEvents("a", 5)
		rig.Publish(ctx, before...)
		rig.WaitSMS(ctx, beforePhones, 30*time.Second)
		for _, e := range before {
			rig.WaitSentRecord(ctx, rig.Key("sms", e.ID), 10*time.Second)
		}
		sentBefore := len(rig.SMSCount(ctx))

		if err := rig.Redis.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		during, duringPhones := faultSMSEvents("b", 20)
		rig.Publish(ctx, during...)
		// The worker has the records in hand once it schedules retries for
		// them as "unavailable": from then on, a send would be a breach.
		faultWait(t, 15*time.Second, "records retried as unavailable", func() (bool, string) {
			records := map[string]bool{}
			for _, ev := range w.Events("record_retry_scheduled") {
				if ev["kind"] == "unavailable" {
					records[fmt.Sprint(ev["partition"], "/", ev["offset"])] = true
				}
			}
			return len(records) >= len(during), fmt.Sprintf("%d of %d records retried as unavailable", len(records), len(during))
		})
		// Then a bounded window in which nothing may reach the provider.
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if got := rig.SMSCount(ctx); len(got) != sentBefore {
				t.Fatalf("closed mode sent while Redis was down: %d recipients at the double, want %d", len(got), sentBefore)
			}
		}
		if n := w.Count("event_dead_lettered"); n != 0 {
			t.Fatalf("closed mode dead-lettered %d records during the outage, want 0", n)
		}
		rig.AssertNoDeadLetters(ctx, time.Second)

		if err := rig.Redis.Start(ctx); err != nil {
			t.Fatal(err)
		}
		rig.WaitSMS(ctx, duringPhones, 30*time.Second)
		rig.WaitCommitted(ctx, 15*time.Second)
		got := rig.SMSCount(ctx)
		for _, p := range append(beforePhones, duringPhones...) {
			if got[p] != 1 {
				t.Errorf("phone %s got %d SMS, want exactly 1", p, got[p])
			}
		}
		values := rig.Values(ctx)
		for _, e := range append(before, during...) {
			if v := values[rig.Key("sms", e.ID)]; !isSentRecord(v) {
				t.Errorf("key of %s holds %q, want a sent record", e.ID, v)
			}
		}
		if n := w.Count("idempotency_check_unavailable"); n != 0 {
			t.Errorf("closed mode logged %d idempotency_check_unavailable (the fail-open warning), want 0", n)
		}
		rig.AssertNoDeadLetters(ctx, time.Second)
	})
}
