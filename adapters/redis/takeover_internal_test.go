package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// TestTakeoverMeetsAValueNotOurs: Claim found an abandoned claim, and by
// the time its takeover runs, something that is not ours has been written
// over it (under our own key, or under the other format's). That cannot be
// timed from outside the store between its two round trips, so the
// takeover is called here with the key already holding the value. The
// error must carry the abandoned claim's lease: its send may have gone out,
// and a caller failing open reconciles it first.
func TestTakeoverMeetsAValueNotOurs(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	s, err := New(Config{URL: srv.URL(), CompactPrefix: "tf:", KeyPrefix: "tf-r:", ReadBoth: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	set := func(t *testing.T, k, v string) {
		t.Helper()
		if err := raw.Do(ctx, raw.B().Set().Key(k).Value(v).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	get := func(t *testing.T, k string) string {
		t.Helper()
		v, err := raw.Do(ctx, raw.B().Get().Key(k).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			return "(absent)"
		}
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		return v
	}
	now := time.Now()
	dead := newClaim("dead-worker", "dgst01", "", now.Add(-time.Minute), time.Second) // its lease passed
	found, ok := Decode(dead.encode())
	if !ok || !found.Lease.Passed(now) {
		t.Fatalf("the abandoned claim decodes to %+v, %v", found, ok)
	}
	prev := found.Lease
	mine := newClaim("worker-b", "dgst01", "", now, time.Minute)
	const px = 2 * time.Minute
	check := func(t *testing.T, c ports.Claim, err error) {
		t.Helper()
		if !errors.Is(err, ErrForeignValue) {
			t.Errorf("error %v, want one wrapping ErrForeignValue", err)
		}
		if c.State != ports.TakenOver || c.Lease != prev {
			t.Errorf("claim %+v with the error, want State TakenOver and the abandoned lease %+v", c, prev)
		}
	}

	t.Run("OwnKey", func(t *testing.T) {
		k := s.cfg.key("sms:e1")
		set(t, k, "not-ours")
		c, err := s.takeOver(ctx, k, dead.encode(), mine.inherit(prev).encode(), px, prev)
		check(t, c, err)
		if v := get(t, k); v != "not-ours" {
			t.Errorf("the key holds %q, want the value not ours left alone", v)
		}
	})
	t.Run("OtherKey", func(t *testing.T) {
		key := "sms:e2"
		k, other := s.cfg.key(key), s.cfg.otherKey(key)
		set(t, k, mine.encode()) // our claim, as the claim's SET wrote it
		set(t, other, "not-ours")
		c, err := s.takeOverOther(ctx, key, k, other, dead.encode(), prev, mine, px)
		check(t, c, err)
		if v := get(t, other); v != "not-ours" {
			t.Errorf("the other format's key holds %q, want the value not ours left alone", v)
		}
	})
}
