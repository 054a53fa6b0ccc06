package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/ports"
)

// Found is what Inspect read under one Redis key of a notification.
type Found struct {
	Key    string // the Redis key
	Format Format // the format of that key
	// Exists is false when nothing is under Key; the fields below are then
	// zero.
	Exists bool
	Raw    string // the value as stored
	// Claim is Raw decoded as Claim would report it (see Decode): State
	// AlreadySent with the record, or InFlight with the claim's lease.
	// Decoded is false for a value no store writes.
	Claim   ports.Claim
	Decoded bool
	// TTL is how long the key has left; negative when it has no expiry.
	TTL time.Duration
}

// Inspect reads what is under both Redis keys of the caller's key, this
// store's Format first, then the other's, with their remaining TTLs. It
// changes nothing, and the worker never calls it: it is for an operator's
// tool. It returns an error when Redis does not answer within the store's
// timeout or before ctx is done; the error names the key, never its value.
func (s *Store) Inspect(ctx context.Context, key string) ([]Found, error) {
	other := Compact
	if s.cfg.Format == Compact {
		other = Readable
	}
	found := []Found{
		{Key: s.cfg.key(key), Format: s.cfg.Format},
		{Key: s.cfg.otherKey(key), Format: other},
	}
	cmds := make(rueidis.Commands, 0, 2*len(found))
	for _, f := range found {
		cmds = append(cmds, s.client.B().Get().Key(f.Key).Build(), s.client.B().Pttl().Key(f.Key).Build())
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	res := s.client.DoMulti(ctx, cmds...)
	for i := range found {
		f := &found[i]
		v, err := res[2*i].ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("redis: get %s: %w", f.Key, err)
		}
		pttl, err := res[2*i+1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("redis: pttl %s: %w", f.Key, err)
		}
		f.Exists, f.Raw, f.TTL = true, v, time.Duration(pttl)*time.Millisecond
		f.Claim, f.Decoded = Decode(v)
	}
	return found, nil
}
