package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// recordID names a record by its place in the log.
type recordID struct {
	partition int32
	offset    int64
}

// held is a record waiting in the handler for the test to let it finish.
type held struct {
	key     string
	release chan struct{}
}

// completionLedger is what the property test knows: which records are in
// the handler waiting to be let go, and which have finished. The broker's
// commit hook checks every commit against it.
type completionLedger struct {
	mu       sync.Mutex
	inHand   map[recordID]held
	finished map[recordID]bool
	// violations lists every commit that passed an unfinished record.
	violations []string
	// commits counts, per partition, the commits whose offset lay strictly
	// inside the published range: ones that had to stop short of the end.
	midway map[int32]int
	last   map[int32]int64 // last committed offset per partition
	ends   map[int32]int64 // one past the last published offset per partition
}

// onCommit checks one OffsetCommit request: a committed offset c promises
// every record below c finished.
func (l *completionLedger) onCommit(req kmsg.Request) (kmsg.Response, error, bool) {
	r := req.(*kmsg.OffsetCommitRequest)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			for off := int64(0); off < p.Offset; off++ {
				if !l.finished[recordID{p.Partition, off}] {
					l.violations = append(l.violations, fmt.Sprintf("commit of partition %d at %d while offset %d was unfinished", p.Partition, p.Offset, off))
					break
				}
			}
			if p.Offset > 0 && p.Offset < l.ends[p.Partition] && p.Offset > l.last[p.Partition] {
				l.midway[p.Partition]++
			}
			l.last[p.Partition] = p.Offset
		}
	}
	return nil, nil, false // observe only
}

// lowestUnfinished is the offset a commit of partition p should reach once
// the marks settle: the first unfinished record, or the end. ok is false
// while nothing of p finished (nothing to commit yet).
func (l *completionLedger) lowestUnfinished(p int32) (off int64, ok bool) {
	for off = 0; off < l.ends[p]; off++ {
		if !l.finished[recordID{p, off}] {
			break
		}
	}
	return off, off > 0
}

// Point 8, through the real consumer: with many records of a partition in
// the handler at once, finishing in a random order the test chooses, no
// commit the broker receives ever passes a record that has not finished.
// Each step waits until every record that can be in the handler is there,
// so the random choice is among all of them, then lets one go.
func TestConsumer_CommitNeverPassesUnfinished_RandomCompletion(t *testing.T) {
	t.Parallel()
	const (
		partitions  = 2
		keysPerPart = 8
		perKey      = 4
		maxInFlight = 16 // every key has its record in the handler at once
		rounds      = 4
	)
	// A round publishes 2*8*4 = 64 records, within the consumer's window
	// of 4*MaxInFlight, so all of them are fetched and every key with
	// records left has one in the handler when the system settles.
	topic := uniqueName(t, "random-completion")
	cluster := MustStartCluster(t, partitions, []string{topic})
	brokers := cluster.ListenAddrs()
	ledger := &completionLedger{
		inHand:   map[recordID]held{},
		finished: map[recordID]bool{},
		midway:   map[int32]int{},
		last:     map[int32]int64{},
		ends:     map[int32]int64{},
	}
	cluster.ControlKey(int16(kmsg.OffsetCommit), ledger.onCommit)

	var keys []string
	partOf := map[string]int32{}
	for p := range int32(partitions) {
		for _, k := range keysOn(t, topic, p, partitions, keysPerPart) {
			keys = append(keys, k)
			partOf[k] = p
		}
	}
	cfg, _ := testConfig(brokers, topic)
	cfg.MaxInFlight = maxInFlight
	maxHeld := 0 // guarded by ledger.mu
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		id := recordID{rec.Partition, rec.Offset}
		release := make(chan struct{})
		ledger.mu.Lock()
		ledger.inHand[id] = held{key: string(rec.Key), release: release}
		maxHeld = max(maxHeld, len(ledger.inHand))
		ledger.mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		ledger.mu.Lock()
		ledger.finished[id] = true
		ledger.mu.Unlock()
		return nil
	}))

	outOfOrder := 0
	for round := range rounds {
		rng := rand.New(rand.NewPCG(uint64(round+1), 0x5eed))
		left := map[string]int{} // records of each key not yet let go
		var msgs []kafka.Message
		for i := range perKey {
			for _, k := range keys {
				msgs = append(msgs, kafka.Message{Key: []byte(k), Value: fmt.Appendf(nil, "r%d-%s-%d", round, k, i)})
				left[k]++
			}
		}
		ledger.mu.Lock()
		for _, k := range keys {
			ledger.ends[partOf[k]] += perKey
		}
		ledger.mu.Unlock()
		MustPublish(t, brokers, topic, msgs...)

		for step := range len(msgs) {
			busyKeys := 0
			for _, n := range left {
				if n > 0 {
					busyKeys++
				}
			}
			var holding []recordID
			wait.For(t, 10*time.Second, fmt.Sprintf("round %d step %d: %d records in the handler", round, step, busyKeys), func() bool {
				ledger.mu.Lock()
				defer ledger.mu.Unlock()
				if len(ledger.inHand) != busyKeys {
					return false
				}
				holding = holding[:0]
				for id := range ledger.inHand {
					holding = append(holding, id)
				}
				return true
			})
			// Sorted, so a seed always picks the same record.
			slices.SortFunc(holding, func(a, b recordID) int {
				if a.partition != b.partition {
					return int(a.partition - b.partition)
				}
				return int(a.offset - b.offset)
			})
			pick := holding[rng.IntN(len(holding))]
			ledger.mu.Lock()
			if low, _ := ledger.lowestUnfinished(pick.partition); low < pick.offset {
				outOfOrder++ // a lower record of its partition is still unfinished
			}
			h := ledger.inHand[pick]
			close(h.release)
			delete(ledger.inHand, pick)
			ledger.mu.Unlock()
			left[h.key]--

			// Now and then, let the commit catch up with what finished, so
			// commits land at offsets inside the round and not only at its
			// end. Nothing else finishes meanwhile: every other record waits
			// for the test.
			if step%8 == 7 {
				wait.For(t, 10*time.Second, "commits to reach the lowest unfinished record", func() bool {
					ledger.mu.Lock()
					defer ledger.mu.Unlock()
					if len(ledger.violations) > 0 {
						return true // a commit went too far: reported below
					}
					for p := range int32(partitions) {
						if want, ok := ledger.lowestUnfinished(p); ok && ledger.last[p] != want {
							return false
						}
					}
					return true
				})
				ledger.mu.Lock()
				violations := slices.Clone(ledger.violations)
				ledger.mu.Unlock()
				if len(violations) > 0 {
					t.Fatalf("round %d step %d:\n%s", round, step, strings.Join(violations, "\n"))
				}
			}
		}
		ledger.mu.Lock()
		ends := map[int32]int64{}
		for p, e := range ledger.ends {
			ends[p] = e
		}
		ledger.mu.Unlock()
		waitCommitted(t, brokers, cfg.GroupID, topic, ends)
	}
	rc.MustStop(t, 10*time.Second)

	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	for _, v := range ledger.violations {
		t.Error(v)
	}
	if maxHeld < keysPerPart*partitions {
		t.Errorf("at most %d records were in the handler at once, want %d: the test did not exercise concurrency", maxHeld, keysPerPart*partitions)
	}
	if outOfOrder == 0 {
		t.Error("no record finished before a lower record of its partition: the completion order was not random")
	}
	for p := range int32(partitions) {
		if ledger.midway[p] == 0 {
			t.Errorf("partition %d: no commit stopped short of the end, so none was put to the test", p)
		}
	}
}

// slowProvider is a notifier double with a provider's latency that keeps
// every message it accepted, as the provider would.
type slowProvider struct {
	latency time.Duration

	mu   sync.Mutex
	sent map[string]int // by idempotency key
}

func (p *slowProvider) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	t := time.NewTimer(p.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ports.Receipt{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent[m.IdempotencyKey]++
	return ports.Receipt{ProviderID: "SM-" + m.IdempotencyKey}, nil
}

func (p *slowProvider) snapshot() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.sent))
	for k, n := range p.sent {
		out[k] = n
	}
	return out
}

// Point 6 with the real domain service and MaxInFlight 16: a member joins
// while the first one has many records in hand, and the revoke that ends
// those records' session neither loses a notification nor sends one twice.
// The first member's log proves records were in hand when it was revoked.
func TestConsumer_RebalanceDuringConcurrentHandling(t *testing.T) {
	t.Parallel()
	const partitions, total, shipments = 4, 800, 64
	topic := uniqueName(t, "rebalance-concurrent")
	brokers := testBrokers(t, partitions, topic)

	store := memory.New(nil) // shared, as Redis is by every worker
	provider := &slowProvider{latency: 20 * time.Millisecond, sent: map[string]int{}}
	service := func() *domain.Service {
		svc, err := domain.NewService(domain.Config{
			Store:        store,
			Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelSMS: provider},
			SendTimeout:  time.Second,
			ClaimTTL:     10 * time.Second,
			ClaimWaitMax: 20 * time.Millisecond,
			Logger:       slog.New(slog.NewJSONHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatalf("NewService: %v", err)
		}
		return svc
	}
	event := func(i int) kafka.Message {
		shipment := fmt.Sprintf("SHP-%d", i%shipments)
		return kafka.Message{Key: []byte(shipment), Value: fmt.Appendf(nil,
			`{"event_id":"evt-%04d","type":"shipment.out_for_delivery","shipment_id":%q,`+
				`"recipient":{"name":"Ada","phone":"+31201234567"},"channels":["sms"],"data":{"eta":"14:00-16:00"}}`, i, shipment)}
	}
	publish := func(from, to int) {
		msgs := make([]kafka.Message, 0, to-from)
		for i := from; i < to; i++ {
			msgs = append(msgs, event(i))
		}
		MustPublish(t, brokers, topic, msgs...)
	}

	cfgA, logsA := testConfig(brokers, topic)
	cfgA.MaxInFlight = 16
	// Commits far apart: what the revoke commits is what keeps the replay
	// short, and whatever is replayed past it the store must suppress.
	cfgA.CommitInterval = 500 * time.Millisecond
	cfgB, _ := testConfig(brokers, topic)
	cfgB.MaxInFlight, cfgB.CommitInterval = cfgA.MaxInFlight, cfgA.CommitInterval

	publish(0, total/2)
	rcA := MustRun(t, cfgA, service())
	wait.For(t, 10*time.Second, "member a sending", func() bool { return len(provider.snapshot()) >= 50 })
	rcB := MustRun(t, cfgB, service())
	publish(total/2, total) // records keep flowing while the group rebalances
	wait.For(t, 30*time.Second, "every notification sent", func() bool { return len(provider.snapshot()) == total })
	wait.For(t, 10*time.Second, "both members holding partitions", func() bool { return rcA.c.Assigned() > 0 && rcB.c.Assigned() > 0 })
	// Before any shutdown: every partition_stopping of member a so far
	// comes from a revoke.
	revokeLog := logsA.String()
	rcB.MustStop(t, 10*time.Second)
	rcA.MustStop(t, 10*time.Second)

	t.Run("RecordsInHandWhenRevoked", func(t *testing.T) {
		most, revokes := 0, 0
		for _, line := range strings.Split(revokeLog, "\n") {
			var m struct {
				Msg    string `json:"msg"`
				InHand int    `json:"in_hand"`
			}
			if json.Unmarshal([]byte(line), &m) != nil || m.Msg != "partition_stopping" {
				continue
			}
			revokes++
			most = max(most, m.InHand)
		}
		if revokes == 0 {
			t.Fatal("member a logged no partition_stopping before shutdown: no rebalance revoked its partitions")
		}
		if most < 2 {
			t.Fatalf("at most %d record(s) in hand on a revoked partition, want >= 2: the rebalance did not meet concurrent handling", most)
		}
	})
	t.Run("NothingLost", func(t *testing.T) {
		sent := provider.snapshot()
		for i := range total {
			if k := domain.NotificationKey(fmt.Sprintf("evt-%04d", i), ports.ChannelSMS); sent[k] == 0 {
				t.Errorf("%s never sent", k)
			}
		}
	})
	t.Run("NothingSentTwice", func(t *testing.T) {
		for k, n := range provider.snapshot() {
			if n != 1 {
				t.Errorf("%s sent %d times", k, n)
			}
		}
	})
	t.Run("CommittedToTheEnd", func(t *testing.T) {
		ends := map[int32]int64{}
		for _, m := range readTopic(t, brokers, topic) {
			ends[m.Partition] = max(ends[m.Partition], m.Offset+1)
		}
		got := committedOffsets(t, brokers, cfgA.GroupID, topic, partitions)
		for p, want := range ends {
			if got[p] != want {
				t.Errorf("partition %d committed at %d, want %d (its end)", p, got[p], want)
			}
		}
	})
}
