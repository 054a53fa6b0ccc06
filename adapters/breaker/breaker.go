// Package breaker is a circuit breaker around any ports.IdempotencyStore.
// When the store keeps failing, every call fails at once instead of waiting
// out its deadline, so the domain applies its failure mode (fail open:
// send anyway) without adding that wait to every notification; a
// background probe closes the circuit when the store answers again.
//
// It knows no technology: it decorates the port and imports ports only.
package breaker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

var _ ports.IdempotencyStore = (*Breaker)(nil)

// ErrOpen is wrapped by every call made while the circuit is open: the store
// was not asked. For the domain it is a store error like any other.
var ErrOpen = errors.New("breaker: store circuit open")

// Defaults applied by New to zero (or negative) Config fields.
const (
	DefaultFailures = 5
	DefaultCooldown = time.Second
)

// States reported by Breaker.State.
const (
	StateClosed = "closed"
	StateOpen   = "open"
)

// Config configures New.
type Config struct {
	// Failures is how many consecutive store failures open the circuit.
	// Zero: DefaultFailures.
	Failures int
	// Cooldown is, while the circuit is open, the interval between probes;
	// each probe also gets Cooldown as its deadline, so a hung store cannot
	// hold up the prober. Zero: DefaultCooldown.
	Cooldown time.Duration
	// Probe asks the store whether it answers again, e.g. the Redis store's
	// Ping. Nil: a Release of a random key that does not exist, which costs
	// one round trip and, by the port's contract, changes nothing. (A Claim
	// would write a key, and the probe would have to clean it up.)
	Probe func(ctx context.Context) error
	// Now is the clock stamped on the "open since" of ErrOpen errors. Nil:
	// time.Now. Probing and UnansweredFor run on real timers.
	Now func() time.Time
	// Unanswered and UnansweredFor bound the calls the store may still be
	// working on after their callers stopped waiting (a Redis command keeps
	// its place on the connection until the server answers it or the client
	// drops the connection): the circuit also opens once Unanswered calls
	// have failed within UnansweredFor, whatever succeeded in between. A
	// store that answers some calls and not others (one node of a cluster)
	// may never fail Failures times in a row, and without this bound would
	// pile up the calls it does not answer. Calls whose caller cancelled
	// count here too (the store may still hold them), though not towards
	// Failures. Zero in either: no such bound. See MaxUnanswered.
	Unanswered    int
	UnansweredFor time.Duration
}

// MaxUnanswered returns the most calls a store behind a Breaker with cfg
// can hold unanswered at once, when callers goroutines call it, each one
// call at a time and holding at most two claims it has not settled (a
// record's SMS and email), and each call returns by its deadline.
//
// With the circuit closed, fewer than cfg.Unanswered calls failed within
// cfg.UnansweredFor (calls that failed earlier are answered or dropped by
// then, which is what UnansweredFor must say of the store), and callers
// calls are in flight. When it opens, those callers calls may fail too,
// and while it is open each caller may still settle its claims (see
// Breaker); the only other calls are probes, one per cooldown, none
// longer than cfg.UnansweredFor ago. A probe that succeeds reaches every
// connection the store has (the Redis store's Ping does), so the store
// answered every call made before it.
//
// The defaults of New apply to zero fields; with no Unanswered bound the
// answer is unbounded, reported as -1.
func MaxUnanswered(cfg Config, callers int) int {
	cfg = withDefaults(cfg)
	if cfg.Unanswered <= 0 || cfg.UnansweredFor <= 0 {
		return -1
	}
	probes := int(cfg.UnansweredFor/cfg.Cooldown) + 1
	return 4*callers + cfg.Unanswered + probes
}

// ForCallers returns cfg with its Unanswered bound set for a store that may
// keep a failed call unanswered for unansweredFor, called by at most callers
// goroutines at once, and MaxUnanswered of the result: how many calls the
// store must be able to hold unanswered. Unanswered is callers plus
// Failures, so that every caller giving up at once (a rebalance cancels
// them all) does not open the circuit by itself, while a store failing some
// of its calls opens it before it holds more than callers plus Failures of
// them.
func ForCallers(cfg Config, callers int, unansweredFor time.Duration) (Config, int) {
	cfg.Unanswered = callers + withDefaults(cfg).Failures
	cfg.UnansweredFor = unansweredFor
	return cfg, MaxUnanswered(cfg, callers)
}

// withDefaults returns cfg with New's defaults in its zero fields.
func withDefaults(cfg Config) Config {
	if cfg.Failures <= 0 {
		cfg.Failures = DefaultFailures
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// Breaker is a ports.IdempotencyStore that fails fast while its store is
// down. It is safe for concurrent use.
//
// A call that fails counts towards opening the circuit, unless the caller's
// own context was cancelled by then (the caller gave up; that says nothing
// about the store). A caller's deadline that passes does count: callers bound
// store calls with their deadline, so that is how a hanging store shows. A
// call that succeeds resets the count. The circuit also opens when
// Config.Unanswered calls failed within Config.UnansweredFor. While open,
// calls return an error wrapping ErrOpen without calling the store; such a
// refusal counts for nothing, and only a successful probe closes the
// circuit again, at most one Cooldown (plus the probe's round trip) after
// the store answers again.
//
// One exception: a Record or Release of a key this breaker granted a claim
// for always goes to the store, open or not. The claim is a promise to
// record the send or give the key back; refusing that write would leave the
// key pending, and after the claim TTL a replay would send again. Those
// writes are few (at most one per claim in flight) and only follow a store
// that just answered.
type Breaker struct {
	store    ports.IdempotencyStore
	failures int
	cooldown time.Duration
	probe    func(ctx context.Context) error
	now      func() time.Time

	mu          sync.Mutex
	open        bool
	openedAt    time.Time
	consecutive int
	owed        map[string]int // keys claimed through us, not yet recorded or released
	// failedAt holds when the last len(failedAt) failed calls failed, as
	// time since epoch (monotonic), oldest at next; nil without an
	// Unanswered bound.
	failedAt      []time.Duration
	next          int
	unansweredFor time.Duration
	epoch         time.Time

	tripped chan struct{} // one pending "opened" signal for the prober
	stop    context.CancelFunc
	stopped chan struct{} // closed when the prober has returned
	ctx     context.Context
}

// New returns a closed Breaker around store and starts its prober, which
// idles until the circuit opens. Call Close to stop it.
func New(store ports.IdempotencyStore, cfg Config) *Breaker {
	cfg = withDefaults(cfg)
	if cfg.Probe == nil {
		cfg.Probe = releaseAbsentKey(store)
	}
	ctx, stop := context.WithCancel(context.Background())
	b := &Breaker{
		store:    store,
		failures: cfg.Failures,
		cooldown: cfg.Cooldown,
		probe:    cfg.Probe,
		now:      cfg.Now,
		owed:     map[string]int{},
		tripped:  make(chan struct{}, 1),
		stop:     stop,
		stopped:  make(chan struct{}),
		ctx:      ctx,
		epoch:    time.Now(),
	}
	if cfg.Unanswered > 0 && cfg.UnansweredFor > 0 {
		b.failedAt = make([]time.Duration, cfg.Unanswered)
		b.unansweredFor = cfg.UnansweredFor
	}
	go b.runProber()
	return b
}

// State returns StateClosed or StateOpen.
func (b *Breaker) State() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open {
		return StateOpen
	}
	return StateClosed
}

// Close stops the prober and waits for it, cancelling a probe in progress.
// It is safe to call more than once. Calls keep going through the Breaker
// after Close, but a circuit that is open stays open: call Close only when
// done with the store.
func (b *Breaker) Close() {
	b.stop()
	<-b.stopped
}

// Claim implements ports.IdempotencyStore.
func (b *Breaker) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	if err := b.admit(key, false); err != nil {
		return ports.Claim{}, fmt.Errorf("claim %s: %w", key, err)
	}
	c, err := b.store.Claim(ctx, key, token, digest, sender, ttl)
	b.observe(ctx, err)
	if err == nil && (c.State == ports.Claimed || c.State == ports.TakenOver) {
		b.mu.Lock()
		b.owed[key]++
		b.mu.Unlock()
	}
	return c, err
}

// Record implements ports.IdempotencyStore.
func (b *Breaker) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	if err := b.admit(key, true); err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	err := b.store.Record(ctx, key, r, ttl)
	b.observe(ctx, err)
	return err
}

// Release implements ports.IdempotencyStore.
func (b *Breaker) Release(ctx context.Context, key, token string) error {
	if err := b.admit(key, true); err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	err := b.store.Release(ctx, key, token)
	b.observe(ctx, err)
	return err
}

// admit returns an error wrapping ErrOpen while the circuit is open, except
// for the write that settles a claim this breaker granted (settles: a Record
// or Release), which it lets through and forgets.
func (b *Breaker) admit(key string, settles bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if settles {
		if n, ok := b.owed[key]; ok {
			if n > 1 {
				b.owed[key] = n - 1
			} else {
				delete(b.owed, key)
			}
			return nil
		}
	}
	if !b.open {
		return nil
	}
	return fmt.Errorf("%w (since %s)", ErrOpen, b.openedAt.Format(time.RFC3339Nano))
}

// observe counts the outcome of one store call.
func (b *Breaker) observe(ctx context.Context, err error) {
	if err == nil {
		b.mu.Lock()
		b.consecutive = 0
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	tooMany := b.countUnanswered()
	// A caller that gave up (shutdown, say) says nothing about the store.
	// A deadline is different: the domain bounds every store call with
	// IDEMPOTENCY_TIMEOUT on the context it passes, so a store that hangs
	// shows up here as the caller's deadline passing. That is the outage
	// the breaker exists for, and it counts.
	if !errors.Is(ctx.Err(), context.Canceled) {
		b.consecutive++
	}
	if b.open || (b.consecutive < b.failures && !tooMany) {
		return
	}
	b.open, b.openedAt = true, b.now()
	select {
	case b.tripped <- struct{}{}:
	default: // a signal is already pending
	}
}

// countUnanswered notes a failed call, and reports whether Unanswered
// calls have now failed within UnansweredFor. b.mu must be held.
func (b *Breaker) countUnanswered() bool {
	if b.failedAt == nil {
		return false
	}
	now := max(time.Since(b.epoch), 1) // 0 marks a free entry
	b.failedAt[b.next] = now
	b.next = (b.next + 1) % len(b.failedAt)
	oldest := b.failedAt[b.next] // of the last Unanswered failures, this one included
	return oldest != 0 && now-oldest < b.unansweredFor
}

// runProber waits for the circuit to open, then probes until it closes.
func (b *Breaker) runProber() {
	defer close(b.stopped)
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.tripped:
		}
		b.probeUntilClosed()
	}
}

func (b *Breaker) probeUntilClosed() {
	tick := time.NewTicker(b.cooldown)
	defer tick.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, b.cooldown)
		err := b.probe(ctx)
		cancel()
		if err == nil {
			b.mu.Lock()
			// The probe reached the store and came back: every call
			// made before it was answered too.
			b.open, b.consecutive = false, 0
			clear(b.failedAt)
			b.mu.Unlock()
			return
		}
	}
}

// releaseAbsentKey is the default probe: a Release of a key nobody uses,
// which goes to the store and back but, by the port's contract, is a no-op.
func releaseAbsentKey(store ports.IdempotencyStore) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var b [16]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		id := hex.EncodeToString(b[:])
		return store.Release(ctx, "breaker-probe:"+id, "breaker-probe:"+id)
	}
}
