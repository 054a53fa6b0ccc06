// Package memory is an in-process ports.IdempotencyStore with the same claim
// rules and TTL semantics as the Redis store. It serves the embedded run,
// tests, and a single worker that can afford to forget on restart.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

var _ ports.IdempotencyStore = (*Store)(nil)

type entry struct {
	lease    ports.Lease // of a pending claim; Token is empty for a sent record
	receipt  ports.Receipt
	expireAt time.Time
}

// Config configures NewWithConfig.
type Config struct {
	Now func() time.Time // the clock; nil: time.Now
	// KeepAbandoned is how long, past its lease, a claim stays to be found
	// and taken over: the sent records' TTL (IDEMPOTENCY_TTL), so that a
	// replay that would find the record finds the claim. Zero:
	// domain.DefaultTTL, that TTL's default.
	KeepAbandoned time.Duration
}

// Store is safe for concurrent use. The zero value is not usable: call New.
type Store struct {
	now  func() time.Time
	keep time.Duration

	mu      sync.Mutex
	entries map[string]entry
	writes  int // since the last sweep
}

// New returns an empty store on the clock now (nil: time.Now), keeping
// abandoned claims domain.DefaultTTL past their lease.
func New(now func() time.Time) *Store { return NewWithConfig(Config{Now: now}) }

// NewWithConfig returns an empty store configured by cfg.
func NewWithConfig(cfg Config) *Store {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.KeepAbandoned <= 0 {
		cfg.KeepAbandoned = domain.DefaultTTL
	}
	return &Store{now: cfg.Now, keep: cfg.KeepAbandoned, entries: make(map[string]entry)}
}

// Claim implements ports.IdempotencyStore: the claim's lease is ttl, its
// key lives ttl plus the store's KeepAbandoned, and a takeover keeps the
// history (First, FirstUntil, Digest, Sender) of the claim it replaces.
func (s *Store) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	if err := ctx.Err(); err != nil {
		return ports.Claim{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	mine := entry{lease: ports.Lease{Token: token, Start: now, Until: now.Add(ttl), First: now, FirstUntil: now.Add(ttl), Digest: digest, Sender: sender}, expireAt: now.Add(ttl + s.keep)}
	e, ok := s.live(key, now)
	switch {
	case !ok:
		s.put(key, mine, now)
		return ports.Claim{State: ports.Claimed}, nil
	case e.lease.Token == "":
		return ports.Claim{State: ports.AlreadySent, Receipt: e.receipt}, nil
	case !e.lease.Passed(now):
		return ports.Claim{State: ports.InFlight, Lease: e.lease}, nil
	}
	mine.lease.First, mine.lease.FirstUntil, mine.lease.Digest, mine.lease.Sender = e.lease.First, e.lease.FirstUntil, e.lease.Digest, e.lease.Sender
	s.put(key, mine, now)
	return ports.Claim{State: ports.TakenOver, Lease: e.lease}, nil
}

// Record implements ports.IdempotencyStore.
func (s *Store) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.put(key, entry{receipt: r, expireAt: now.Add(ttl)}, now)
	return nil
}

// Release implements ports.IdempotencyStore.
func (s *Store) Release(ctx context.Context, key, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.live(key, s.now()); ok && e.lease.Token == token {
		delete(s.entries, key)
	}
	return nil
}

// Len returns the number of live keys.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now())
	return len(s.entries)
}

// live returns key's entry unless it has expired. Callers hold s.mu.
func (s *Store) live(key string, now time.Time) (entry, bool) {
	e, ok := s.entries[key]
	if ok && !now.Before(e.expireAt) {
		delete(s.entries, key)
		return entry{}, false
	}
	return e, ok
}

// put stores e, sweeping expired keys once writes reach the map's size so a
// long run does not keep every key it ever saw (amortised O(1) per write).
// Callers hold s.mu.
func (s *Store) put(key string, e entry, now time.Time) {
	s.entries[key] = e
	s.writes++
	if s.writes >= len(s.entries) && s.writes >= 1024 {
		s.sweep(now)
	}
}

func (s *Store) sweep(now time.Time) {
	for k, e := range s.entries {
		if !now.Before(e.expireAt) {
			delete(s.entries, k)
		}
	}
	s.writes = 0
}

// Provider offers the store as IDEMPOTENCY_STORE=memory: no settings, not
// shared (every sent record is forgotten on restart).
var Provider = ports.Provider{
	Name:     "memory",
	Variable: ports.StoreVariable,
	Load:     func(ports.Settings) bool { return true },
	OpenStore: func(_ ports.Settings, env ports.StoreEnv) (ports.IdempotencyStore, error) {
		return NewWithConfig(Config{KeepAbandoned: env.TTL}), nil
	},
}
