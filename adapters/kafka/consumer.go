package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

var _ ports.EventSource = (*Consumer)(nil)

// ErrAlreadyRunning is returned by Run while another Run of the same
// Consumer is in progress.
var ErrAlreadyRunning = errors.New("kafka: consumer is already running")

// Consumer is the ports.EventSource on a Kafka consumer group. Records with
// the same key are handled one after another in offset order; records with
// different keys in parallel, up to Config.MaxInFlight at once. Offsets are
// committed only up to the lowest record not yet finished, so a crash or a
// rebalance replays unfinished work and nothing else.
//
// Run may be called again after it returned; Ready is safe for concurrent
// use at any time.
type Consumer struct {
	cfg       Config
	running   atomic.Bool
	assigned  atomic.Int32 // partitions in the current session
	joined    atomic.Bool  // between a session's Setup and its Cleanup
	dlqHealth *deadLetterHealth
	run       atomic.Pointer[runState] // the current Run's; nil between Runs
}

// NewConsumer validates cfg and applies its defaults. It does not dial: Run
// does. It returns an error wrapping ErrInvalidConfig naming every bad field.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, dlqHealth: newDeadLetterHealth(DeadLetterUnreadyAfter)}, nil
}

// Ready reports whether the consumer is a member of its group's current
// generation, with or without partitions: a member the group gave none
// (more members than partitions) is a working spare, which takes
// partitions at the next rebalance. It is false before the first join,
// between sessions (an eager rebalance, which lasts about a heartbeat
// interval plus the time records in hand take to finish; a cooperative one
// keeps the session), while a partition has been failing to write a dead
// letter for DeadLetterUnreadyAfter (its commit is stuck behind that
// record), and while the consumer is Wedged.
func (c *Consumer) Ready() bool {
	return c.joined.Load() && !c.dlqHealth.stuck(time.Now()) && !c.Wedged()
}

// Assigned returns how many partitions the consumer holds now: 0 between
// Runs, between sessions, and while the group gives it none.
func (c *Consumer) Assigned() int { return int(c.assigned.Load()) }

// Lag returns the lag of the partitions this member holds, summed: for
// each, its high-water mark minus the group's committed offset, as last
// read from the broker (every Config.LagInterval and after each commit).
// It is 0 between Runs and while nothing is held.
func (c *Consumer) Lag() int64 {
	r := c.run.Load()
	if r == nil {
		return 0
	}
	return r.lag.total()
}

// BufferedBytes returns the bytes of the records this consumer holds now:
// taken from the broker's stream and not finished, whether queued behind
// their key, waiting for a handling slot or in the handler (see
// Config.MaxBufferedBytes). It is 0 between Runs.
func (c *Consumer) BufferedBytes() int64 {
	r := c.run.Load()
	if r == nil {
		return 0
	}
	return r.flow.heldBytes()
}

// Wedged reports whether handler calls that are not returning stop the
// worker: when calls abandoned at a revoke or shutdown (still running after
// their context was cancelled) hold every one of the MaxInFlight handling
// slots, or, with Config.StallAfter set, when any call has run for longer
// than StallAfter. Only a restart is sure to end such calls; the worker's
// liveness probe reads this (and a stall is logged, as handlers_stalled,
// only when something does).
func (c *Consumer) Wedged() bool {
	r := c.run.Load()
	if r == nil {
		return false
	}
	return r.flow.wedged()
}

// Run joins the group and delivers records to h until ctx is cancelled; then
// it stops fetching, lets the records in hand finish (up to
// Config.ShutdownTimeout), commits what was finished, leaves the group (a
// static member, Config.GroupInstanceID, does not: its partitions wait for
// it for Config.SessionTimeout) and returns nil.
//
// A record is marked for commit once h returned nil for it or once it was
// written to the dead letter topic; see Config for retries. h's context is
// not cancelled when ctx is: a send in hand may finish. It is cancelled
// ShutdownTimeout after the shutdown or revoke began.
//
// Run returns an error when it cannot connect at start or the group fails
// for good; transient failures of a session are logged and retried with
// backoff. It returns ErrAlreadyRunning if called while running.
//
// Each call of h holds one of the MaxInFlight handling slots while it runs.
func (c *Consumer) Run(ctx context.Context, h ports.Handler) error {
	return c.RunPolicy(ctx, h)
}

// RunPolicy is Run with every record handed to h through the middlewares
// of policy, composed as policy.Chain composes them: a record meets them in
// the order listed, and h last. A record is finished once the first
// returned nil for it. Each call of h holds one of the MaxInFlight handling
// slots while it runs, and a record holds none while a middleware works or
// waits (between attempts, writing a dead letter).
func (c *Consumer) RunPolicy(ctx context.Context, h ports.Handler, policy ...ports.Middleware) error {
	if h == nil {
		return errors.New("kafka: Run needs a handler")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer c.running.Store(false)

	cfg := c.cfg
	log := cfg.Logger.With("topic", cfg.Topic, "group", cfg.GroupID)
	revoked := newRevocations(cfg.Topic)
	p, err := c.connect(log, revoked)
	if err != nil {
		return err
	}
	defer p.close(log)
	defer c.assigned.Store(0)
	defer c.joined.Store(false)

	run := &runState{
		cfg:       cfg,
		log:       log,
		handler:   h,
		policy:    policy,
		dlq:       p.dlq,
		dlqHealth: c.dlqHealth,
		flow:      newFlow(cfg, log),
		revoked:   revoked,
		lag:       p.lag,
	}
	c.run.Store(run)
	defer c.run.Store(nil)
	log.Info("consumer_started")
	return c.consume(ctx, p.group, &groupHandler{consumer: c, run: run}, log)
}

// consume runs one session after another until ctx is done (nil) or the
// group is closed for good (an error). A session that fails is retried
// with backoff.
func (c *Consumer) consume(ctx context.Context, group sarama.ConsumerGroup, gh *groupHandler, log *slog.Logger) error {
	cfg := c.cfg
	failures := 0
	for {
		// Each call is one session; an eager rebalance ends it, and the next
		// call joins the new generation. A cooperative rebalance does not:
		// the session keeps the partitions it is not asked to give up.
		err := group.Consume(ctx, []string{cfg.Topic}, gh)
		if ctx.Err() != nil {
			log.Info("consumer_stopped")
			return nil
		}
		if errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return fmt.Errorf("kafka: consumer group %s: %w", cfg.GroupID, err)
		}
		if err == nil {
			failures = 0
			continue
		}
		failures++
		log.Warn("consume_failed", "error", err, "attempt", failures)
		if !ports.Sleep(ctx.Done(), policy.Backoff(failures, cfg.RetryInitialBackoff, cfg.RetryMaxBackoff)) {
			log.Info("consumer_stopped")
			return nil
		}
	}
}

// peers is what one Run talks to besides its handler: the consumer group,
// the dead letter producer and the lag reader.
type peers struct {
	group      sarama.ConsumerGroup
	dlq        *Publisher
	lag        *lagReader
	errorsDone chan struct{} // closed once the group's error channel is drained
}

// connect makes Run's peers and starts the lag reader and the logging of
// the group's errors. On error, what was made is closed.
func (c *Consumer) connect(log *slog.Logger, revoked *revocations) (*peers, error) {
	cfg := c.cfg
	sc := cfg.groupConfig()
	watchRevocations(sc, revoked)
	group, err := sarama.NewConsumerGroup(cfg.Brokers, cfg.GroupID, sc)
	if err != nil {
		return nil, fmt.Errorf("kafka: connect consumer group %s to %v: %w", cfg.GroupID, cfg.Brokers, err)
	}
	// Idempotent, its retries spanning the time a failing dead letter
	// takes to make the consumer not Ready (see deadLetterConfig).
	dlq, err := newProducer(cfg.Brokers, cfg.deadLetterConfig(c.dlqHealth.unreadyAfter))
	if err != nil {
		_ = group.Close()
		return nil, fmt.Errorf("kafka: dead letter producer: %w", err)
	}
	lag, err := newLagReader(cfg)
	if err != nil {
		_ = group.Close()
		_ = dlq.Close()
		return nil, err
	}
	lag.start()
	p := &peers{group: group, dlq: dlq, lag: lag, errorsDone: make(chan struct{})}
	go func() {
		defer close(p.errorsDone)
		for err := range group.Errors() {
			// Commit failures land here too; they are retried at the next
			// interval or replayed, never lost, so a warning suffices.
			log.Warn("consumer_error", "error", err)
		}
	}()
	return p, nil
}

// close closes the peers: the group first (which ends its error channel),
// then the dead letter producer, since the last sessions may still
// dead-letter while they end, then the lag reader.
func (p *peers) close(log *slog.Logger) {
	if err := p.group.Close(); err != nil {
		log.Warn("consumer_close_failed", "error", err)
	}
	<-p.errorsDone
	if err := p.dlq.Close(); err != nil {
		log.Warn("dead_letter_producer_close_failed", "error", err)
	}
	if err := p.lag.close(); err != nil {
		log.Warn("lag_reader_close_failed", "error", err)
	}
}

// runState is what every partition of one Run shares.
type runState struct {
	cfg     Config
	log     *slog.Logger
	handler ports.Handler
	// policy is what each partition runs around handler (see RunPolicy).
	policy []ports.Middleware
	dlq    *Publisher
	// dlqHealth is the Consumer's: Ready reads it.
	dlqHealth *deadLetterHealth
	// flow holds every bound on the records and calls the Run holds.
	flow *flow
	// revoked tells a partition that a cooperative rebalance revoked it.
	revoked *revocations
	// lag reads and reports the lag of the partitions held.
	lag *lagReader
}

// groupHandler adapts a Run to sarama.ConsumerGroupHandler. Setup and
// Cleanup run on the Consume goroutine; ConsumeClaim on one goroutine per
// partition.
type groupHandler struct {
	consumer   *Consumer
	run        *runState
	commitDone chan struct{}
	// loggedGeneration is the last generation partitions_assigned was
	// logged for.
	loggedGeneration atomic.Int32
}

// logAssigned logs partitions_assigned once per generation: at Setup for an
// eager session, and, as a cooperative session outlives its generations,
// at the first partition a new generation starts.
func (g *groupHandler) logAssigned(sess sarama.ConsumerGroupSession) {
	gen := sess.GenerationID()
	if g.loggedGeneration.Swap(gen) != gen {
		g.run.log.Info("partitions_assigned", "partitions", sess.Claims()[g.run.cfg.Topic], "generation", gen)
	}
}

// Setup starts the session's commit ticker. With a cooperative strategy a
// session outlives rebalances: Setup runs once, at the first join, and
// Cleanup when the member leaves.
func (g *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	g.logAssigned(sess)
	g.consumer.joined.Store(true)

	done := make(chan struct{})
	g.commitDone = done
	go func() {
		defer close(done)
		t := time.NewTicker(g.run.cfg.CommitInterval)
		defer t.Stop()
		for {
			select {
			case <-sess.Context().Done():
				// The session is ending (a rebalance, a shutdown): not a
				// member until the next Setup, though records in hand may
				// still be finishing.
				g.consumer.joined.Store(false)
				return
			case <-t.C:
				sess.Commit()
				g.run.lag.poke()
			}
		}
	}()
	return nil
}

// Cleanup runs once every ConsumeClaim returned, and each committed what
// its partition finished; it stops the commit ticker.
func (g *groupHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
	<-g.commitDone
	sess.Commit()
	g.run.log.Info("partitions_released", "generation", sess.GenerationID())
	return nil
}

// ConsumeClaim (Sarama's name: it calls a partition assigned for a session
// a claim, which is no idempotency claim) feeds one partition's records to
// the key queues until the session ends or the partition is revoked, then
// waits for the records in hand (see partition.stop) and commits what was
// finished before it returns: Sarama releases a partition revoked by a cooperative rebalance
// without flushing manual marks (autocommit is off), and only once this
// returns. It returns promptly when the session context is done, even if
// Sarama has not closed the Messages channel yet (it may not before the
// session's end), and when the partition is revoked while it waits on a
// bound of flow, or the rebalance would wait for it.
func (g *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, assigned sarama.ConsumerGroupClaim) error {
	g.logAssigned(sess)
	partition := assigned.Partition()
	revoked := g.run.revoked.hold(partition)
	g.run.lag.hold(partition)
	g.consumer.assigned.Add(1)
	p := newPartition(g.run, sess, assigned)
	// ctx ends with the session, at a revoke, or when this returns.
	ctx, cancel := context.WithCancel(sess.Context())
	go func() {
		select {
		case <-revoked:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel()
		p.stop()
		sess.Commit()
		g.run.lag.release(partition)
		g.run.revoked.release(partition)
		g.consumer.assigned.Add(-1)
		g.run.log.Info("partition_released", "partition", partition, "generation", sess.GenerationID())
		awaitRevoke(sess, assigned, revoked, g.run.cfg.SessionTimeout)
	}()
	for {
		// Not reading is what pauses the fetch: Sarama's buffers fill and it
		// stops fetching this partition.
		if !p.flow.waitSpan(ctx.Done(), p.span) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-assigned.Messages():
			if !ok {
				return nil
			}
			// select picks at random among ready cases, so a buffered
			// message can win over a session that already ended: such a
			// record must not start (it is not tracked, so it is replayed).
			if ctx.Err() != nil {
				return nil
			}
			// Waiting here is what stops this partition once the window
			// or the byte budget is spent: the next record stays in
			// Sarama, which then stops fetching the partition. This one is
			// held meanwhile, uncounted: one record per partition.
			held, ok := g.run.flow.take(msg, ctx.Done())
			if !ok {
				// Not added to the tracker, so not marked: replayed.
				return nil
			}
			p.dispatch(held)
		}
	}
}

// awaitRevoke returns once Sarama itself has revoked assigned (its
// Messages channel closes), when revoked says the assignment no longer
// names the partition: a ConsumeClaim that returns before Sarama cancels
// it ends the whole session, every partition with it. Records still read
// from Messages meanwhile are dropped unmarked: the next owner reads them
// from the committed offset. It gives up after limit (an assignment whose
// generation then failed, so Sarama revokes nothing) or at the session's
// end, and returns at once when the partition was not revoked.
func awaitRevoke(sess sarama.ConsumerGroupSession, assigned sarama.ConsumerGroupClaim, revoked <-chan struct{}, limit time.Duration) {
	select {
	case <-revoked:
	default:
		return
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case _, ok := <-assigned.Messages():
			if !ok {
				return
			}
		case <-sess.Context().Done():
			return
		case <-t.C:
			return
		}
	}
}
