package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// seenBy records which partitions a member's handler was given records
// of, how often each value was handled across the group, and who handled
// each record (a partition and offset).
type seenBy struct {
	mu         sync.Mutex
	partitions map[string]map[int32]bool // member -> partitions
	values     map[string]int            // value -> times handled, group-wide
	records    map[record][]string       // record -> the members that handled it, in order
}

// record is one record of the log: its value where the log holds it.
type record struct {
	value     string
	partition int32
	offset    int64
}

func (r record) String() string { return fmt.Sprintf("%s (p%d@%d)", r.value, r.partition, r.offset) }

func newSeenBy() *seenBy {
	return &seenBy{partitions: map[string]map[int32]bool{}, values: map[string]int{}, records: map[record][]string{}}
}

// handler returns member's handler: it notes the record and returns nil.
func (s *seenBy) handler(member string) ports.Handler {
	return ports.HandlerFunc(func(_ context.Context, rec ports.Record) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.partitions[member] == nil {
			s.partitions[member] = map[int32]bool{}
		}
		s.partitions[member][rec.Partition] = true
		s.values[string(rec.Value)]++
		r := record{string(rec.Value), rec.Partition, rec.Offset}
		s.records[r] = append(s.records[r], member)
		return nil
	})
}

// of returns the partitions member was given records of, sorted.
func (s *seenBy) of(member string) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.partitions[member]))
}

// handled reports whether every value of msgs was handled.
func (s *seenBy) handled(msgs []kafka.Message) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		if s.values[string(m.Value)] == 0 {
			return false
		}
	}
	return true
}

// twice returns the records handled more than once, each with the
// members that handled it. A record is a partition and offset: a value the
// log holds twice (a publisher's retry of a write that had landed) is two
// records, each to be handled once.
func (s *seenBy) twice() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for r, by := range s.records {
		if len(by) > 1 {
			out = append(out, fmt.Sprintf("%v by %s", r, strings.Join(by, ", ")))
		}
	}
	slices.Sort(out)
	return out
}

// inLogTwice returns the values handled at more than one offset: the log
// holds them more than once.
func (s *seenBy) inLogTwice() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := map[string][]string{}
	for r := range s.records {
		at[r.value] = append(at[r.value], fmt.Sprintf("p%d@%d", r.partition, r.offset))
	}
	var out []string
	for v, where := range at {
		if len(where) > 1 {
			slices.Sort(where)
			out = append(out, v+" at "+strings.Join(where, " and "))
		}
	}
	slices.Sort(out)
	return out
}

// round returns one record per partition, valued "<name>-p<partition>".
func round(t *testing.T, topic string, partitions int32, name string) []kafka.Message {
	t.Helper()
	msgs := make([]kafka.Message, partitions)
	for p := range partitions {
		msgs[p] = kafka.Message{Key: []byte(keysOn(t, topic, p, partitions, 1)[0]), Value: fmt.Appendf(nil, "%s-p%d", name, p)}
	}
	return msgs
}

// A static member restarted within the session timeout gets its own
// partitions back, and the other member gives up none of its partitions
// meanwhile. A dynamic member's restart, for contrast, moves partitions.
func TestConsumer_StaticMemberRestartKeepsPartitions(t *testing.T) {
	for _, tt := range []struct {
		name        string
		static      bool
		wantRelease bool
	}{
		{name: "Static", static: true, wantRelease: false},
		{name: "Dynamic", static: false, wantRelease: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const partitions = 4
			topic := uniqueName(t, "static")
			brokers := testBrokers(t, partitions, topic)
			member := func(id string) (testSetup, *logtest.Buffer) {
				cfg, logs := testConfig(brokers, topic)
				cfg.RebalanceStrategy = kafka.StrategyCooperativeSticky
				cfg.SessionTimeout = 6 * time.Second
				cfg.HeartbeatInterval = 200 * time.Millisecond
				if tt.static {
					cfg.GroupInstanceID = id
				}
				return cfg, logs
			}
			seen := newSeenBy()
			cfgA, _ := member("worker-a")
			cfgB, logsB := member("worker-b")
			a := MustRun(t, cfgA, seen.handler("a"))
			wait.For(t, 20*time.Second, "a to hold partitions", func() bool { return a.c.Assigned() > 0 })
			b := MustRun(t, cfgB, seen.handler("b"))
			wait.For(t, 20*time.Second, "b to hold partitions", func() bool { return b.c.Assigned() > 0 })
			first := round(t, topic, partitions, "first")
			MustPublish(t, brokers, topic, first...)
			wait.For(t, 20*time.Second, "the first round handled", func() bool { return seen.handled(first) })
			ofA, ofB := seen.of("a"), seen.of("b")
			if len(ofA) == 0 || len(ofB) == 0 || len(ofA)+len(ofB) != partitions {
				t.Fatalf("before the restart a holds %v, b %v; want the %d partitions split", ofA, ofB, partitions)
			}
			releasedBefore := strings.Count(logsB.String(), `"msg":"partition_released"`)

			// a stops, and records arrive for every partition while it is
			// away.
			a.MustStop(t, 10*time.Second)
			gap := round(t, topic, partitions, "gap")
			MustPublish(t, brokers, topic, gap...)
			if tt.wantRelease {
				// A dynamic member left the group: b takes its partitions.
				wait.For(t, 20*time.Second, "b to take over a's partitions", func() bool { return seen.handled(gap) })
			} else {
				// b keeps consuming its own partitions meanwhile.
				var gapOfB []kafka.Message
				for _, p := range ofB {
					gapOfB = append(gapOfB, gap[p])
				}
				wait.For(t, 20*time.Second, "b to handle the records of its partitions", func() bool { return seen.handled(gapOfB) })
				if got := seen.of("b"); !slices.Equal(got, ofB) {
					t.Fatalf("while static a was away b was given records of %v, want only its own %v", got, ofB)
				}
			}
			a2 := MustRun(t, cfgA, seen.handler("a2"))
			wait.For(t, 20*time.Second, "the restarted a to hold partitions", func() bool { return a2.c.Assigned() > 0 })
			second := round(t, topic, partitions, "second")
			MustPublish(t, brokers, topic, second...)
			wait.For(t, 20*time.Second, "the rest handled", func() bool { return seen.handled(gap) && seen.handled(second) })

			released := strings.Count(logsB.String(), `"msg":"partition_released"`) - releasedBefore
			if tt.wantRelease {
				// ... and gives some back when a rejoins.
				if released == 0 {
					t.Errorf("b released no partition when a dynamic a rejoined; the contrast does not hold")
				}
				return
			}
			if released != 0 {
				t.Errorf("b released %d partitions while static a restarted, want none", released)
			}
			if got := seen.of("a2"); !slices.Equal(got, ofA) {
				t.Errorf("restarted a holds %v, want its own %v back", got, ofA)
			}
			if got := seen.of("b"); !slices.Equal(got, ofB) {
				t.Errorf("b was given records of %v, want only its own %v", got, ofB)
			}
			if d := seen.twice(); len(d) > 0 {
				t.Errorf("handled twice: %v", d)
			}
		})
	}
}

// heldCalls blocks one record per partition, valued "hold-p<partition>",
// until its context is done; it notes whose context was cancelled.
type heldCalls struct {
	mu        sync.Mutex
	running   map[int32]bool // partition -> call running
	cancelled map[int32]bool
}

func (h *heldCalls) handler(seen ports.Handler) ports.Handler {
	return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if !strings.HasPrefix(string(rec.Value), "hold-") {
			return seen.Handle(ctx, rec)
		}
		h.mu.Lock()
		h.running[rec.Partition] = true
		h.mu.Unlock()
		<-ctx.Done()
		h.mu.Lock()
		h.running[rec.Partition] = false
		h.cancelled[rec.Partition] = true
		h.mu.Unlock()
		return ctx.Err()
	})
}

func (h *heldCalls) state() (running, cancelled []int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for p, r := range h.running {
		if r {
			running = append(running, p)
		}
	}
	for p := range h.cancelled {
		cancelled = append(cancelled, p)
	}
	slices.Sort(running)
	slices.Sort(cancelled)
	return running, cancelled
}

// With cooperative-sticky assignment a second member joining takes some
// partitions, and the handler calls on the partitions the first member
// keeps run on, uncancelled, through the rebalance; those partitions keep
// delivering new records meanwhile. With eager range every call is
// cancelled. The calls on the partitions that move are cancelled (after
// ShutdownTimeout) and their records replayed to the new owner, also when
// every partition is waiting for a fetch-window token rather than reading
// its Messages channel (WindowFull): the revoke reaches it through the
// assignment, or the rebalance would wait for the rebalance timeout.
func TestConsumer_CooperativeRebalanceKeepsHandlersRunning(t *testing.T) {
	for _, tt := range []struct {
		strategy   string
		keepCalled bool
		// windowFull: records queued behind the held ones take every
		// fetch-window token, so each partition waits for a token, not
		// on its Messages channel, when the rebalance comes.
		windowFull bool
	}{
		{kafka.StrategyCooperativeSticky, true, false},
		{kafka.StrategyCooperativeSticky, true, true},
		{kafka.StrategyRange, false, false},
	} {
		name := tt.strategy
		if tt.windowFull {
			name += "/WindowFull"
		}
		t.Run(name, func(t *testing.T) {
			const partitions = 4
			topic := uniqueName(t, "coop")
			brokers := testBrokers(t, partitions, topic)
			cfg, _ := testConfig(brokers, topic)
			cfg.RebalanceStrategy = tt.strategy
			cfg.ShutdownTimeout = 200 * time.Millisecond
			if tt.windowFull {
				cfg.MaxInFlight = partitions // a window of 4*partitions records
			}
			seen := newSeenBy()
			held := &heldCalls{running: map[int32]bool{}, cancelled: map[int32]bool{}}

			a := MustRun(t, cfg, held.handler(seen.handler("a")))
			wait.For(t, 20*time.Second, "a to hold partitions", func() bool { return a.c.Assigned() > 0 })
			MustPublish(t, brokers, topic, round(t, topic, partitions, "hold")...)
			wait.For(t, 20*time.Second, "a call held on every partition", func() bool {
				running, _ := held.state()
				return len(running) == partitions
			})
			if tt.windowFull {
				held4 := a.c.BufferedBytes() // the 4 held records
				// Behind each held record, on its key: more than the
				// window has tokens left.
				var fill []kafka.Message
				for p := range int32(partitions) {
					key := keysOn(t, topic, p, partitions, 1)[0]
					for i := range 4 * partitions {
						fill = append(fill, kafka.Message{Key: []byte(key), Value: fmt.Appendf(nil, "fill-p%d-%d", p, i)})
					}
				}
				MustPublish(t, brokers, topic, fill...)
				// 64 records for the 12 tokens left: once 15 records' worth
				// of bytes are held (the filler records are the held ones'
				// size), the window is full or a record from it.
				wait.For(t, 10*time.Second, "the fetch window to fill", func() bool {
					return a.c.BufferedBytes() >= held4*15/4
				})
			}

			b := MustRun(t, cfg, seen.handler("b"))
			wait.For(t, 30*time.Second, "b to hold partitions", func() bool { return b.c.Assigned() > 0 })
			// b handles the held records of the partitions it took, half of
			// them with two members: replayed.
			wait.For(t, 30*time.Second, "b to handle the records of the half it took over", func() bool {
				return len(seen.of("b")) == partitions/2
			})
			ofB := seen.of("b")
			running, cancelled := held.state()
			if !tt.keepCalled {
				if len(cancelled) != partitions {
					t.Errorf("eager: calls cancelled on %v, want all %d partitions", cancelled, partitions)
				}
				return
			}
			if !slices.Equal(cancelled, ofB) {
				t.Errorf("calls cancelled on %v, want exactly the partitions b took, %v", cancelled, ofB)
			}
			var kept []int32
			for p := range int32(partitions) {
				if !slices.Contains(ofB, p) {
					kept = append(kept, p)
				}
			}
			if !slices.Equal(running, kept) {
				t.Fatalf("calls still running on %v, want on every partition a kept, %v", running, kept)
			}
			if tt.windowFull {
				// The kept partitions' queued records fill the window
				// again: new records wait for the held calls, by design.
				return
			}
			// A kept partition still delivers: a record with another key
			// goes past the held one.
			var next []kafka.Message
			for _, p := range kept {
				next = append(next, kafka.Message{Key: []byte(keysOn(t, topic, p, partitions, 2)[1]), Value: fmt.Appendf(nil, "next-p%d", p)})
			}
			MustPublish(t, brokers, topic, next...)
			wait.For(t, 20*time.Second, "a to handle new records on the partitions it kept", func() bool { return seen.handled(next) })
			if running2, _ := held.state(); !slices.Equal(running2, kept) {
				t.Errorf("after the rebalance calls running on %v, want still %v", running2, kept)
			}
		})
	}
}

// The two-step migration from range: each step runs a mixed group, which
// must deliver every record once and give each member partitions. Step
// 1: range and cooperative-sticky,range members (eager protocol). Step 2:
// cooperative-sticky,range and cooperative-sticky members. Range and
// cooperative-sticky alone share no protocol: the broker refuses the
// second member, which is why the migration takes two steps.
func TestConsumer_MigrationFromRangeMixedGroups(t *testing.T) {
	for _, tt := range []struct {
		name   string
		first  string
		second string
	}{
		{"Step1", kafka.StrategyRange, kafka.StrategyCooperativeStickyRange},
		{"Step2", kafka.StrategyCooperativeStickyRange, kafka.StrategyCooperativeSticky},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const partitions = 4
			topic := uniqueName(t, "migrate")
			brokers := testBrokers(t, partitions, topic)
			cfgA, _ := testConfig(brokers, topic)
			cfgA.RebalanceStrategy = tt.first
			cfgB, _ := testConfig(brokers, topic)
			cfgB.RebalanceStrategy = tt.second
			seen := newSeenBy()
			a := MustRun(t, cfgA, seen.handler("a"))
			wait.For(t, 20*time.Second, "a to hold partitions", func() bool { return a.c.Assigned() > 0 })
			b := MustRun(t, cfgB, seen.handler("b"))
			wait.For(t, 30*time.Second, "both members to hold partitions", func() bool { return a.c.Assigned() > 0 && b.c.Assigned() > 0 })
			msgs := numbered(200, "m", distinctKeys)
			MustPublish(t, brokers, topic, msgs...)
			wait.For(t, 30*time.Second, "every record handled", func() bool { return seen.handled(msgs) })
			ofA, ofB := seen.of("a"), seen.of("b")
			if len(ofA) == 0 || len(ofB) == 0 || len(ofA)+len(ofB) != partitions {
				t.Errorf("a handled %v, b %v; want the %d partitions split", ofA, ofB, partitions)
			}
			if d := seen.twice(); len(d) > 0 {
				t.Errorf("handled twice in a stable mixed group: %v", d)
			}
			if d := seen.inLogTwice(); len(d) > 0 {
				t.Logf("the log holds these values more than once, and each copy was handled once: %v", d)
			}
		})
	}
	t.Run("RangeWithCooperativeOnlyRefused", func(t *testing.T) {
		const partitions = 2
		topic := uniqueName(t, "migrate")
		brokers := testBrokers(t, partitions, topic)
		cfgA, _ := testConfig(brokers, topic)
		cfgA.RebalanceStrategy = kafka.StrategyRange
		cfgB, logsB := testConfig(brokers, topic)
		cfgB.RebalanceStrategy = kafka.StrategyCooperativeSticky
		a := MustRun(t, cfgA, ports.HandlerFunc(func(context.Context, ports.Record) error { return nil }))
		wait.For(t, 20*time.Second, "a to hold partitions", func() bool { return a.c.Assigned() > 0 })
		MustRun(t, cfgB, ports.HandlerFunc(func(context.Context, ports.Record) error { return nil }))
		wait.For(t, 20*time.Second, "b's join to be refused", func() bool {
			return strings.Contains(logsB.String(), `"msg":"consume_failed"`) && strings.Contains(logsB.String(), "protocol")
		})
	})
}
