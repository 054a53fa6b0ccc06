package kafka

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/ports"
)

// spanPerInFlight times MaxInFlight is how many offsets a partition may
// dispatch past its lowest unfinished record.
const spanPerInFlight = 64

// windowPerInFlight times MaxInFlight is how many records a Run may hold.
const windowPerInFlight = 4

// recordOverhead is what a held record costs besides its key, value and
// headers: the message struct, its queue and tracker entries, allocator
// rounding. It keeps the byte budget honest for small records, where the
// bytes of the record itself are not most of what it takes.
const recordOverhead = 256

// flow is every bound on the work one Run holds. It is made by Run, shared
// by all the Run's partitions, and safe for concurrent use. Each bound,
// what it protects, and who takes and gives back its share:
//
//   - Records held (the window): at most 4*MaxInFlight records taken from
//     the broker and not finished, queued behind their key, waiting for a
//     slot or between attempts, or in a call. It keeps a busy key or a slow
//     provider from filling memory: once it is full the fetch loop stops
//     reading and Sarama stops fetching. The fetch loop takes a record's
//     share in take; the partition worker gives it back in give once the
//     record is finished or left for replay.
//   - Bytes held (the byte budget, MaxBufferedBytes): the same records,
//     counted by heldBytes, together at most MaxBufferedBytes; a record
//     larger than the whole budget is admitted alone. It bounds memory
//     where records are large and the window is not what binds. Taken and
//     given back with the window, by the same two. Admission is first come,
//     first served (see byteBudget).
//   - Offset span: a partition reads no further record while it has
//     64*MaxInFlight offsets or more past its lowest unfinished record,
//     finished ones included. The window bounds records unfinished, not
//     this span: behind one stuck record every later one that finishes keeps
//     an offset tracker entry until the stuck one does, so without it the
//     tracker would grow with the partition's backlog. The fetch loop waits
//     on it in partitionFlow.waitSpan; the partition worker wakes it in
//     partitionFlow.advanced when the partition's commit point moves, the
//     only time the span shrinks.
//   - Handler calls (slots): at most MaxInFlight calls of the handler Run
//     was given, across all partitions. It is what bounds concurrent sends.
//     A handler call holds a slot from the moment it starts until it
//     returns (partitionFlow.bound), and none while its record waits between
//     attempts or its dead letter is written.
//   - Abandoned and stalled calls: a call still running after its
//     partition's stop cancelled its context and waited abandonGrace is
//     abandoned (partitionFlow.abandon) and keeps its slot until it
//     returns.
//     While abandoned calls hold every slot, or, with StallAfter set, any
//     call has run longer than StallAfter, the Run is wedged: no bound
//     above frees itself, and only a restart is sure to.
type flow struct {
	log         *slog.Logger
	metrics     Metrics
	maxInFlight int
	stallAfter  time.Duration
	maxSpan     int64
	start       time.Time // when the Run began; origin of started

	// window holds one token per record held.
	window chan struct{}
	// budget counts the bytes of the records held.
	budget *byteBudget
	// slots holds the free handler-call slots, 0 to MaxInFlight-1.
	slots chan int
	// started[slot] is when the call holding slot started, as time since
	// start plus one (monotonic), or 0 while the slot is free.
	started []atomic.Int64
	// abandoned counts the abandoned calls that have not returned: each
	// holds a slot.
	abandoned atomic.Int64
	// stallLogged is set while the Run is stalled and has said so.
	stallLogged atomic.Bool
}

// newFlow returns the bounds of one Run of a consumer configured by cfg
// (defaults applied), logging to log.
func newFlow(cfg Config, log *slog.Logger) *flow {
	f := &flow{
		log:         log,
		metrics:     cfg.Metrics,
		maxInFlight: cfg.MaxInFlight,
		stallAfter:  cfg.StallAfter,
		maxSpan:     int64(spanPerInFlight * cfg.MaxInFlight),
		start:       time.Now(),
		window:      make(chan struct{}, windowPerInFlight*cfg.MaxInFlight),
		budget:      newByteBudget(cfg.MaxBufferedBytes),
		slots:       make(chan int, cfg.MaxInFlight),
		started:     make([]atomic.Int64, cfg.MaxInFlight),
	}
	for slot := range cfg.MaxInFlight {
		f.slots <- slot
	}
	return f
}

// take waits until msg fits in the window and the byte budget, then returns
// the copy of msg to hold (see detach) and true; or false, having taken
// nothing, once done is closed first. Only a fetch loop calls it; every
// record it returns must be given back with give.
func (f *flow) take(msg *sarama.ConsumerMessage, done <-chan struct{}) (*sarama.ConsumerMessage, bool) {
	select {
	case f.window <- struct{}{}:
	case <-done:
		return nil, false
	}
	if !f.budget.acquire(heldBytes(msg), done) {
		<-f.window
		return nil, false
	}
	return detach(msg), true
}

// give gives back what take took for msg, the copy take returned. The
// partition worker calls it once per record, finished or not.
func (f *flow) give(msg *sarama.ConsumerMessage) {
	f.budget.release(heldBytes(msg))
	<-f.window
}

// heldBytes returns the bytes of the records held now.
func (f *flow) heldBytes() int64 { return f.budget.held() }

// wedged reports whether abandoned calls hold every slot, or a call has
// stalled (see stalled).
func (f *flow) wedged() bool {
	return f.abandoned.Load() >= int64(f.maxInFlight) || f.stalled()
}

// stalled reports whether StallAfter is set and a handler call has been
// running for longer than it. One such call is enough: StallAfter is set
// above anything a handler can legitimately take, and a hung call holds
// its key's later records, its partition's commit and, through them, the
// window, so the Run can stall with only one slot taken. It scans the
// MaxInFlight slots, and logs handlers_stalled the first time it turns
// true.
func (f *flow) stalled() bool {
	if f.stallAfter <= 0 {
		return false
	}
	now := time.Since(f.start)
	var oldest time.Duration
	for i := range f.started {
		if at := f.started[i].Load(); at != 0 {
			oldest = max(oldest, now-time.Duration(at-1))
		}
	}
	if oldest <= f.stallAfter {
		f.stallLogged.Store(false)
		return false
	}
	if f.stallLogged.CompareAndSwap(false, true) {
		f.log.Error("handlers_stalled", "oldest_call", oldest.Round(time.Second),
			"stall_after", f.stallAfter, "max_in_flight", f.maxInFlight)
	}
	return true
}

// partitionFlow is one partition's share of its Run's flow: the offset span
// it may dispatch, and its handler calls, which its stop may abandon. It is
// made with the partition and lives as long as it.
type partitionFlow struct {
	flow     *flow
	log      *slog.Logger
	stopping <-chan struct{} // the partition's: closed once it stops

	// wake gets a token (never blocking) each time the partition's commit
	// point moves.
	wake chan struct{}

	mu sync.Mutex
	// calling counts the partition's calls holding a slot. Guarded by mu.
	calling int
	// abandoned is set once stop gave up on the partition's calls: each of
	// them counts in flow.abandoned until it returns. Guarded by mu.
	abandoned bool
}

// share returns the share of a partition that logs to log and stops
// when stopping is closed.
func (f *flow) share(log *slog.Logger, stopping <-chan struct{}) *partitionFlow {
	return &partitionFlow{flow: f, log: log, stopping: stopping, wake: make(chan struct{}, 1)}
}

// waitSpan returns true once span reports fewer than 64*MaxInFlight
// offsets, so the next record may be read, or false when done is closed
// first. span returns the partition's span and lowest unfinished offset.
// Only the partition's fetch loop calls it; it logs
// partition_dispatch_paused once per pause and partition_dispatch_resumed
// at its end.
func (s *partitionFlow) waitSpan(done <-chan struct{}, span func() (span, lowest int64)) bool {
	paused := false
	for {
		n, lowest := span()
		if n < s.flow.maxSpan {
			if paused {
				s.log.Info("partition_dispatch_resumed", "span", n)
			}
			return true
		}
		if !paused {
			paused = true
			s.log.Warn("partition_dispatch_paused", "lowest_unfinished", lowest, "span", n, "max_span", s.flow.maxSpan)
		}
		select {
		case <-s.wake:
		case <-done:
			return false
		}
	}
}

// advanced tells waitSpan that the partition's commit point moved. The
// partition worker calls it; it never blocks.
func (s *partitionFlow) advanced() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is already pending; waitSpan re-checks
	}
}

// bound returns h with each call holding a slot: a call waits for a free
// one, and returns ports.ErrStopping without calling h once the partition
// is stopping. The partition worker runs the handler chain around it, so a
// record holds a slot only while h runs.
func (s *partitionFlow) bound(h ports.Handler) ports.Handler {
	return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		slot, ok := s.acquire()
		if !ok {
			return ports.ErrStopping
		}
		s.mu.Lock()
		s.calling++
		if s.abandoned {
			// Started as stop gave up: abandoned too, counted here since
			// abandon's count missed it (callDone takes it off either way).
			s.flow.abandoned.Add(1)
			s.flow.metrics.HandlersAbandoned(1)
		}
		s.mu.Unlock()
		defer s.release(slot)
		defer s.callDone()
		return h.Handle(ctx, rec)
	})
}

// acquire takes a slot and notes when, or reports false once stopping. A
// call that got its slot just as stopping closed gives it back: stopping
// means no new work starts.
func (s *partitionFlow) acquire() (slot int, ok bool) {
	if isClosed(s.stopping) {
		return 0, false
	}
	select {
	case slot = <-s.flow.slots:
	case <-s.stopping:
		return 0, false
	}
	if isClosed(s.stopping) {
		s.flow.slots <- slot
		return 0, false
	}
	s.flow.started[slot].Store(int64(time.Since(s.flow.start)) + 1)
	return slot, true
}

// release gives slot back.
func (s *partitionFlow) release(slot int) {
	s.flow.started[slot].Store(0)
	s.flow.slots <- slot
}

// callDone counts a call out of the partition's calls, and out of the
// Run's abandoned calls if stop gave up on it.
func (s *partitionFlow) callDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calling--
	if s.abandoned {
		s.flow.abandoned.Add(-1)
		s.flow.metrics.HandlersAbandoned(-1)
	}
}

// abandon marks the partition's calls still running as abandoned, and every
// call that starts after: each keeps its slot, and counts among the Run's
// abandoned calls, until it returns. It returns how many it abandoned now
// and how many the Run has. Only the partition's stop calls it, once.
func (s *partitionFlow) abandon() (calls int, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abandoned = true
	total = s.flow.abandoned.Add(int64(s.calling))
	s.flow.metrics.HandlersAbandoned(s.calling)
	return s.calling, total
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// heldBytes is what msg counts against the byte budget while it is held.
func heldBytes(msg *sarama.ConsumerMessage) int64 {
	n := int64(recordOverhead + len(msg.Key) + len(msg.Value))
	for _, h := range msg.Headers {
		if h != nil {
			n += int64(len(h.Key) + len(h.Value))
		}
	}
	return n
}

// detach returns a copy of msg whose key, value and headers live in one
// allocation of their own. Sarama's records are slices of the fetch
// response they came in, which holds every partition's records of that
// fetch: a held record that shared it would keep the whole response alive,
// and the byte budget would count a fraction of what memory holds.
func detach(msg *sarama.ConsumerMessage) *sarama.ConsumerMessage {
	buf := make([]byte, 0, heldBytes(msg)-recordOverhead)
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	out := *msg
	out.Key = clone(msg.Key)
	out.Value = clone(msg.Value)
	if msg.Headers != nil {
		out.Headers = make([]*sarama.RecordHeader, 0, len(msg.Headers))
		for _, h := range msg.Headers {
			if h == nil {
				continue
			}
			out.Headers = append(out.Headers, &sarama.RecordHeader{Key: clone(h.Key), Value: clone(h.Value)})
		}
	}
	return &out
}

// byteBudget is the byte budget's admission queue. It is safe for
// concurrent use.
//
// A request is admitted when it fits beside what is admitted, or alone when
// nothing is, so one record larger than the whole budget still makes
// progress. Admission is first come, first served once anyone waits: a
// large record at the head of the queue is not overtaken by smaller ones
// that happen to fit, so it is admitted once enough held records finish.
// What is admitted is released without needing the budget, so waiting
// always ends.
type byteBudget struct {
	limit int64

	mu    sync.Mutex
	used  int64        // guarded by mu
	queue []*admission // waiting, in arrival order; guarded by mu
}

type admission struct {
	n     int64
	ready chan struct{} // closed once admitted: used already counts n
}

func newByteBudget(limit int64) *byteBudget { return &byteBudget{limit: limit} }

// fits reports whether n bytes may be admitted now. The caller holds mu.
func (b *byteBudget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

// acquire waits until n bytes are admitted and reports true, or reports
// false once done is closed first, having admitted nothing.
func (b *byteBudget) acquire(n int64, done <-chan struct{}) bool {
	b.mu.Lock()
	if len(b.queue) == 0 && b.fits(n) {
		b.used += n
		b.mu.Unlock()
		return true
	}
	a := &admission{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, a)
	b.mu.Unlock()

	select {
	case <-a.ready:
		return true
	case <-done:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-a.ready:
		// Admitted as done closed: give it back.
		b.used -= n
	default:
		for i, q := range b.queue {
			if q == a {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	// The head may have changed, or room been given back.
	b.admitLocked()
	return false
}

// release gives back n bytes admitted by acquire.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.admitLocked()
}

// admitLocked admits waiting requests in order while the head fits. The
// caller holds mu.
func (b *byteBudget) admitLocked() {
	for len(b.queue) > 0 && b.fits(b.queue[0].n) {
		a := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.used += a.n
		close(a.ready)
	}
}

// held returns the bytes admitted and not yet released.
func (b *byteBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
