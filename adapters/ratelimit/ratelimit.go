// Package ratelimit holds the in-process ports.RateLimiter (Local), which
// paces the senders of one process, and Fallback, which asks a fleet-wide
// limiter and paces by this replica's share on Local while that one
// cannot answer.
package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

var (
	_ ports.RateLimiter = (*Local)(nil)
	_ ports.RateLimiter = (*Fallback)(nil)
)

// sweepEvery is how many writes Local makes between two sweeps of the
// senders it no longer needs to remember.
const sweepEvery = 1024

// Local is a ports.RateLimiter in this process's memory: the same GCRA, in
// the same units (microseconds), as the Redis one, with no store to fail,
// so it returns an error only for an invalid limit or a done ctx. A
// sender is forgotten once its pace has caught up with the clock (swept
// every sweepEvery writes), so memory grows with the senders active in the
// last Burst Intervals, not with every sender ever seen. Safe for
// concurrent use.
type Local struct {
	now func() time.Time

	mu     sync.Mutex
	tat    map[string]time.Time // sender -> theoretical arrival time of its next send
	writes int
}

// NewLocal returns an empty Local on the clock now (nil: time.Now).
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now, tat: make(map[string]time.Time)}
}

// Take implements ports.RateLimiter.
func (l *Local) Take(ctx context.Context, sender string, limit ports.Limit, maxWait time.Duration) (ports.Reservation, error) {
	if err := check(ctx, limit); err != nil {
		return ports.Reservation{}, fmt.Errorf("rate limit take %s: %w", sender, err)
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat[sender]
	if tat.Before(now) {
		tat = now
	}
	wait := max(tat.Sub(now)-limit.Tolerance(), 0)
	if maxWait = max(maxWait, 0); wait > maxWait {
		return ports.Reservation{Wait: wait - maxWait}, nil
	}
	l.set(sender, tat.Add(limit.Interval()), now)
	return ports.Reservation{OK: true, Wait: wait}, nil
}

// Pause implements ports.RateLimiter.
func (l *Local) Pause(ctx context.Context, sender string, limit ports.Limit, d time.Duration) error {
	if err := check(ctx, limit); err != nil {
		return fmt.Errorf("rate limit pause %s: %w", sender, err)
	}
	if d <= 0 {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// The next turn is Tolerance before the pace's time: put the pace a
	// Tolerance past the pause, so the first turn is at its end and the
	// next ones an Interval apart.
	if until := now.Add(d + limit.Tolerance()); l.tat[sender].Before(until) {
		l.set(sender, until, now)
	}
	return nil
}

// set records sender's pace, and now and then forgets the senders whose
// pace the clock has caught up with: for them no state and none differ.
// l.mu must be held.
func (l *Local) set(sender string, tat, now time.Time) {
	l.tat[sender] = tat
	if l.writes++; l.writes < sweepEvery {
		return
	}
	l.writes = 0
	for s, t := range l.tat {
		if !t.After(now) {
			delete(l.tat, s)
		}
	}
}

// Senders returns how many senders l remembers, for tests of its memory.
func (l *Local) Senders() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tat)
}

func check(ctx context.Context, limit ports.Limit) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !limit.Valid() {
		return fmt.Errorf("invalid limit %v: want a rate above 0 and at most 1e6 a second, a burst of at least 1, and a burst of intervals within ten years", limit)
	}
	return nil
}

// DefaultCoolOff is how long Fallback paces locally after the fleet's
// limiter failed, before it asks the fleet again.
const DefaultCoolOff = time.Second

// FallbackConfig configures NewFallback.
type FallbackConfig struct {
	// Fleet is the limiter every replica shares (Redis). Required.
	Fleet ports.RateLimiter
	// Local paces this replica alone while Fleet cannot answer. nil: a new
	// Local on the Now clock.
	Local ports.RateLimiter
	// Replicas is how many replicas share each limit: while Fleet cannot
	// answer, this one paces by the limit's Share of them. Below 1: 1.
	Replicas int
	// CoolOff is how long after a failure of Fleet every call goes to Local
	// without asking Fleet, so an outage costs one timeout per CoolOff,
	// not one per send. Zero: DefaultCoolOff.
	CoolOff time.Duration
	// OnFallback is told every failure of Fleet (its operation, "take" or
	// "pause", the sender and the error): at most a burst of concurrent
	// calls per CoolOff. OnRecover is told when Fleet answers again after
	// a failure. Each may be nil; each must be safe for concurrent use and
	// must not block.
	OnFallback func(op, sender string, err error)
	OnRecover  func()
	// Now is the clock of the cool-off (and of a Local built here). nil:
	// time.Now.
	Now func() time.Time
}

// Fallback is a ports.RateLimiter that asks Fleet and, when Fleet cannot
// answer (its store is down, or silent for half of what is left of the
// caller's deadline), paces by this replica's share of the limit on
// Local. Its methods return an error only when ctx is done or the
// limit is invalid: a store's failure is Fallback's to handle. A pause is
// applied to both, so a replica that falls back keeps honouring it. Safe
// for concurrent use.
type Fallback struct {
	cfg     FallbackConfig
	retryAt atomic.Int64 // UnixNano before which Fleet is not asked
	down    atomic.Bool  // Fleet's last answer was an error
}

// NewFallback returns a Fallback configured by cfg (defaults applied).
func NewFallback(cfg FallbackConfig) (*Fallback, error) {
	if cfg.Fleet == nil {
		return nil, fmt.Errorf("ratelimit: Fallback needs a Fleet limiter")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Local == nil {
		cfg.Local = NewLocal(cfg.Now)
	}
	cfg.Replicas = max(cfg.Replicas, 1)
	if cfg.CoolOff <= 0 {
		cfg.CoolOff = DefaultCoolOff
	}
	return &Fallback{cfg: cfg}, nil
}

// Take implements ports.RateLimiter: Fleet's answer, or Local's for the
// limit's share.
func (f *Fallback) Take(ctx context.Context, sender string, limit ports.Limit, maxWait time.Duration) (ports.Reservation, error) {
	if f.fleetAsked() {
		fctx, cancel := fleetBudget(ctx)
		r, err := f.cfg.Fleet.Take(fctx, sender, limit, maxWait)
		cancel()
		if f.answered(ctx, "take", sender, err) {
			return r, nil
		}
	}
	if err := check(ctx, limit); err != nil {
		return ports.Reservation{}, fmt.Errorf("rate limit take %s: %w", sender, err)
	}
	return f.cfg.Local.Take(ctx, sender, limit.Share(f.cfg.Replicas), maxWait)
}

// Pause implements ports.RateLimiter: on Local always, on Fleet unless it
// is cooling off.
func (f *Fallback) Pause(ctx context.Context, sender string, limit ports.Limit, d time.Duration) error {
	if err := f.cfg.Local.Pause(ctx, sender, limit.Share(f.cfg.Replicas), d); err != nil {
		return err
	}
	if f.fleetAsked() {
		fctx, cancel := fleetBudget(ctx)
		f.answered(ctx, "pause", sender, f.cfg.Fleet.Pause(fctx, sender, limit, d))
		cancel()
	}
	return nil
}

// fleetBudget returns the context Fleet is asked under: with half of what
// is left of ctx's deadline, when it has one. A Fleet that takes the
// connection and answers nothing (a paused or partitioned Redis) then
// fails on its own budget, which is Fleet's failure, and Local still
// answers within the caller's.
func fleetBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d.Add(-time.Until(d)/2))
}

// fleetAsked reports whether Fleet is asked now: not while cooling off.
func (f *Fallback) fleetAsked() bool {
	return f.cfg.Now().UnixNano() >= f.retryAt.Load()
}

// answered reports whether Fleet's err is an answer. A failure starts a
// cool-off and is told to OnFallback; ctx being done is the caller's, not
// Fleet's, and is neither.
func (f *Fallback) answered(ctx context.Context, op, sender string, err error) bool {
	if err == nil {
		if f.down.CompareAndSwap(true, false) && f.cfg.OnRecover != nil {
			f.cfg.OnRecover()
		}
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	f.retryAt.Store(f.cfg.Now().Add(f.cfg.CoolOff).UnixNano())
	f.down.Store(true)
	if f.cfg.OnFallback != nil {
		f.cfg.OnFallback(op, sender, err)
	}
	return false
}
