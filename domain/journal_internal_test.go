package domain

import (
	"fmt"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// TestJournal holds the journal to its contract, answer by answer.
func TestJournal(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	r := ports.Receipt{ProviderID: "SM1"}

	t.Run("RecordedEntriesNeverEvictOwedOnes", func(t *testing.T) {
		j := newJournal(2, time.Hour, clock)
		j.deliver("sms:a", 0, r, true)
		j.deliver("sms:b", 0, r, true)
		for i := range 10 {
			j.deliver(fmt.Sprintf("sms:r%d", i), uint64(100+i), r, false)
		}
		if j.owedCount() != 2 || j.evictions() != 0 {
			t.Fatalf("owed %d, evicted %d; want 2 and 0", j.owedCount(), j.evictions())
		}
		for _, k := range []string{"sms:a", "sms:b"} {
			if _, ok := j.owedRecord(k); !ok {
				t.Errorf("%s no longer owed", k)
			}
		}
		if j.lookup("sms:r0", 100).earlier || !j.lookup("sms:r9", 109).earlier {
			t.Errorf("recorded entries: want the oldest dropped, the newest kept")
		}
	})

	t.Run("FinishDropsRecordedKeepsOwed", func(t *testing.T) {
		j := newJournal(10, time.Hour, clock)
		j.deliver("sms:a", 1, r, false)
		j.deliver("email:a", 1, r, true)
		j.setUnknown("push:a", 1, unknownSend{Token: "t"})
		j.finish("sms:a", 1)
		j.finish("email:a", 1)
		j.finish("push:a", 1)
		if j.lookup("sms:a", 1).earlier || j.lookup("email:a", 1).earlier {
			t.Error("a finished delivery still vouches for its keys")
		}
		if j.lookup("push:a", 1).hasUnknown {
			t.Error("a finished delivery's unknown send is still kept")
		}
		o, ok := j.owedRecord("email:a")
		if !ok {
			t.Fatal("the owed record left with its delivery")
		}
		j.settle(o)
		if _, ok := j.owedRecord("email:a"); ok || j.owedCount() != 0 || len(j.sent) != 0 {
			t.Errorf("settled after its delivery finished: owed %d, entries %d; want none", j.owedCount(), len(j.sent))
		}
	})

	t.Run("SettledWhileItsDeliveryRetriesStaysForIt", func(t *testing.T) {
		j := newJournal(10, time.Hour, clock)
		j.deliver("sms:a", 1, r, true)
		o, _ := j.owedRecord("sms:a")
		j.settle(o)
		if _, ok := j.owedRecord("sms:a"); ok {
			t.Error("still owed after settle")
		}
		if !j.lookup("sms:a", 1).earlier || j.lookup("sms:a", 2).earlier {
			t.Error("want sms:a delivered by delivery 1 only")
		}
	})

	t.Run("SettleOfAnEarlierDebtLeavesALaterOne", func(t *testing.T) {
		j := newJournal(10, time.Hour, clock)
		j.deliver("sms:a", 0, r, true)
		o, _ := j.owedRecord("sms:a")
		j.deliver("sms:a", 0, ports.Receipt{ProviderID: "SM2"}, true)
		j.settle(o)
		if o2, ok := j.owedRecord("sms:a"); !ok || o2.receipt.ProviderID != "SM2" {
			t.Errorf("owed %+v, %v; want the later debt kept", o2, ok)
		}
	})

	t.Run("DeliveryZeroKeepsOnlyDebts", func(t *testing.T) {
		j := newJournal(10, time.Hour, clock)
		j.deliver("sms:a", 0, r, false)
		j.setUnknown("sms:b", 0, unknownSend{Token: "t"})
		if len(j.sent) != 0 || len(j.unknown) != 0 {
			t.Errorf("entries %d, unknown %d; want none for delivery 0", len(j.sent), len(j.unknown))
		}
	})

	t.Run("EntriesExpire", func(t *testing.T) {
		now = t0
		j := newJournal(10, time.Hour, clock)
		j.deliver("sms:a", 1, r, true)
		j.setUnknown("sms:b", 1, unknownSend{Token: "t"})
		now = t0.Add(time.Hour)
		if _, ok := j.owedRecord("sms:a"); ok {
			t.Error("owed record kept past maxAge")
		}
		if j.lookup("sms:b", 1).hasUnknown {
			t.Error("unknown send kept past maxAge")
		}
		if len(j.oldest(10)) != 0 || j.owedCount() != 0 {
			t.Error("drain offered an expired debt")
		}
	})
}
