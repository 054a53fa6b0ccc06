package redis_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// timeout is the store timeout the outage tests use, and margin what a call
// may take beyond it (scheduling, the race detector, and CI running other
// packages' tests on the same two cores). Unbounded, the same calls take
// rueidis' 5s dial timeout against a stopped server and forever against a
// paused one, so the margin still tells bounded from unbounded.
const (
	timeout = 200 * time.Millisecond
	margin  = 500 * time.Millisecond
)

var seq atomic.Int64

// uniqueKey returns a key no other test in this process uses.
func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s:%d:%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

// MustStore builds a store and closes it when tb ends.
func MustStore(tb testing.TB, cfg redis.Config) *redis.Store {
	tb.Helper()
	s, err := redis.New(cfg)
	if err != nil {
		tb.Fatalf("redis.New: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// MustGet reads a raw key; "" with ok false when it is absent.
func MustGet(tb testing.TB, c rueidis.Client, key string) (string, bool) {
	tb.Helper()
	v, err := c.Do(testCtx(tb), c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	if err != nil {
		tb.Fatalf("GET %s: %v", key, err)
	}
	return v, true
}

// MustPTTL reads a key's remaining lifetime.
func MustPTTL(tb testing.TB, c rueidis.Client, key string) time.Duration {
	tb.Helper()
	ms, err := c.Do(testCtx(tb), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		tb.Fatalf("PTTL %s: %v", key, err)
	}
	return time.Duration(ms) * time.Millisecond
}

// MustSet writes a raw value, as another program sharing the server might.
func MustSet(tb testing.TB, c rueidis.Client, key, value string) {
	tb.Helper()
	if err := c.Do(testCtx(tb), c.B().Set().Key(key).Value(value).Build()).Error(); err != nil {
		tb.Fatalf("SET %s: %v", key, err)
	}
}

func TestStoreContract(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	for name, cfg := range map[string]redis.Config{
		"Compact":          {Format: redis.Compact, CompactPrefix: "c:"},
		"Readable":         {Format: redis.Readable, KeyPrefix: "contract:"},
		"CompactReadsBoth": {Format: redis.Compact, CompactPrefix: "cb:", KeyPrefix: "contract-b:", ReadBoth: true},
	} {
		cfg.URL = srv.URL()
		t.Run(name, func(t *testing.T) { storetest.Run(t, contractHarness(cfg, raw)) })
	}
}

// contractHarness builds stores from cfg, each with the suite's
// KeepAbandoned, and reads a key's TTL through raw under the key cfg's
// stores write.
func contractHarness(cfg redis.Config, raw rueidis.Client) storetest.Harness {
	return storetest.Harness{
		New: func(t *testing.T, keep time.Duration) ports.IdempotencyStore {
			c := cfg
			c.KeepAbandoned = keep
			return MustStore(t, c)
		},
		TTL: func(t *testing.T, key string) time.Duration {
			return MustPTTL(t, raw, cfg.Key(key))
		},
	}
}

// TestKeyFormat pins the Readable format: ADR-0006's keys and values, as
// the runbook reads them by hand.
func TestKeyFormat(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	ctx := testCtx(t)

	t.Run("PrefixApplied", func(t *testing.T) {
		prefix := "tenant-a:idem:"
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: prefix}), uniqueKey(t)
		storetest.MustClaim(t, s, ctx, k, "tok-a", time.Minute)
		if v, ok := MustGet(t, raw, prefix+k); !ok || !strings.HasPrefix(v, "pending:tok-a.") {
			t.Fatalf("GET %s = %q (present %v), want pending:tok-a.<sender>.<firstuntil>.<digest>.<start>.<first>.<until>", prefix+k, v, ok)
		}
		if v, ok := MustGet(t, raw, k); ok {
			t.Fatalf("unprefixed key %s exists with %q", k, v)
		}
		// The lease, and the default 48h the key outlives it by.
		if ttl, want := MustPTTL(t, raw, prefix+k), time.Minute+domain.DefaultTTL; ttl > want || ttl < want-5*time.Second {
			t.Fatalf("PTTL %v, want just under %v", ttl, want)
		}
	})

	t.Run("DefaultPrefix", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable}), uniqueKey(t)
		storetest.MustClaim(t, s, ctx, k, "tok-a", time.Minute)
		if _, ok := MustGet(t, raw, "notification-worker:idem:"+k); !ok {
			t.Fatalf("key not found under the default prefix")
		}
	})

	t.Run("SentRecordFormat", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "fmt:"}), uniqueKey(t)
		// An SMTP Message-ID: colons inside the provider id must survive;
		// no fingerprint: the field is empty.
		r := ports.Receipt{ProviderID: "<a:b:c@mail.example>", SentAt: time.UnixMilli(1775121240123)}
		if err := s.Record(ctx, k, r, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if v, _ := MustGet(t, raw, "fmt:"+k); v != "sent:1775121240123:~:<a:b:c@mail.example>" {
			t.Fatalf("stored %q, want sent:1775121240123:~:<a:b:c@mail.example>", v)
		}
		got := storetest.MustClaim(t, s, ctx, k, "tok-b", time.Minute)
		if got.State != ports.AlreadySent || got.Receipt.ProviderID != r.ProviderID || !got.Receipt.SentAt.Equal(r.SentAt) {
			t.Fatalf("claim %+v, want already_sent with %+v", got, r)
		}
	})

	t.Run("ClaimFormat", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "fmt:"}), uniqueKey(t)
		before := time.Now().UnixMilli()
		storetest.MustClaimSent(t, s, ctx, k, "tok-a", "Dg-_x9", "from:Harbor.Light%", time.Minute)
		after := time.Now().UnixMilli()
		v, _ := MustGet(t, raw, "fmt:"+k)
		var firstUntil, first, start, until int64
		if n, err := fmt.Sscanf(v, "pending:tok-a.from:Harbor%%2ELight%%25.%d.Dg-_x9.%d.%d.%d", &firstUntil, &start, &first, &until); n != 4 || err != nil {
			t.Fatalf("stored %q, want pending:tok-a.<sender, escaped>.<firstuntilms>.Dg-_x9.<startms>.<firstms>.<untilms>", v)
		}
		if start < before || start > after || until-start != time.Minute.Milliseconds() || first != start || firstUntil != until {
			t.Fatalf("stored %q: lease from %d for %dms, history from %d to %d, want from [%d, %d] for 60000ms, history its own lease", v, start, until-start, first, firstUntil, before, after)
		}
	})

	t.Run("ClaimFormatAfterTakeover", func(t *testing.T) {
		// A takeover keeps the first claim's history: its sender, lease
		// end, digest and start, not the last takeover's.
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "fmt:"}), uniqueKey(t)
		storetest.MustClaimSent(t, s, ctx, k, "tok-a", "Dg-_x9", "from:+15550001111", 20*time.Millisecond)
		v, _ := MustGet(t, raw, "fmt:"+k)
		firstLease := mustDecodeLease(t, v)
		time.Sleep(40 * time.Millisecond) // tok-a's lease passes: the scenario
		if got := storetest.MustClaimSent(t, s, ctx, k, "tok-b", "other", "from:+15550002222", time.Minute); got.State != ports.TakenOver {
			t.Fatalf("tok-b's claim: %v, want taken_over", got.State)
		}
		v, _ = MustGet(t, raw, "fmt:"+k)
		if !strings.HasPrefix(v, fmt.Sprintf("pending:tok-b.from:+15550001111.%d.Dg-_x9.", firstLease.Until.UnixMilli())) {
			t.Fatalf("after the takeover %q, want tok-b's claim carrying tok-a's sender, lease end %d and digest", v, firstLease.Until.UnixMilli())
		}
		if l := mustDecodeLease(t, v); l.Token != "tok-b" || !l.First.Equal(firstLease.Start) || l.Digest != "Dg-_x9" {
			t.Fatalf("after the takeover %q reads as %+v; want tok-b's claim from tok-a's start %v with its digest", v, l, firstLease.Start)
		}
	})

	t.Run("SentRecordWithFingerprint", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "fmt:"}), uniqueKey(t)
		r := ports.Receipt{ProviderID: "<a:b@mail.example>", SentAt: time.UnixMilli(1775121240123), Fingerprint: "Zx9_k2"}
		if err := s.Record(ctx, k, r, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if v, _ := MustGet(t, raw, "fmt:"+k); v != "sent:1775121240123:~Zx9_k2:<a:b@mail.example>" {
			t.Fatalf("stored %q, want sent:1775121240123:~Zx9_k2:<a:b@mail.example>", v)
		}
		got := storetest.MustClaim(t, s, ctx, k, "tok-b", time.Minute)
		if got.State != ports.AlreadySent || got.Receipt.ProviderID != r.ProviderID || got.Receipt.Fingerprint != r.Fingerprint {
			t.Fatalf("claim %+v, want already_sent with %+v", got, r)
		}
	})

	t.Run("SentRecordWrittenElsewhere", func(t *testing.T) {
		// The documented format is a contract: a record written by another
		// tool (a backfill) reads back.
		s, k := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "fmt:"}), uniqueKey(t)
		MustSet(t, raw, "fmt:"+k, "sent:1775121240000:~Zx9_k2ab:SM0123")
		got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute)
		want := time.Date(2026, 4, 2, 9, 14, 0, 0, time.UTC)
		if got.State != ports.AlreadySent || got.Receipt.ProviderID != "SM0123" || !got.Receipt.SentAt.Equal(want) {
			t.Fatalf("claim %+v, want already_sent SM0123 at %v", got, want)
		}
	})
}

func TestForeignValue(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	ctx := testCtx(t)
	s := MustStore(t, redis.Config{URL: srv.URL(), Format: redis.Readable, KeyPrefix: "foreign:"})

	for name, value := range map[string]string{
		"PlainString": "hello-secret-value",
		"SentNoTime":  "sent:",
		"SentBadTime": "sent:yesterday:SM1",
		"SentNoID":    "sent:1775121240000",
		"UpperCase":   "PENDING:tok",
		// Claims and records of shapes the store does not write.
		"ClaimWithoutLease":          "pending:0a1b2c3d4e5f60718293a4b5",
		"ClaimWithLeaseOnly":         "pending:0a1b2c3d4e5f60718293a4b5.1775121240000.1775121300000",
		"ClaimWithoutSender":         "pending:0a1b2c3d4e5f60718293a4b5.Dg.1775121240000.1775121240000.1775121300000",
		"ClaimWithBadTime":           "pending:0a1b2c3d4e5f60718293a4b5..1775121300000.Dg.soon.1775121240000.1775121300000",
		"SentWithoutFingerprintMark": "sent:1775121240000:SM0123",
		"EmptyString":                "",
		"LooksLikeJSON":              `{"sent":true}`,
		// Integers outside the compact records' range, or not in the
		// decimal form Redis gives back.
		"SmallInteger":    "12345",
		"NegativeInteger": "-4611686018427387904",
		"BelowCompact":    "4611686018427387903",
		"LeadingZero":     "04611686018427387905",
		"PlusSign":        "+4611686018427387905",
		"AboveInt64":      "9223372036854775808",
	} {
		t.Run(name, func(t *testing.T) {
			k := uniqueKey(t)
			MustSet(t, raw, "foreign:"+k, value)
			_, err := s.Claim(ctx, k, "tok", "", "", time.Minute)
			if !errors.Is(err, redis.ErrForeignValue) {
				t.Fatalf("Claim over %q: err %v, want ErrForeignValue", value, err)
			}
			if !strings.Contains(err.Error(), "foreign:"+k) {
				t.Fatalf("error %q does not name the key", err)
			}
			if value != "" && strings.Contains(err.Error(), value) {
				t.Fatalf("error %q carries the value", err)
			}
			// Neither Claim nor Release may touch a value that is not ours.
			if err := s.Release(ctx, k, "tok"); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if v, ok := MustGet(t, raw, "foreign:"+k); !ok || v != value {
				t.Fatalf("value now %q (present %v), want it untouched", v, ok)
			}
		})
	}

	t.Run("WrongType", func(t *testing.T) {
		k := uniqueKey(t)
		if err := raw.Do(ctx, raw.B().Hset().Key("foreign:"+k).FieldValue().FieldValue("f", "v").Build()).Error(); err != nil {
			t.Fatalf("HSET: %v", err)
		}
		_, err := s.Claim(ctx, k, "tok", "", "", time.Minute)
		if err == nil || !strings.Contains(err.Error(), "foreign:"+k) {
			t.Fatalf("Claim over a hash: err %v, want an error naming the key", err)
		}
	})
}

func TestOutage(t *testing.T) {
	receipt := ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}
	calls := map[string]func(s *redis.Store, k string) error{
		"Claim": func(s *redis.Store, k string) error {
			_, err := s.Claim(context.Background(), k, "tok", "", "", time.Minute)
			return err
		},
		"Record":  func(s *redis.Store, k string) error { return s.Record(context.Background(), k, receipt, time.Hour) },
		"Release": func(s *redis.Store, k string) error { return s.Release(context.Background(), k, "tok") },
		"Ping":    func(s *redis.Store, _ string) error { return s.Ping(context.Background()) },
	}
	// mustFailFast runs each call twice (the first may meet the broken
	// connection, the next a new dial) and wants an error within the bound.
	mustFailFast := func(t *testing.T, s *redis.Store) {
		t.Helper()
		for name, call := range calls {
			for i := range 2 {
				start := time.Now()
				err := call(s, "outage")
				took := time.Since(start)
				if err == nil {
					t.Fatalf("%s #%d during the outage: no error", name, i)
				}
				if took > timeout+margin {
					t.Fatalf("%s #%d took %v, want at most %v (err %v)", name, i, took, timeout+margin, err)
				}
			}
		}
	}
	// mustRecover waits until the same store claims a fresh key again, and
	// checks the claim landed in Redis.
	mustRecover := func(t *testing.T, srv *redistest.Server, s *redis.Store) {
		t.Helper()
		k := uniqueKey(t)
		wait.For(t, 5*time.Second, "store answers after the outage", func() error {
			_, err := s.Claim(context.Background(), k, "tok-after", "", "", time.Minute)
			return err
		})
		if v, _ := MustGet(t, srv.MustClient(t, 0), redis.Config{CompactPrefix: "outage:"}.Key(k)); !strings.HasPrefix(v, "pending:tok-after.") {
			t.Fatalf("after recovery, key holds %q, want pending:tok-after", v)
		}
	}

	t.Run("Killed", func(t *testing.T) {
		srv := redistest.MustStart(t)
		s := MustStore(t, redis.Config{URL: srv.URL(), CompactPrefix: "outage:", Timeout: timeout})
		storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute) // a live connection to break
		srv.Kill(t)
		mustFailFast(t, s)
		srv.Restart(t)
		mustRecover(t, srv, s)
	})

	t.Run("RestartedWhileIdle", func(t *testing.T) {
		// No call meets a connection from before the kill: those were
		// replaced when the server closed them, not discovered by a failing
		// Claim (EOF) after the server was back. A timeout is tolerated: on a
		// loaded machine a fresh dial may take longer than 200ms.
		srv := redistest.MustStart(t)
		s := MustStore(t, redis.Config{URL: srv.URL(), CompactPrefix: "outage:", Timeout: timeout})
		// One call at a time, the way a quiet worker uses the store: this
		// opens the pooled connections without making them pipeline.
		for range 16 {
			storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
		}
		srv.Kill(t)
		srv.Restart(t)
		for i := range 16 {
			_, err := s.Claim(context.Background(), uniqueKey(t), "tok", "", "", time.Minute)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Claim %d after the restart: %v", i, err)
			}
		}
	})

	t.Run("Unresponsive", func(t *testing.T) {
		srv := redistest.MustStart(t)
		s := MustStore(t, redis.Config{URL: srv.URL(), CompactPrefix: "outage:", Timeout: timeout})
		storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
		srv.Pause(t)
		t.Cleanup(func() { srv.Resume(t) })
		mustFailFast(t, s)
		srv.Resume(t)
		mustRecover(t, srv, s)
	})

	t.Run("CallerCancelBeatsTimeout", func(t *testing.T) {
		// A caller that gives up early is not held until the store timeout.
		srv := redistest.MustStart(t)
		s := MustStore(t, redis.Config{URL: srv.URL(), CompactPrefix: "outage:", Timeout: 2 * time.Second})
		storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)
		srv.Pause(t)
		t.Cleanup(func() { srv.Resume(t) })
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		_, err := s.Claim(ctx, uniqueKey(t), "tok", "", "", time.Minute)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Claim: err %v, want context.Canceled", err)
		}
		if took := time.Since(start); took > 20*time.Millisecond+margin {
			t.Fatalf("Claim took %v after a cancel at 20ms", took)
		}
	})
}

func TestACLAndDatabase(t *testing.T) {
	srv := redistest.MustStart(t)
	admin := srv.MustClient(t, 0)
	ctx := testCtx(t)
	// The least the store needs on a standalone server, as its package
	// comment documents; the key pattern confines it to its prefix.
	setuser := admin.B().Arbitrary("ACL", "SETUSER", "worker").Args(
		"reset", "on", ">s3cret-pw", "~acl:*", "~acl-c:*", "+@connection", "+select", "+set", "+get", "+del", "+evalsha", "+eval", "+ping", "+info",
	).Build()
	if err := admin.Do(ctx, setuser).Error(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	url := fmt.Sprintf("redis://worker:s3cret-pw@%s/3", srv.Addr())

	t.Run("OK", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: url, Format: redis.Readable, KeyPrefix: "acl:"}), uniqueKey(t)
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		storetest.MustClaim(t, s, ctx, k, "tok-a", time.Minute)
		if v, _ := MustGet(t, srv.MustClient(t, 3), "acl:"+k); !strings.HasPrefix(v, "pending:tok-a.") {
			t.Fatalf("db 3 holds %q, want pending:tok-a", v)
		}
		if _, ok := MustGet(t, admin, "acl:"+k); ok {
			t.Fatalf("key landed in db 0, want db 3")
		}
		if err := s.Release(ctx, k, "tok-a"); err != nil {
			t.Fatalf("Release (Lua) as the ACL user: %v", err)
		}
		if _, ok := MustGet(t, srv.MustClient(t, 3), "acl:"+k); ok {
			t.Fatalf("key still present after Release")
		}
		if err := s.Record(ctx, k, ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
	})

	t.Run("KeyOutsideACLRefusedAtStart", func(t *testing.T) {
		// Proves the store really runs as "worker", not the default user,
		// and that a prefix the ACL does not cover stops the worker at
		// start instead of failing open on every notification.
		s, err := redis.New(redis.Config{URL: url, Format: redis.Readable, KeyPrefix: "not-acl:"})
		if err == nil {
			s.Close()
			t.Fatalf("New with a key prefix outside the user's ACL: no error")
		}
		if !strings.Contains(err.Error(), "self-check") || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("New: %v, want the self-check's NOPERM", err)
		}
	})

	t.Run("CompactReadingBoth", func(t *testing.T) {
		cfg := redis.Config{URL: url, CompactPrefix: "acl-c:", KeyPrefix: "acl:", ReadBoth: true}
		s, k := MustStore(t, cfg), uniqueKey(t)
		MustSet(t, srv.MustClient(t, 3), "acl:"+k, "sent:1775121240000:~Zx9_k2ab:SM1")
		if got := storetest.MustClaim(t, s, ctx, k, "tok-a", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("claim with a readable record: %v, want already_sent", got.State)
		}
	})

	t.Run("OtherPrefixOutsideACLRefusedAtStart", func(t *testing.T) {
		// Every Claim would fail on the other format's GET, and the worker
		// fail open on every notification: refuse to start instead.
		s, err := redis.New(redis.Config{URL: url, CompactPrefix: "acl-c:", KeyPrefix: "not-acl:", ReadBoth: true})
		if err == nil {
			s.Close()
			t.Fatalf("New reading both formats, the readable prefix outside the user's ACL: no error")
		}
		if !strings.Contains(err.Error(), "IDEMPOTENCY_READ_BOTH_FORMATS") || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("New: %v, want the self-check's NOPERM on the other format's key", err)
		}
	})

	t.Run("WrongPassword", func(t *testing.T) {
		s, err := redis.New(redis.Config{URL: fmt.Sprintf("redis://worker:wrong-pw@%s/3", srv.Addr())})
		if err == nil {
			s.Close()
			t.Fatalf("New with a wrong password: no error")
		}
		if strings.Contains(err.Error(), "wrong-pw") {
			t.Fatalf("error %q carries the password", err)
		}
	})
}

// TestSelfCheck backs selfCheck's comment on a standalone server: New claims
// and releases its self-check keys in batches, leaving none behind but the
// store's marker keys, and the release runs by EVALSHA, with EVAL only while
// the server lacks the script.
func TestSelfCheck(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	cfg := redis.Config{URL: srv.URL(), KeyPrefix: "check:"}
	markers := len(cfg.MarkerKeys())
	MustStore(t, cfg)
	if n := countKeys(t, raw, "*"); n != markers {
		t.Fatalf("%d keys left after New's self-check, want only the %d marker keys", n, markers)
	}
	// Each marker key is one more SET (SET NX GET).
	sets, evalshas, evals := redistest.CommandCalls(t, raw, "set")-markers, redistest.CommandCalls(t, raw, "evalsha"), redistest.CommandCalls(t, raw, "eval")
	if sets < 2 || evalshas != sets || evals != sets {
		t.Fatalf("first New on a fresh server sent %d SET, %d EVALSHA, %d EVAL; want as many of each, more than one", sets, evalshas, evals)
	}
	// The first New's EVAL loaded the script: the second finds it by SHA.
	MustStore(t, redis.Config{URL: srv.URL(), KeyPrefix: "check:"})
	if got := redistest.CommandCalls(t, raw, "eval"); got != evals {
		t.Fatalf("second New sent %d EVAL, want none: its EVALSHA did not find the script", got-evals)
	}
	if got := redistest.CommandCalls(t, raw, "evalsha"); got != 2*evalshas {
		t.Fatalf("second New sent %d EVALSHA, want %d", got-evalshas, evalshas)
	}
	if n := countKeys(t, raw, "*"); n != markers {
		t.Fatalf("%d keys left after the second self-check, want only the %d marker keys", n, markers)
	}
}

func TestTLS(t *testing.T) {
	srv, ca := redistest.MustStartTLS(t)

	t.Run("OK", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: srv.URL(), CompactPrefix: "tls:", TLSConfig: &tls.Config{RootCAs: ca}}), uniqueKey(t)
		storetest.MustClaim(t, s, testCtx(t), k, "tok-a", time.Minute)
		if v, _ := MustGet(t, srv.MustClient(t, 0), redis.Config{CompactPrefix: "tls:"}.Key(k)); !strings.HasPrefix(v, "pending:tok-a.") {
			t.Fatalf("key holds %q, want pending:tok-a", v)
		}
	})

	t.Run("UnknownCA", func(t *testing.T) {
		s, err := redis.New(redis.Config{URL: srv.URL()})
		if err == nil {
			s.Close()
			t.Fatalf("New against a certificate from an unknown CA: no error")
		}
	})
}

func TestNewInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]redis.Config{
		"EmptyURL":             {},
		"BadScheme":            {URL: "http://127.0.0.1:6379"},
		"NegativeTimeout":      {URL: "redis://127.0.0.1:6379", Timeout: -time.Second},
		"TLSConfigOnPlainURL":  {URL: "redis://127.0.0.1:6379", TLSConfig: &tls.Config{}},
		"BadDBNumber":          {URL: "redis://u:hunter2@127.0.0.1:6379/x"},
		"NegativeWriteTimeout": {URL: "redis://u:hunter2@127.0.0.1:6379?write_timeout=-1s"},
		"Unparsable":           {URL: "redis://u:hunter2@[::1"},
		"RingTooLarge":         {URL: "redis://u:hunter2@127.0.0.1:6379", MaxUnanswered: redis.MaxRing},
		"UnknownFormat":        {URL: "redis://127.0.0.1:6379", Format: redis.Format(7)},
		// A Claim reading both formats has two commands awaiting an answer.
		"RingTooLargeReadingBoth": {URL: "redis://u:hunter2@127.0.0.1:6379", MaxUnanswered: redis.MaxRing/2 + 1, ReadBoth: true},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := redis.New(cfg)
			if err == nil {
				s.Close()
				t.Fatalf("New(%+v): no error", cfg)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q carries the password", err)
			}
		})
	}
}

// TestMaxCalls: the ring holds every command of MaxUnanswered calls, two
// for a Claim that reads both formats; New accepts exactly MaxCalls.
func TestMaxCalls(t *testing.T) {
	srv := redistest.MustStart(t)
	one, err := redis.Config{URL: srv.URL()}.MaxCalls()
	if err != nil {
		t.Fatal(err)
	}
	both, err := redis.Config{URL: srv.URL(), ReadBoth: true}.MaxCalls()
	if err != nil {
		t.Fatal(err)
	}
	if both != one/2 || one >= redis.MaxRing {
		t.Fatalf("MaxCalls %d reading one format, %d reading both; want the second half the first, both below %d", one, both, redis.MaxRing)
	}
	for _, cfg := range []redis.Config{{URL: srv.URL(), MaxUnanswered: one}, {URL: srv.URL(), MaxUnanswered: both, ReadBoth: true}} {
		MustStore(t, cfg)
		cfg.MaxUnanswered++
		if s, err := redis.New(cfg); err == nil {
			s.Close()
			t.Fatalf("New with MaxUnanswered %d (ReadBoth %v) above MaxCalls: no error", cfg.MaxUnanswered, cfg.ReadBoth)
		}
	}
}

// mustDecodeLease reads a claim's lease as the store does.
func mustDecodeLease(tb testing.TB, v string) ports.Lease {
	tb.Helper()
	c, ok := redis.Decode(v)
	if !ok || c.State != ports.InFlight {
		tb.Fatalf("%q: not a claim (%+v, %v)", v, c, ok)
	}
	return c.Lease
}
