package kafka

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// abandonGrace is how long stop waits, after cancelling the handlers'
// context, for handlers to notice before it gives up on them.
const abandonGrace = time.Second

// partition handles one partition assigned for one session: a queue per key
// (one goroutine drains each busy key, so a key's records run in order) and
// an offset tracker that marks up to the lowest unfinished record.
type partition struct {
	run       *runState
	sess      sarama.ConsumerGroupSession
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
	// wg runs the key queues' goroutines; stop waits for them.
	wg *workers

	mu      sync.Mutex
	queues  map[string][]*sarama.ConsumerMessage // busy keys; guarded by mu
	tracker *offsetTracker                       // guarded by mu
	closed  bool                                 // no marks after stop; guarded by mu

	// flow is the partition's share of the Run's bounds.
	flow *partitionFlow
	// handler is the Run's policy around its handler, each call of the
	// handler holding a slot of flow.
	handler ports.Handler
}

func newPartition(run *runState, sess sarama.ConsumerGroupSession, assigned sarama.ConsumerGroupClaim) *partition {
	hctx, cancel := context.WithCancel(context.WithoutCancel(sess.Context()))
	log := run.log.With("partition", assigned.Partition())
	stopping := make(chan struct{})
	share := run.flow.share(log, stopping)
	return &partition{
		run:           run,
		sess:          sess,
		topic:         assigned.Topic(),
		partition:     assigned.Partition(),
		log:           log,
		handlerCtx:    hctx,
		cancelHandler: cancel,
		stopping:      stopping,
		wg:            newWorkers(),
		queues:        make(map[string][]*sarama.ConsumerMessage),
		tracker:       newOffsetTracker(),
		flow:          share,
		handler:       policy.Chain(share.bound(run.handler), run.policy...),
	}
}

// dispatch takes a record from the partition's stream (in offset order) into
// the tracker and its key's queue. msg is what flow.take returned; process
// gives it back. Only the ConsumeClaim goroutine calls it.
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

// span returns how many offsets the tracker spans and its lowest
// unfinished offset, for flow's span bound.
func (p *partition) span() (span, lowest int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker.span(), p.tracker.commitOffset()
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
	defer p.run.flow.give(msg)
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
		p.flow.advanced()
	}
}

// markExactly sets the partition's offset to commit to commit, up or down.
// MarkOffset alone only moves it forward: when the group's committed offset
// is past the partition's end (unclean leader election, truncation),
// Sarama fetches from the oldest record, but every mark below the
// stale offset would be ignored, the commit would stay there, and once the
// log grew past it a restart would skip everything in between. ResetOffset
// only moves it back; together they set it exactly. Our marks only increase
// within a session, so the reset never takes back a commit we made.
// The caller holds mu.
func (p *partition) markExactly(commit int64) {
	p.sess.MarkOffset(p.topic, p.partition, commit, "")
	p.sess.ResetOffset(p.topic, p.partition, commit, "")
}

// handle runs the handler chain on msg and reports whether the record
// finished: the chain returned nil, once the record was handled or
// dead-lettered. Any error leaves it unmarked, for replay: ErrStopping or
// a cancelled context once stopping, or, from a policy without a dead
// letter middleware, a failure the consumer has no policy for.
func (p *partition) handle(msg *sarama.ConsumerMessage) bool {
	rec := ports.Record{
		Topic:     msg.Topic,
		Partition: msg.Partition,
		Offset:    msg.Offset,
		Key:       msg.Key,
		Value:     msg.Value,
		Timestamp: msg.Timestamp,
		// One delivery per record taken from the broker: every attempt
		// the chain makes at it shares the id; a replay gets a new one.
		DeliveryID: ports.NewDeliveryID(),
		Headers:    recordHeaders(msg.Headers),
	}
	ended := make(chan struct{})
	defer close(ended)
	ctx := ports.WithDelivery(p.handlerCtx, ports.Delivery{Stopping: p.stopping, Ended: ended})
	err := p.handler.Handle(ctx, rec)
	if err != nil && !p.isStopping() && p.handlerCtx.Err() == nil {
		p.log.Error("record_unfinished", "offset", msg.Offset, "error", err)
	}
	return err == nil
}

func (p *partition) isStopping() bool { return isClosed(p.stopping) }

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
		if waitedFull := ports.Sleep(done, abandonGrace); waitedFull {
			// Still running: a handler ignoring its context. Its record
			// stays unmarked and will be replayed; the goroutine is left
			// behind and its late result ignored (closed, below). Its call
			// keeps its slot until it returns (see flow).
			calls, total := p.flow.abandon()
			p.log.Error("handlers_abandoned", "in_hand", inHand, "calls", calls,
				"abandoned_calls", total, "max_in_flight", p.run.cfg.MaxInFlight)
		}
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.stop()
	p.cancelHandler()
	// A dead letter write still failing for this partition no longer holds
	// this worker's commit.
	p.run.dlqHealth.recovered(p.topic + "/" + strconv.Itoa(int(p.partition)))
}
