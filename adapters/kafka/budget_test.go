package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// publishSpread writes perPartition records of valueBytes to every
// partition, one record per partition in each produce request, so every
// record batch holds one record: the broker returns a batch whole, and a
// batch of many large records would be fetched at once whatever the
// consumer asks (as with a producer's usual 16 KiB to 1 MiB batches, not a
// test's one batch of everything). Keys are distinct.
func publishSpread(tb testing.TB, brokers []string, topic string, partitions int32, perPartition, valueBytes int) {
	tb.Helper()
	p, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
	if err != nil {
		tb.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	keys := make([][]string, partitions)
	for part := range partitions {
		keys[part] = keysOn(tb, topic, part, partitions, perPartition)
	}
	value := make([]byte, valueBytes)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range perPartition {
		msgs := make([]kafka.Message, 0, partitions)
		for part := range partitions {
			msgs = append(msgs, kafka.Message{Key: []byte(keys[part][i]), Value: value})
		}
		if err := p.Publish(ctx, topic, msgs...); err != nil {
			tb.Fatalf("Publish: %v", err)
		}
	}
}

// liveHeap returns the bytes of heap still reachable after a full
// collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // the second one frees what the first one's finalizers released
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestConsumer_HeldRecordsStayWithinByteBudget blocks every handler call
// with a backlog far larger than the byte budget in 8 partitions. The
// records the worker holds must stay within the budget, on all partitions
// together: by the consumer's own count (BufferedBytes), by how many
// records reached the handler, and by the heap still live after a
// collection, which counts what Sarama reads ahead too. Once the handlers
// return, everything is handled and committed, and the budget is given
// back: spending it never stops progress.
func TestConsumer_HeldRecordsStayWithinByteBudget(t *testing.T) {
	const (
		partitions   = 8
		perPartition = 40
		valueBytes   = 128 << 10
		budget       = 4 << 20
		total        = partitions * perPartition // 40 MiB of values
	)
	topic := uniqueName(t, "budget")
	brokers, _ := MustStartObservedBroker(t, partitions, topic)
	publishSpread(t, brokers, topic, partitions, perPartition, valueBytes)

	// Every record costs the same: its value, a key of about 8 bytes and
	// the fixed overhead, so the budget admits a known number of them.
	perRecord := int64(valueBytes + len("SHP-0000") + 256)
	admitted := int(budget / perRecord)

	var (
		calls   atomic.Int64
		release = make(chan struct{})
		mu      sync.Mutex
		handled = map[string]bool{}
	)
	h := ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		calls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		handled[rec.Origin()] = true
		mu.Unlock()
		return nil
	})

	before := liveHeap()
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 64
	cfg.MaxBufferedBytes = budget
	rc := MustRun(t, cfg, h)

	// More slots than records fit in the budget, and no two records share a
	// key: every admitted record reaches the handler, and only the budget
	// stops the rest.
	wait.For(t, 30*time.Second, fmt.Sprintf("%d handler calls", admitted), func() bool { return calls.Load() >= int64(admitted) })
	// The bound must hold for as long as the handlers stay blocked, not
	// only at one instant: watch it for a while.
	watchUntil := time.Now().Add(2 * time.Second)
	for time.Now().Before(watchUntil) {
		if got := rc.c.BufferedBytes(); got > budget {
			t.Fatalf("BufferedBytes = %d, over the budget of %d", got, budget)
		}
		if got := calls.Load(); got > int64(admitted) {
			t.Fatalf("%d records reached the handler; the budget of %d bytes admits %d of %d bytes", got, budget, admitted, perRecord)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What the heap holds beyond the broker's copy of the topic: the
	// admitted records (the budget), at most one record per partition
	// waiting for admission, and what Sarama reads ahead, at most one fetch
	// response of budget/16 per partition; plus 4 MiB for the clients and
	// goroutines. Without the budget the worker reads the whole 40 MiB.
	grown := liveHeap() - before
	bound := int64(budget + partitions*perRecord + partitions*budget/16 + 4<<20)
	t.Logf("live heap grew by %.1f MiB with %d records held (%.1f MiB by the consumer's count); bound %.1f MiB; backlog %.1f MiB",
		mib(grown), calls.Load(), mib(rc.c.BufferedBytes()), mib(bound), mib(int64(total*valueBytes)))
	if grown > bound {
		t.Errorf("live heap grew by %.1f MiB while handlers were blocked: over the bound of %.1f MiB", mib(grown), mib(bound))
	}

	close(release)
	wait.For(t, 60*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == total
	})
	want := map[int32]int64{}
	for p := range int32(partitions) {
		want[p] = perPartition
	}
	waitCommitted(t, brokers, cfg.GroupID, topic, want)
	wait.For(t, 5*time.Second, "the budget given back", func() bool { return rc.c.BufferedBytes() == 0 })
	rc.MustStop(t, 30*time.Second)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// TestConsumer_RecordLargerThanByteBudgetIsHandledAlone: a record larger
// than the whole budget is admitted once nothing else is held, so a small
// budget slows the worker down but never stops it.
func TestConsumer_RecordLargerThanByteBudgetIsHandledAlone(t *testing.T) {
	const partitions, perPartition, valueBytes = 4, 3, 128 << 10
	topic := uniqueName(t, "budget-large")
	brokers, _ := MustStartObservedBroker(t, partitions, topic)
	publishSpread(t, brokers, topic, partitions, perPartition, valueBytes)

	var (
		inHandler, most atomic.Int64
		handled         atomic.Int64
		running         atomic.Pointer[runningConsumer]
		overHeld        atomic.Int64
	)
	h := ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		n := inHandler.Add(1)
		defer inHandler.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		// Held now: this record, and nothing else.
		if rc := running.Load(); rc != nil {
			if held := rc.c.BufferedBytes(); held > int64(valueBytes+1024) {
				overHeld.Store(held)
			}
		}
		time.Sleep(5 * time.Millisecond) // give a second record the chance to be let in
		handled.Add(1)
		return nil
	})
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 64
	cfg.MaxBufferedBytes = 64 << 10 // half a record
	rc := MustRun(t, cfg, h)
	running.Store(rc)

	wait.For(t, 30*time.Second, "every record handled", func() bool { return handled.Load() == partitions*perPartition })
	if m := most.Load(); m != 1 {
		t.Errorf("%d records were in the handler at once; a record larger than the budget must be admitted alone", m)
	}
	if held := overHeld.Load(); held != 0 {
		t.Errorf("BufferedBytes was %d while one record of %d bytes was in the handler", held, valueBytes)
	}
	rc.MustStop(t, 30*time.Second)
}

// TestConsumer_RevokedPartitionsGiveBackTheirBytes fills one consumer's
// budget with handler calls that only end when their context is cancelled,
// then has a second member join: the rebalance revokes the first one's
// partitions, its calls are cancelled after ShutdownTimeout, and the bytes
// they held must come back, or the first consumer could never admit a
// record again. Every record is handled in the end, by one member or the
// other, and the first consumer ends holding nothing.
func TestConsumer_RevokedPartitionsGiveBackTheirBytes(t *testing.T) {
	const partitions, perPartition, valueBytes = 4, 12, 64 << 10
	topic := uniqueName(t, "budget-revoke")
	brokers, _ := MustStartObservedBroker(t, partitions, topic)
	publishSpread(t, brokers, topic, partitions, perPartition, valueBytes)

	var (
		mu      sync.Mutex
		handled = map[string]bool{}
		// Until unstuck is closed, calls wait for it or their context.
		unstuck = make(chan struct{})
	)
	done := func(rec ports.Record) {
		mu.Lock()
		handled[rec.Origin()] = true
		mu.Unlock()
	}
	h := ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		select {
		case <-unstuck:
		case <-ctx.Done():
			return ctx.Err()
		}
		done(rec)
		return nil
	})
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 64
	cfg.MaxBufferedBytes = 512 << 10 // about 7 records
	cfg.ShutdownTimeout = time.Second
	first := MustRun(t, cfg, h)
	wait.For(t, 30*time.Second, "the first consumer's budget spent", func() bool {
		return first.c.BufferedBytes() > cfg.MaxBufferedBytes-int64(valueBytes)
	})

	second := MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		done(rec)
		return nil
	}))
	// Both members hold partitions: the first one's stuck calls were
	// cancelled at the revoke.
	wait.For(t, 30*time.Second, "both members assigned", func() bool { return first.c.Assigned() > 0 && second.c.Assigned() > 0 })
	close(unstuck)

	wait.For(t, 60*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == partitions*perPartition
	})
	want := map[int32]int64{}
	for p := range int32(partitions) {
		want[p] = perPartition
	}
	waitCommitted(t, brokers, cfg.GroupID, topic, want)
	wait.For(t, 5*time.Second, "the first consumer holding nothing", func() bool { return first.c.BufferedBytes() == 0 })
	second.MustStop(t, 30*time.Second)
	first.MustStop(t, 30*time.Second)
}
