package domain

import (
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// TestLedger holds the ledger to its contract, answer by answer.
func TestLedger(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	r := ports.Receipt{ProviderID: "SM1"}

	t.Run("NothingDroppedForRoom", func(t *testing.T) {
		j := newLedger(2, time.Hour, clock)
		for i := range 5 {
			j.delivered(fmt.Sprintf("sms:o%d", i), uint64(1+i), r, true)
		}
		for i := range 10 {
			j.delivered(fmt.Sprintf("sms:r%d", i), uint64(100+i), r, false)
			j.setUnknown(fmt.Sprintf("sms:u%d", i), uint64(100+i), unknownSend{Token: "t"})
		}
		if j.owedCount() != 5 {
			t.Fatalf("owed %d, want all 5 owed records kept", j.owedCount())
		}
		j.written(*j.lookup("sms:o0", 0).owed)
		for i := range 5 {
			if !j.lookup(fmt.Sprintf("sms:o%d", i), uint64(1+i)).earlier {
				t.Errorf("sms:o%d: its delivery no longer skips it", i)
			}
		}
		for i := range 10 {
			if k := j.lookup(fmt.Sprintf("sms:r%d", i), uint64(100+i)); !k.earlier {
				t.Errorf("sms:r%d: its delivery no longer skips it", i)
			}
			if k := j.lookup(fmt.Sprintf("sms:u%d", i), uint64(100+i)); k.unknown == nil {
				t.Errorf("sms:u%d: its delivery's unknown send forgotten", i)
			}
		}
	})

	t.Run("AdmitsWithRoomOrForWhatTheDeliveryHolds", func(t *testing.T) {
		j := newLedger(2, time.Hour, clock)
		sms := func(id string) []ports.Message {
			return []ports.Message{{IdempotencyKey: "sms:" + id}, {IdempotencyKey: "email:" + id}}
		}
		j.delivered("sms:a", 1, r, true)
		if !j.admits(9, sms("x")) || !j.admits(0, sms("x")) {
			t.Fatal("refused with room left")
		}
		j.delivered("sms:b", 2, r, true)
		j.setUnknown("email:c", 3, unknownSend{Token: "t"})
		if j.admits(9, sms("x")) || j.admits(0, sms("a")) || j.admits(2, sms("a")) {
			t.Error("admitted a delivery holding nothing of the record, with the ledger full")
		}
		if !j.admits(1, sms("a")) || !j.admits(2, sms("b")) || !j.admits(3, sms("c")) {
			t.Error("refused a delivery the room it holds")
		}
		j.written(*j.lookup("sms:b", 0).owed)
		if !j.admits(9, sms("x")) {
			t.Error("refused once an owed record was written")
		}
	})

	t.Run("EndedDeliveryForgotten", func(t *testing.T) {
		j := newLedger(10, time.Hour, clock)
		ended := make(chan struct{})
		j.delivered("sms:a", 1, r, false)
		j.delivered("email:a", 1, r, true)
		j.setUnknown("push:a", 1, unknownSend{Token: "t"})
		msgs := []ports.Message{{IdempotencyKey: "sms:a"}, {IdempotencyKey: "email:a"}, {IdempotencyKey: "push:a"}}
		j.watch(1, msgs, ended)
		j.watch(1, msgs, ended) // another attempt's: one watch
		if !j.lookup("sms:a", 1).earlier {
			t.Fatal("forgotten before its delivery ended")
		}
		close(ended)
		deadline := time.Now().Add(5 * time.Second)
		for j.lookup("sms:a", 1).earlier || j.lookup("email:a", 1).earlier || j.lookup("push:a", 1).unknown != nil {
			if time.Now().After(deadline) {
				t.Fatal("an ended delivery still vouches for its keys after 5s")
			}
			time.Sleep(time.Millisecond)
		}
		if j.lookup("email:a", 0).owed == nil {
			t.Error("the owed record left with its delivery")
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		if len(j.entries) != 1 || len(j.watched) > 1 {
			t.Errorf("entries %d, watched %d; want the owed one only", len(j.entries), len(j.watched))
		}
	})

	t.Run("ForgetDropsRecordedKeepsOwed", func(t *testing.T) {
		j := newLedger(10, time.Hour, clock)
		j.delivered("sms:a", 1, r, false)
		j.delivered("email:a", 1, r, true)
		j.setUnknown("push:a", 1, unknownSend{Token: "t"})
		j.forget("sms:a", 1)
		j.forget("email:a", 1)
		j.forget("push:a", 1)
		if j.lookup("sms:a", 1).earlier || j.lookup("email:a", 1).earlier {
			t.Error("a finished delivery still vouches for its keys")
		}
		if j.lookup("push:a", 1).unknown != nil {
			t.Error("a finished delivery's unknown send is still kept")
		}
		o := j.lookup("email:a", 0).owed
		if o == nil {
			t.Fatal("the owed record left with its delivery")
		}
		j.written(*o)
		if j.lookup("email:a", 0).owed != nil || j.owedCount() != 0 || len(j.entries) != 0 {
			t.Errorf("written after its delivery finished: owed %d, entries %d; want none", j.owedCount(), len(j.entries))
		}
	})

	t.Run("SettledWhileItsDeliveryRetriesStaysForIt", func(t *testing.T) {
		j := newLedger(10, time.Hour, clock)
		j.delivered("sms:a", 1, r, true)
		j.written(*j.lookup("sms:a", 0).owed)
		if j.lookup("sms:a", 0).owed != nil {
			t.Error("still owed once written")
		}
		if !j.lookup("sms:a", 1).earlier || j.lookup("sms:a", 2).earlier {
			t.Error("want sms:a delivered by delivery 1 only")
		}
	})

	t.Run("WrittenEarlierRecordLeavesALaterOneOwed", func(t *testing.T) {
		j := newLedger(10, time.Hour, clock)
		j.delivered("sms:a", 0, r, true)
		o := *j.lookup("sms:a", 0).owed
		j.delivered("sms:a", 0, ports.Receipt{ProviderID: "SM2"}, true)
		j.written(o)
		if o2 := j.lookup("sms:a", 0).owed; o2 == nil || o2.receipt.ProviderID != "SM2" {
			t.Errorf("owed %+v; want the later record kept owed", o2)
		}
	})

	t.Run("DeliveryZeroKeepsOnlyOwedRecords", func(t *testing.T) {
		j := newLedger(10, time.Hour, clock)
		j.delivered("sms:a", 0, r, false)
		j.setUnknown("sms:b", 0, unknownSend{Token: "t"})
		if len(j.entries) != 0 {
			t.Errorf("entries %d; want none for delivery 0", len(j.entries))
		}
	})

	t.Run("EntriesExpire", func(t *testing.T) {
		now = t0
		j := newLedger(10, time.Hour, clock)
		j.delivered("sms:a", 1, r, true)
		j.setUnknown("sms:b", 1, unknownSend{Token: "t"})
		now = t0.Add(time.Hour)
		if j.lookup("sms:a", 0).owed != nil {
			t.Error("owed record kept past maxAge")
		}
		if j.lookup("sms:b", 1).unknown != nil {
			t.Error("unknown send kept past maxAge")
		}
		if len(j.owedRecords()) != 0 || j.owedCount() != 0 {
			t.Error("drain offered an expired debt")
		}
	})
}
