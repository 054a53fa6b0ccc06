package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// deployLedger is the handler of every worker of a rolling deploy: the
// claim/record protocol on a shared in-memory store around a 50 ms send.
// It notes each delivery (a handler call that got past the claim) and each
// send, per record.
type deployLedger struct {
	store *memory.Store

	mu         sync.Mutex
	deliveries map[string]int // value -> handler calls that claimed or found it sent
	sends      map[string]int // value -> sends
	// last[p] is when a record of partition p was last delivered, and by
	// whom; stood[p] the longest gap between two deliveries on p while
	// measuring.
	last      map[int32]delivery
	stood     map[int32]time.Duration
	measuring bool
}

type delivery struct {
	at     time.Time
	worker string
}

func newDeployLedger() *deployLedger {
	return &deployLedger{
		store: memory.New(nil), deliveries: map[string]int{}, sends: map[string]int{},
		last: map[int32]delivery{}, stood: map[int32]time.Duration{},
	}
}

func (l *deployLedger) handler(worker string) ports.Handler {
	return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		key := string(rec.Value)
		claim, err := l.store.Claim(ctx, key, worker+"/"+key, "", "", time.Minute)
		if err != nil {
			return err
		}
		if claim.State == ports.InFlight {
			return ports.MarkUnavailable(fmt.Errorf("%s is being sent by %s", key, claim.Lease.Token))
		}
		l.mu.Lock()
		l.deliveries[key]++
		now := time.Now()
		if prev, ok := l.last[rec.Partition]; ok && l.measuring {
			l.stood[rec.Partition] = max(l.stood[rec.Partition], now.Sub(prev.at))
		}
		l.last[rec.Partition] = delivery{at: now, worker: worker}
		l.mu.Unlock()
		if claim.State != ports.Claimed {
			return nil // sent before: suppressed
		}
		time.Sleep(50 * time.Millisecond) // the provider
		l.mu.Lock()
		l.sends[key]++
		l.mu.Unlock()
		return l.store.Record(ctx, key, ports.Receipt{ProviderID: key, SentAt: time.Now()}, time.Hour)
	})
}

// measure starts or stops the stand-still measurement; starting forgets
// the gaps so far.
func (l *deployLedger) measure(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.measuring = on
	if on {
		l.stood = map[int32]time.Duration{}
		for p, d := range l.last {
			l.last[p] = delivery{at: time.Now(), worker: d.worker}
		}
	}
}

// owners returns the partitions whose last delivery was by worker.
func (l *deployLedger) owners(worker string) map[int32]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]bool{}
	for p, d := range l.last {
		if d.worker == worker {
			out[p] = true
		}
	}
	return out
}

// stoodSince returns the longest gap on each partition since measure(true),
// counting the gap still open now.
func (l *deployLedger) stoodNow() map[int32]time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]time.Duration{}
	for p, d := range l.last {
		out[p] = max(l.stood[p], time.Since(d.at))
	}
	return out
}

func (l *deployLedger) counts(values []string) (missing, replayed, sentTwice int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range values {
		switch d := l.deliveries[v]; {
		case d == 0:
			missing++
		case d > 1:
			replayed += d - 1
		}
		if s := l.sends[v]; s > 1 {
			sentTwice += s - 1
		}
	}
	return missing, replayed, sentTwice
}

// deployRow is one line of the rolling-deploy table.
type deployRow struct {
	name                  string
	records, replayed     int
	sentTwice             int
	baseline              time.Duration
	stoodAny, stoodOthers time.Duration
	releasedByOthers      int
}

// TestConsumer_RollingDeploy restarts three workers one at a time under
// steady load (200 records/s, 50 ms sends), each away for a second, the
// way a rollout does, once per setting, and prints what each cost:
// records delivered twice, the longest gap between records on a partition
// in the steady state before (the baseline), the longest any partition
// stood still during the rollout, the longest a partition of a
// worker not being restarted stood still, and duplicate sends, which must
// be 0 everywhere. With cooperative-sticky and static membership a
// restart may replay at most what that worker had in flight, and the
// other workers release no partition.
func TestConsumer_RollingDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("a rolling deploy takes about 40 s")
	}
	// Alongside the package's other tests: its assertions are counts, and
	// the figures it prints are read from runs of it alone (-run).
	t.Parallel()
	const (
		partitions = 6
		workers    = 3
		perSecond  = 200
		settle     = time.Second
		// restartGap is how long a worker is away: a pod's restart
		// (stop, new pod, start) takes at least this.
		restartGap = time.Second
	)
	var rows []deployRow
	for _, tt := range []struct {
		name     string
		strategy string
		static   bool
	}{
		{"eager range", kafka.StrategyRange, false},
		{"cooperative-sticky", kafka.StrategyCooperativeSticky, false},
		{"cooperative-sticky + static", kafka.StrategyCooperativeSticky, true},
	} {
		t.Run(strings.NewReplacer(" ", "", "+", "-").Replace(tt.name), func(t *testing.T) {
			topic := uniqueName(t, "rolling")
			brokers := testBrokers(t, partitions, topic)
			ledger := newDeployLedger()
			configs := make([]testSetup, workers)
			logs := make([]*logtest.Buffer, workers)
			for i := range workers {
				configs[i], logs[i] = testConfig(brokers, topic)
				configs[i].RebalanceStrategy = tt.strategy
				configs[i].SessionTimeout = 6 * time.Second
				configs[i].HeartbeatInterval = 200 * time.Millisecond
				if tt.static {
					configs[i].GroupInstanceID = fmt.Sprintf("worker-%d", i)
				}
			}
			running := make([]*runningConsumer, workers)
			for i := range workers {
				running[i] = MustRun(t, configs[i], ledger.handler(fmt.Sprintf("w%d", i)))
			}
			wait.For(t, 30*time.Second, "every worker to hold partitions", func() bool {
				for _, r := range running {
					if r.c.Assigned() == 0 {
						return false
					}
				}
				return true
			})

			// Steady load, bounded in time.
			ctx, stopLoad := context.WithCancel(context.Background())
			defer stopLoad()
			var values []string
			var valuesMu sync.Mutex
			loadDone := make(chan struct{})
			publisher, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			defer func() {
				stopLoad()
				<-loadDone
				publisher.Close()
			}()
			go func() {
				defer close(loadDone)
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for n := 0; n < perSecond*120; {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					batch := numbered(perSecond/20, fmt.Sprintf("r%d", n), distinctKeys)
					n += len(batch)
					if err := publisher.Publish(ctx, topic, batch...); err != nil {
						if ctx.Err() == nil {
							t.Errorf("publish: %v", err)
						}
						return
					}
					valuesMu.Lock()
					for _, m := range batch {
						values = append(values, string(m.Value))
					}
					valuesMu.Unlock()
				}
			}()
			wait.For(t, 10*time.Second, "every partition to deliver", func() bool { return len(ledger.stoodNow()) == partitions })
			// The steady state before the first restart is the baseline: how
			// long a partition goes without a record at this load anyway.
			ledger.measure(true)
			time.Sleep(2 * settle) // a period measured, not a condition
			row := deployRow{name: tt.name}
			for _, d := range ledger.stoodNow() {
				row.baseline = max(row.baseline, d)
			}
			ledger.measure(true)

			for i := range workers {
				others := map[int32]bool{}
				for j := range workers {
					if j != i {
						for p := range ledger.owners(fmt.Sprintf("w%d", j)) {
							others[p] = true
						}
					}
				}
				released := make([]int, workers)
				for j := range workers {
					released[j] = strings.Count(logs[j].String(), `"msg":"partition_released"`)
				}
				before := ledger.stoodNow()
				running[i].MustStop(t, 20*time.Second)
				time.Sleep(restartGap) // the pod restarting: a duration simulated, not a condition
				running[i] = MustRun(t, configs[i], ledger.handler(fmt.Sprintf("w%d", i)))
				wait.For(t, 30*time.Second, "the restarted worker to hold partitions", func() bool { return running[i].c.Assigned() > 0 })
				time.Sleep(settle) // let the group run with it before the next restart
				for p, d := range ledger.stoodNow() {
					if others[p] && d > before[p] {
						row.stoodOthers = max(row.stoodOthers, d)
					}
				}
				for j := range workers {
					if j != i {
						row.releasedByOthers += strings.Count(logs[j].String(), `"msg":"partition_released"`) - released[j]
					}
				}
			}
			for _, d := range ledger.stoodNow() {
				row.stoodAny = max(row.stoodAny, d)
			}
			stopLoad()
			<-loadDone
			valuesMu.Lock()
			all := append([]string(nil), values...)
			valuesMu.Unlock()
			wait.For(t, 60*time.Second, "every record delivered", func() bool { m, _, _ := ledger.counts(all); return m == 0 })
			_, row.replayed, row.sentTwice = ledger.counts(all)
			row.records = len(all)
			rows = append(rows, row)

			if row.sentTwice != 0 {
				t.Errorf("%d duplicate sends, want 0", row.sentTwice)
			}
			if tt.static {
				if limit := workers * configs[0].MaxInFlight; row.replayed > limit {
					t.Errorf("%d records replayed over %d restarts, want at most what was in flight (%d)", row.replayed, workers, limit)
				}
				if row.releasedByOthers != 0 {
					t.Errorf("workers not being restarted released %d partitions, want none", row.releasedByOthers)
				}
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| setting | records | replayed | longest gap, steady (baseline) | longest stand-still, any partition | longest stand-still, other workers' partitions | partitions released by other workers | duplicate sends |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %s | %s | %s | %d | %d |\n", r.name, r.records, r.replayed,
			r.baseline.Round(10*time.Millisecond), r.stoodAny.Round(10*time.Millisecond), r.stoodOthers.Round(10*time.Millisecond), r.releasedByOthers, r.sentTwice)
	}
	t.Log(b.String())
}
