package storetest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Fake is a ports.IdempotencyStore whose answers a test chooses, method by
// method: a method whose func is nil passes the call on to Store. It is
// safe for concurrent use when its funcs and Store are; set them before the
// first call, except Store, which a test may swap while no call is made.
type Fake struct {
	Store       ports.IdempotencyStore
	ClaimFunc   func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error)
	RecordFunc  func(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error
	ReleaseFunc func(ctx context.Context, key, token string) error

	calls atomic.Int64
}

// Calls is how many calls, of any method, reached f.
func (f *Fake) Calls() int64 { return f.calls.Load() }

// Claim implements ports.IdempotencyStore.
func (f *Fake) Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
	f.calls.Add(1)
	if f.ClaimFunc != nil {
		return f.ClaimFunc(ctx, key, token, digest, sender, ttl)
	}
	return f.Store.Claim(ctx, key, token, digest, sender, ttl)
}

// Record implements ports.IdempotencyStore.
func (f *Fake) Record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	f.calls.Add(1)
	if f.RecordFunc != nil {
		return f.RecordFunc(ctx, key, r, ttl)
	}
	return f.Store.Record(ctx, key, r, ttl)
}

// Release implements ports.IdempotencyStore.
func (f *Fake) Release(ctx context.Context, key, token string) error {
	f.calls.Add(1)
	if f.ReleaseFunc != nil {
		return f.ReleaseFunc(ctx, key, token)
	}
	return f.Store.Release(ctx, key, token)
}
