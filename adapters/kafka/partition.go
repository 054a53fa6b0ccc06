package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/ports"
)

// abandonGrace is how long stop waits, after cancelling the handlers'
// context, for handlers to notice before it gives up on them.
const abandonGrace = time.Second

// Dead letter header names.
const (
	HeaderDLQReason            = "dlq.reason"
	HeaderDLQKind              = "dlq.kind"
	HeaderDLQOriginalTopic     = "dlq.original.topic"
	HeaderDLQOriginalPartition = "dlq.original.partition"
	HeaderDLQOriginalOffset    = "dlq.original.offset"
	// HeaderDLQValueDropped is set, to the original value's size in bytes,
	// on a dead letter whose value the broker refused as too large: the
	// record is in the topic it came from, and the other headers say where.
	HeaderDLQValueDropped = "dlq.value_dropped"
	// HeaderDLQKeyDropped and HeaderDLQHeadersDropped are set on a dead
	// letter the broker refused even without its value: it is then written
	// stripped, with no key (the header gives its size in bytes), none of
	// the record's own headers (the header gives how many there were), and
	// the reason cut to maxStrippedReason bytes. What is left, the origin
	// headers, is enough to read the record from the topic it came from.
	HeaderDLQKeyDropped     = "dlq.key_dropped"
	HeaderDLQHeadersDropped = "dlq.headers_dropped"
)

// maxStrippedReason is the most of the reason a stripped dead letter keeps.
const maxStrippedReason = 512

// deadLetterLogEvery is the least time between two dead_letter_failed logs
// of one partition: a dead letter topic outage retries every backoff, and a
// log per attempt would drown everything else.
const deadLetterLogEvery = 5 * time.Second

// spanPerInFlight times MaxInFlight is how many offsets a partition may
// dispatch past its lowest unfinished record. The window bounds records
// unfinished, not the tracker's span: behind one stuck record, every later
// one that finishes still keeps a tracker entry until the stuck one does, so
// without this limit memory would grow with the partition's backlog.
const spanPerInFlight = 64

// errStopping says a record was not started, or its retries were cut short,
// because its partition is stopping. It never leaves this package.
var errStopping = errors.New("partition stopping")

// partition handles one claimed partition for one session: a queue per key
// (one goroutine drains each busy key, so a key's records run in order) and
// an offset tracker that marks up to the lowest unfinished record.
type partition struct {
	run       *runState
	sess      sarama.ConsumerGroupSession
	claim     sarama.ConsumerGroupClaim
	topic     string
	partition int32
	log       *slog.Logger

	// handlerCtx is what handlers get: it outlives the session, so a send in
	// hand is not aborted by a revoke or shutdown, and stop cancels it
	// ShutdownTimeout later.
	handlerCtx    context.Context
	cancelHandler context.CancelFunc
	// stopping is closed when the session ends: no record starts after it,
	// and backoff waits end.
	stopping chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	queues  map[string][]*sarama.ConsumerMessage // busy keys; guarded by mu
	tracker *offsetTracker                       // guarded by mu
	closed  bool                                 // no marks after stop; guarded by mu
	// calling counts handler calls in progress; abandoned is set when stop
	// gives up waiting for them. Guarded by mu.
	calling   int
	abandoned bool

	// maxSpan bounds tracker.span(): dispatch waits while it is reached.
	maxSpan int64
	// advanced gets a token (never blocking) each time the commit point
	// moves, which is the only time the span shrinks.
	advanced chan struct{}

	// Dead letter writes failing now, and the rate limit of their logs;
	// guarded by mu.
	dlqFailing  int
	dlqLoggedAt time.Time
	dlqUnlogged int
}

func newPartition(run *runState, sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) *partition {
	hctx, cancel := context.WithCancel(context.WithoutCancel(sess.Context()))
	return &partition{
		run:           run,
		sess:          sess,
		claim:         claim,
		topic:         claim.Topic(),
		partition:     claim.Partition(),
		log:           run.log.With("partition", claim.Partition()),
		handlerCtx:    hctx,
		cancelHandler: cancel,
		stopping:      make(chan struct{}),
		queues:        make(map[string][]*sarama.ConsumerMessage),
		tracker:       newOffsetTracker(),
		maxSpan:       int64(spanPerInFlight * run.cfg.MaxInFlight),
		advanced:      make(chan struct{}, 1),
	}
}

// dispatch takes a record from the partition's stream (in offset order) into
// the tracker and its key's queue. The caller holds a window token for it
// and its heldBytes in the byte budget, which process gives back. Only the
// ConsumeClaim goroutine calls it.
func (p *partition) dispatch(msg *sarama.ConsumerMessage) {
	p.mu.Lock()
	p.tracker.add(msg.Offset)
	if len(msg.Key) == 0 {
		// A record without a key has no order to keep with any other.
		p.mu.Unlock()
		p.wg.Go(func() { p.process(msg) })
		return
	}
	key := string(msg.Key)
	q, busy := p.queues[key]
	p.queues[key] = append(q, msg)
	p.mu.Unlock()
	if !busy {
		p.wg.Go(func() { p.drainKey(key) })
	}
}

// waitSpan returns once the tracker spans fewer than maxSpan offsets, so
// the next record may be dispatched, or false when done is closed first.
// Only the ConsumeClaim goroutine calls it; it logs once per stall.
func (p *partition) waitSpan(done <-chan struct{}) bool {
	stalled := false
	for {
		p.mu.Lock()
		span, lowest := p.tracker.span(), p.tracker.commitOffset()
		p.mu.Unlock()
		if span < p.maxSpan {
			if stalled {
				p.log.Info("partition_dispatch_resumed", "span", span)
			}
			return true
		}
		if !stalled {
			stalled = true
			p.log.Warn("partition_dispatch_paused", "lowest_unfinished", lowest, "span", span, "max_span", p.maxSpan)
		}
		select {
		case <-p.advanced:
		case <-done:
			return false
		}
	}
}

// drainKey handles key's records one by one until its queue is empty. The
// queue's presence in the map means this goroutine is alive, so dispatch
// starts exactly one per busy key.
func (p *partition) drainKey(key string) {
	for {
		p.mu.Lock()
		q := p.queues[key]
		if len(q) == 0 {
			delete(p.queues, key)
			p.mu.Unlock()
			return
		}
		msg := q[0]
		q[0] = nil
		p.queues[key] = q[1:]
		p.mu.Unlock()
		p.process(msg)
	}
}

// process handles one record and marks it if it finished. A record not
// finished (only possible once stopping) is left unmarked for replay; so is
// every later record of its key, as they too see stopping.
func (p *partition) process(msg *sarama.ConsumerMessage) {
	defer func() {
		p.run.budget.release(heldBytes(msg))
		<-p.run.window
	}()
	if p.isStopping() {
		return
	}
	if !p.handle(msg) {
		return
	}
	p.mu.Lock()
	commit, advanced := p.tracker.complete(msg.Offset)
	if !p.closed {
		if advanced {
			p.markExactly(commit)
		}
	}
	p.mu.Unlock()
	if advanced {
		select {
		case p.advanced <- struct{}{}:
		default: // a wake-up is already pending; waitSpan re-checks
		}
	}
}

// markExactly sets the partition's offset to commit to commit, up or down.
// MarkOffset alone only moves it forward: when the group's committed offset
// is past the partition's end (unclean leader election, truncation; Sarama
// #2863), Sarama fetches from the oldest record, but every mark below the
// stale offset would be ignored, the commit would stay there, and once the
// log grew past it a restart would skip everything in between. ResetOffset
// only moves it back; together they set it exactly. Our marks only increase
// within a session, so the reset never takes back a commit we made.
// The caller holds mu.
func (p *partition) markExactly(commit int64) {
	p.sess.MarkOffset(p.topic, p.partition, commit, "")
	p.sess.ResetOffset(p.topic, p.partition, commit, "")
}

// handle runs the handler with the retry policy of the error's kind and
// reports whether the record finished (handled, or dead-lettered).
func (p *partition) handle(msg *sarama.ConsumerMessage) bool {
	cfg := p.run.cfg
	if len(msg.Value) > cfg.MaxRecordBytes {
		reason := fmt.Sprintf("record too large: value is %d bytes, MaxRecordBytes is %d", len(msg.Value), cfg.MaxRecordBytes)
		return p.deadLetter(msg, ports.Permanent, reason)
	}
	rec := ports.Record{
		Topic:     msg.Topic,
		Partition: msg.Partition,
		Offset:    msg.Offset,
		Key:       msg.Key,
		Value:     msg.Value,
		Timestamp: msg.Timestamp,
		Headers:   recordHeaders(msg.Headers),
		// One for every attempt below: what one attempt delivered, the
		// next does not send again.
		Deliveries: ports.NewDeliveries(),
	}
	// retryable counts only Retryable failures: an outage answered with
	// Unavailable must not eat the record's retry budget.
	retryable := 0
	for attempt := 1; ; attempt++ {
		panicked, err := p.call(rec)
		switch {
		case err == nil:
			return true
		case errors.Is(err, errStopping):
			return false
		case panicked:
			cfg.Metrics.HandlerPanicked(p.topic)
			return p.deadLetter(msg, ports.Permanent, err.Error())
		case p.handlerCtx.Err() != nil:
			// The handler gave up because we cancelled its context at the
			// end of the shutdown timeout: not the record's fault.
			return false
		}
		kind := ports.KindOf(err)
		if kind == ports.Permanent {
			return p.deadLetter(msg, kind, err.Error())
		}
		if kind == ports.Retryable {
			retryable++
			if retryable >= cfg.RetryMaxAttempts {
				return p.deadLetter(msg, kind, fmt.Sprintf("retries exhausted after %d attempts: %v", retryable, err))
			}
		}
		wait := backoff(attempt, cfg.RetryInitialBackoff, cfg.RetryMaxBackoff)
		cfg.Metrics.RecordRetried(p.topic, kind)
		p.log.Warn("record_retry_scheduled", "offset", msg.Offset, "attempt", attempt,
			"kind", kind.String(), "backoff", wait, "error", err)
		if !sleepCtx(p.stopping, wait) {
			return false
		}
	}
}

// call runs the handler once, holding a handling token, and recovers a
// panic into an error ("panic: ...") so one bad record does not kill the
// worker. It returns errStopping when the partition stopped before the
// handler could start.
func (p *partition) call(rec ports.Record) (panicked bool, err error) {
	slot, ok := p.acquire()
	if !ok {
		return false, errStopping
	}
	p.mu.Lock()
	p.calling++
	if p.abandoned {
		// Started as stop gave up: abandoned too, counted here since
		// stop's count missed it (callDone takes it off either way).
		p.run.abandoned.Add(1)
		p.run.cfg.Metrics.HandlersAbandoned(1)
	}
	p.mu.Unlock()
	defer p.release(slot)
	defer p.callDone()
	defer func() {
		if r := recover(); r != nil {
			panicked, err = true, fmt.Errorf("panic: %v", r)
			p.log.Error("handler_panicked", "offset", rec.Offset, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return false, p.run.handler.Handle(p.handlerCtx, rec)
}

// deadLetter writes msg to the dead letter topic, retrying with backoff
// while the partition lives, and reports whether it was written: a record
// is only marked once its dead letter is safe, so none is ever lost.
//
// A write the broker refuses as too large would fail the same way forever
// and hold the partition's commit behind it, so it is retried smaller:
// first without the value (see HeaderDLQValueDropped), then stripped to the
// headers that say where the record is (see HeaderDLQKeyDropped). Any other
// failure (a dead letter topic outage) is retried as long as the partition
// is held; the consumer reports not Ready once that has lasted
// deadLetterHealth.unreadyAfter.
func (p *partition) deadLetter(msg *sarama.ConsumerMessage, kind ports.Kind, reason string) bool {
	cfg := p.run.cfg
	pm := deadLetterMessage(cfg.DLQTopic, msg, kind, reason)
	valueDropped, stripped := false, false
	failing := false
	defer func() {
		if failing {
			p.deadLetterRecovered()
		}
	}()
	for attempt := 1; ; attempt++ {
		// The first write goes out even when stopping: the record is in
		// hand and this finishes it. It takes no handling token, since the
		// window already bounds how many records can get here.
		err := p.run.dlq.send(p.handlerCtx, []*sarama.ProducerMessage{pm})
		if err == nil {
			cfg.Metrics.RecordDeadLettered(p.topic, kind)
			p.log.Warn("event_dead_lettered", "offset", msg.Offset, "reason", reason,
				"kind", kind.String(), "dlq_topic", cfg.DLQTopic, "value_dropped", valueDropped, "stripped", stripped)
			return true
		}
		if isTooLarge(err) && !stripped {
			if !valueDropped {
				valueDropped = true
				pm = dropValue(pm, len(msg.Value))
				p.log.Warn("dead_letter_value_dropped", "offset", msg.Offset, "value_bytes", len(msg.Value),
					"dlq_topic", cfg.DLQTopic, "error", err)
			} else {
				stripped = true
				pm = strippedDeadLetter(cfg.DLQTopic, msg, kind, reason)
				p.log.Warn("dead_letter_stripped", "offset", msg.Offset, "key_bytes", len(msg.Key),
					"headers", len(msg.Headers), "dlq_topic", cfg.DLQTopic, "error", err)
			}
			continue
		}
		if !failing {
			failing = true
			p.deadLetterFailing()
		}
		wait := backoff(attempt, cfg.RetryInitialBackoff, cfg.RetryMaxBackoff)
		p.logDeadLetterFailed(msg.Offset, attempt, wait, err)
		if !sleepCtx(p.stopping, wait) {
			return false
		}
	}
}

// isTooLarge reports whether err says the message is over a size limit:
// the broker's (MESSAGE_TOO_LARGE), or the producer's own MaxMessageBytes
// check, which Sarama reports as a ConfigurationError before sending.
func isTooLarge(err error) bool {
	if errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		return true
	}
	var ce sarama.ConfigurationError
	return errors.As(err, &ce) && strings.Contains(string(ce), "larger than configured Producer.MaxMessageBytes")
}

// dropValue returns pm without its value, with HeaderDLQValueDropped set to
// the value's size; key and headers are kept.
func dropValue(pm *sarama.ProducerMessage, size int) *sarama.ProducerMessage {
	out := &sarama.ProducerMessage{Topic: pm.Topic, Key: pm.Key}
	out.Headers = append(out.Headers, pm.Headers...)
	out.Headers = append(out.Headers, sarama.RecordHeader{Key: []byte(HeaderDLQValueDropped), Value: []byte(strconv.Itoa(size))})
	return out
}

// strippedDeadLetter is the dead letter of last resort: only the headers
// deadLetterMessage adds (the reason cut to maxStrippedReason bytes), and
// the sizes of what was left out.
func strippedDeadLetter(topic string, msg *sarama.ConsumerMessage, kind ports.Kind, reason string) *sarama.ProducerMessage {
	if len(reason) > maxStrippedReason {
		reason = strings.ToValidUTF8(reason[:maxStrippedReason], "") + "..."
	}
	origin := &sarama.ConsumerMessage{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset}
	pm := deadLetterMessage(topic, origin, kind, reason)
	for _, h := range [][2]string{
		{HeaderDLQValueDropped, strconv.Itoa(len(msg.Value))},
		{HeaderDLQKeyDropped, strconv.Itoa(len(msg.Key))},
		{HeaderDLQHeadersDropped, strconv.Itoa(len(msg.Headers))},
	} {
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
	}
	return pm
}

// deadLetterFailing and deadLetterRecovered count the partition's dead
// letter writes that are failing now, and tell the run's health when the
// partition starts and stops failing.
func (p *partition) deadLetterFailing() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dlqFailing++
	if p.dlqFailing == 1 {
		p.run.dlqHealth.failing(p, time.Now())
	}
}

func (p *partition) deadLetterRecovered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dlqFailing--
	if p.dlqFailing == 0 {
		p.run.dlqHealth.recovered(p)
		p.dlqUnlogged = 0
	}
}

// logDeadLetterFailed logs a failed dead letter write at most once per
// deadLetterLogEvery for the partition, with how many failed since the last
// log, so an outage stays visible without a log line per retry.
func (p *partition) logDeadLetterFailed(offset int64, attempt int, wait time.Duration, err error) {
	p.mu.Lock()
	p.dlqUnlogged++
	now := time.Now()
	if !p.dlqLoggedAt.IsZero() && now.Sub(p.dlqLoggedAt) < deadLetterLogEvery {
		p.mu.Unlock()
		return
	}
	failures := p.dlqUnlogged
	p.dlqUnlogged = 0
	p.dlqLoggedAt = now
	p.mu.Unlock()
	p.log.Error("dead_letter_failed", "offset", offset, "attempt", attempt, "failures", failures,
		"backoff", wait, "error", err)
}

// deadLetterMessage keeps the record's key, value and headers, replacing
// any dlq.* headers it already carried (a record dead-lettered twice) with
// ones describing this failure.
func deadLetterMessage(topic string, msg *sarama.ConsumerMessage, kind ports.Kind, reason string) *sarama.ProducerMessage {
	pm := &sarama.ProducerMessage{Topic: topic}
	if msg.Key != nil {
		pm.Key = sarama.ByteEncoder(msg.Key)
	}
	if msg.Value != nil {
		pm.Value = sarama.ByteEncoder(msg.Value)
	}
	ours := map[string]string{
		HeaderDLQReason:            reason,
		HeaderDLQKind:              kind.String(),
		HeaderDLQOriginalTopic:     msg.Topic,
		HeaderDLQOriginalPartition: strconv.Itoa(int(msg.Partition)),
		HeaderDLQOriginalOffset:    strconv.FormatInt(msg.Offset, 10),
	}
	for _, h := range msg.Headers {
		if h == nil {
			continue
		}
		if _, replaced := ours[string(h.Key)]; replaced {
			continue
		}
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	for _, k := range []string{HeaderDLQReason, HeaderDLQKind, HeaderDLQOriginalTopic, HeaderDLQOriginalPartition, HeaderDLQOriginalOffset} {
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(ours[k])})
	}
	return pm
}

// acquire takes a handling slot and notes when, or reports false once
// stopping. A record that got its slot just as stopping closed gives it
// back: stopping means no new work starts.
func (p *partition) acquire() (slot int, ok bool) {
	if p.isStopping() {
		return 0, false
	}
	select {
	case slot = <-p.run.handling:
	case <-p.stopping:
		return 0, false
	}
	if p.isStopping() {
		p.run.handling <- slot
		return 0, false
	}
	p.run.started[slot].Store(int64(time.Since(p.run.start)) + 1)
	return slot, true
}

// release gives slot back.
func (p *partition) release(slot int) {
	p.run.started[slot].Store(0)
	p.run.handling <- slot
}

// callDone counts a handler call out of the partition's calls, and out of
// the run's abandoned calls if stop gave up on it.
func (p *partition) callDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calling--
	if p.abandoned {
		p.run.abandoned.Add(-1)
		p.run.cfg.Metrics.HandlersAbandoned(-1)
	}
}

func (p *partition) isStopping() bool {
	select {
	case <-p.stopping:
		return true
	default:
		return false
	}
}

// stop ends the partition: nothing new starts, records in hand get
// ShutdownTimeout to finish, then the handlers' context is cancelled. When
// it returns every finished record is marked, and nothing later will be:
// the session commits next.
func (p *partition) stop() {
	close(p.stopping)
	p.mu.Lock()
	inHand := p.tracker.inHand()
	p.mu.Unlock()
	p.log.Debug("partition_stopping", "in_hand", inHand)
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	timeout := time.NewTimer(p.run.cfg.ShutdownTimeout)
	defer timeout.Stop()
	select {
	case <-done:
	case <-timeout.C:
		p.mu.Lock()
		inHand = p.tracker.inHand()
		p.mu.Unlock()
		p.log.Warn("shutdown_timeout_exceeded", "in_hand", inHand, "timeout", p.run.cfg.ShutdownTimeout)
		p.cancelHandler()
		if waitedFull := sleepCtx(done, abandonGrace); waitedFull {
			// Still running: a handler ignoring its context. Its record
			// stays unmarked and will be replayed; the goroutine is left
			// behind and its late result ignored (closed, below). It keeps
			// its handling token until it returns: counted in the run's
			// abandoned calls, which make the consumer Wedged once they
			// hold every token.
			p.mu.Lock()
			p.abandoned = true
			calls := p.calling
			total := p.run.abandoned.Add(int64(calls))
			p.run.cfg.Metrics.HandlersAbandoned(calls)
			p.mu.Unlock()
			p.log.Error("handlers_abandoned", "in_hand", inHand, "calls", calls,
				"abandoned_calls", total, "max_in_flight", p.run.cfg.MaxInFlight)
		}
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancelHandler()
}
