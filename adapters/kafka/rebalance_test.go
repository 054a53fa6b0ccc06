package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// storeHandler sends "unless already sent" against the memory store, as the
// domain does: claim, send (append to sent) only when claimed, record. A
// claim held by the other member means it is sending right now: answer
// Unavailable, so the consumer retries until it turns into a sent record.
type storeHandler struct {
	store *memory.Store
	token string

	mu      sync.Mutex
	sent    *[]string // shared by every member
	handled map[string]int
	members *sync.Mutex
}

func (h *storeHandler) Handle(ctx context.Context, rec ports.Record) error {
	key := string(rec.Value) // the event id
	claim, err := h.store.Claim(ctx, key, h.token+"/"+key, "", "", time.Minute)
	if err != nil {
		return err
	}
	switch claim.State {
	case ports.InFlight:
		return ports.MarkUnavailable(fmt.Errorf("%s is being sent by %s", key, claim.Lease.Token))
	case ports.Claimed:
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // provider latency
		h.members.Lock()
		*h.sent = append(*h.sent, key)
		h.members.Unlock()
		if err := h.store.Record(ctx, key, ports.Receipt{ProviderID: key, SentAt: time.Now()}, time.Hour); err != nil {
			return err
		}
	}
	h.mu.Lock()
	h.handled[key]++
	h.mu.Unlock()
	return nil
}

func (h *storeHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.handled)
}

// Point 6: a member joining mid-stream takes partitions over without losing
// a record, and with the store on, without sending one twice.
func TestConsumer_RebalanceLosesNothingSendsNothingTwice(t *testing.T) {
	t.Parallel()
	const partitions = 4
	topic := uniqueName(t, "rebalance")
	brokers := testBrokers(t, partitions, topic)
	cfg, _ := testConfig(brokers, topic)
	// Commits far apart: the revoke commit is what keeps replays short, and
	// anything replayed past it must be suppressed by the store.
	cfg.CommitInterval = 500 * time.Millisecond

	store := memory.New(nil)
	var sent []string
	var sentMu sync.Mutex
	newMember := func(name string) *storeHandler {
		return &storeHandler{store: store, token: name, sent: &sent, members: &sentMu, handled: map[string]int{}}
	}
	a, b := newMember("a"), newMember("b")

	const perBatch = 200
	event := func(i int) kafka.Message {
		return kafka.Message{Key: []byte(fmt.Sprintf("SHP-%d", i%25)), Value: []byte(fmt.Sprintf("evt-%04d", i))}
	}
	batch := func(from int) []kafka.Message {
		msgs := make([]kafka.Message, perBatch)
		for i := range msgs {
			msgs[i] = event(from + i)
		}
		return msgs
	}

	MustPublish(t, brokers, topic, batch(0)...)
	rcA := MustRun(t, cfg, a)
	wait.For(t, 10*time.Second, "member a handling", func() bool { return a.count() >= 20 })

	rcB := MustRun(t, cfg, b)
	// Records keep flowing while the group rebalances...
	MustPublish(t, brokers, topic, batch(perBatch)...)
	// ...and after it, so member b has work of its own however fast member
	// a got through the first batches.
	wait.For(t, 10*time.Second, "member b assigned", func() bool { return rcB.c.Assigned() > 0 })
	for i := 2; i <= 3; i++ {
		MustPublish(t, brokers, topic, batch(i*perBatch)...)
	}
	const total = 4 * perBatch
	handledByAny := func() map[string]bool {
		all := map[string]bool{}
		for _, h := range []*storeHandler{a, b} {
			h.mu.Lock()
			for k := range h.handled {
				all[k] = true
			}
			h.mu.Unlock()
		}
		return all
	}
	wait.For(t, 20*time.Second, "every record handled", func() bool { return len(handledByAny()) == total })
	wait.For(t, 10*time.Second, "both members holding partitions", func() bool { return rcA.c.Assigned() > 0 && rcB.c.Assigned() > 0 })
	rcB.MustStop(t, 10*time.Second)
	rcA.MustStop(t, 10*time.Second)

	if b.count() == 0 {
		t.Fatal("member b handled nothing: no rebalance happened")
	}
	t.Run("NothingLost", func(t *testing.T) {
		all := handledByAny()
		for i := range total {
			if k := fmt.Sprintf("evt-%04d", i); !all[k] {
				t.Errorf("%s never handled", k)
			}
		}
	})
	t.Run("NothingSentTwice", func(t *testing.T) {
		sentMu.Lock()
		defer sentMu.Unlock()
		seen := map[string]bool{}
		for _, k := range sent {
			if seen[k] {
				t.Errorf("%s sent twice", k)
			}
			seen[k] = true
		}
		if len(seen) != total {
			t.Errorf("%d distinct events sent, want %d", len(seen), total)
		}
	})
}

// Point 7: under concurrency, one key's records arrive one at a time and in
// offset order, while different keys do run in parallel.
func TestConsumer_PerKeyOrder(t *testing.T) {
	t.Parallel()
	const partitions, n, keys = 2, 400, 16
	topic := uniqueName(t, "order")
	brokers := testBrokers(t, partitions, topic)
	MustPublish(t, brokers, topic, numbered(n, "v", func(i int) string { return fmt.Sprintf("SHP-%d", i%keys) })...)

	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 8
	var (
		mu          sync.Mutex
		seen        = map[string][]int64{}
		active      = map[string]bool{}
		running     int
		maxRunning  int
		overlapping error
		total       int
	)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		key := string(rec.Key)
		mu.Lock()
		if active[key] && overlapping == nil {
			overlapping = fmt.Errorf("two records of %s handled at once (offset %d)", key, rec.Offset)
		}
		active[key] = true
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()

		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)

		mu.Lock()
		active[key] = false
		running--
		seen[key] = append(seen[key], rec.Offset)
		total++
		mu.Unlock()
		return nil
	}))
	wait.For(t, 20*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= n
	})
	rc.MustStop(t, 10*time.Second)

	mu.Lock()
	defer mu.Unlock()
	if overlapping != nil {
		t.Error(overlapping)
	}
	if maxRunning < 2 {
		t.Errorf("at most %d records ran at once: the test proves nothing about concurrency", maxRunning)
	}
	if maxRunning > cfg.MaxInFlight {
		t.Errorf("%d records ran at once, above MaxInFlight %d", maxRunning, cfg.MaxInFlight)
	}
	if total != n {
		t.Errorf("%d records handled, want %d (each exactly once in one session)", total, n)
	}
	for key, offs := range seen {
		for i := 1; i < len(offs); i++ {
			if offs[i] <= offs[i-1] {
				t.Errorf("%s: offset %d after %d", key, offs[i], offs[i-1])
				break
			}
		}
	}
}

// MaxInFlight 1 is the benchmark baseline: strictly one record at a time.
func TestConsumer_MaxInFlightOneIsSequential(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "sequential")
	brokers := testBrokers(t, 2, topic)
	MustPublish(t, brokers, topic, numbered(40, "v", distinctKeys)...)
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 1
	var mu sync.Mutex
	running, total := 0, 0
	var overlap error
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		mu.Lock()
		running++
		if running > 1 && overlap == nil {
			overlap = errors.New("two records handled at once with MaxInFlight 1")
		}
		mu.Unlock()
		time.Sleep(200 * time.Microsecond)
		mu.Lock()
		running--
		total++
		mu.Unlock()
		return nil
	}))
	wait.For(t, 10*time.Second, "every record handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return total >= 40
	})
	rc.MustStop(t, 10*time.Second)
	if overlap != nil {
		t.Error(overlap)
	}
}

// A record waiting to be tried again holds no handling slot; each attempt
// holds one. With one slot and an hour's backoff after the first attempt
// at "a", "b" (another key, published after that attempt) is handled while
// "a" waits, never beside an attempt at "a", and "a" is tried once.
func TestConsumer_NoSlotHeldBetweenAttempts(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "between-attempts")
	brokers := testBrokers(t, 1, topic)
	MustPublish(t, brokers, topic, kafka.Message{Key: []byte("SHP-A"), Value: []byte("a")})
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = 1
	cfg.RetryInitialBackoff, cfg.RetryMaxBackoff = time.Hour, time.Hour
	var mu sync.Mutex
	running := 0
	calls := map[string]int{}
	var overlap error
	rc := MustRun(t, cfg, ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		mu.Lock()
		running++
		calls[string(rec.Value)]++
		if running > 1 && overlap == nil {
			overlap = errors.New("two calls at once with MaxInFlight 1")
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		if string(rec.Value) == "a" {
			return errors.New("twilio: 503")
		}
		return nil
	}))
	wait.For(t, 20*time.Second, `the first attempt at "a"`, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["a"] == 1
	})
	MustPublish(t, brokers, topic, kafka.Message{Key: []byte("SHP-B"), Value: []byte("b")})
	wait.For(t, 20*time.Second, `"b" handled while "a" waits for its second attempt`, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls["b"] == 1
	})
	rc.MustStop(t, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if overlap != nil {
		t.Error(overlap)
	}
	if calls["a"] != 1 || calls["b"] != 1 {
		t.Errorf("calls %v, want a once (then an hour's backoff) and b once", calls)
	}
}
