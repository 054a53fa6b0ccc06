package redis_test

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// TestCompactFormat pins the Compact format as docs/capacity.md and the
// runbook describe it, so that an operator can find and read a key by hand.
func TestCompactFormat(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	ctx := testCtx(t)

	t.Run("KeyFromEventID", func(t *testing.T) {
		const eventID = "7f1c9a52-3d4e-4b8a-9f0e-2c6d1e8b5a43"
		for key, tag := range map[string]string{"sms:" + eventID: "s", "email:" + eventID: "e", "Push:" + eventID: "_"} {
			sum := sha256.Sum256([]byte(key))
			want := "n" + tag + base64.RawURLEncoding.EncodeToString(sum[:9])
			if got := (redis.Config{}).Key(key); got != want {
				t.Errorf("Key(%q) = %q, want %q", key, got, want)
			}
			if got := (redis.Config{}).Key(key); len(got) != 14 {
				t.Errorf("Key(%q) is %d bytes, want 14: the most Redis keeps in its smallest allocation", key, len(got))
			}
		}
	})

	t.Run("RecordIsAnIntegerRedisStoresAsOne", func(t *testing.T) {
		s, k := MustStore(t, redis.Config{URL: srv.URL()}), "sms:"+uniqueKey(t)
		r := ports.Receipt{ProviderID: "SM0123", SentAt: time.UnixMilli(1775121240987), Fingerprint: "Zx9_k2ab"}
		if err := s.Record(ctx, k, r, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		key := redis.Config{}.Key(k)
		v, _ := MustGet(t, raw, key)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("stored %q, want a decimal integer", v)
		}
		// The layout the runbook decodes by hand.
		if n>>62 != 1 || n>>30&(1<<32-1) != 1775121240 || n&(1<<30-1) != fingerprint30("Zx9_k") {
			t.Fatalf("stored %d: mark %d, seconds %d, fingerprint %d; want 1, 1775121240, %d", n, n>>62, n>>30&(1<<32-1), n&(1<<30-1), fingerprint30("Zx9_k"))
		}
		if enc, err := raw.Do(ctx, raw.B().ObjectEncoding().Key(key).Build()).ToString(); err != nil || enc != "int" {
			t.Fatalf("OBJECT ENCODING %s = %q, %v; want int", key, enc, err)
		}
		if ttl := MustPTTL(t, raw, key); ttl > time.Hour || ttl < time.Hour-5*time.Second {
			t.Fatalf("PTTL %v, want just under 1h", ttl)
		}
		got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute)
		want := ports.Receipt{SentAt: time.Unix(1775121240, 0).UTC(), Fingerprint: "Zx9_k"}
		if got.State != ports.AlreadySent || got.Receipt != want {
			t.Fatalf("claim %+v, want already_sent with %+v", got, want)
		}
	})

	// Receipts the integer cannot hold are written in the sent: form,
	// under the same compact key, and read back whole.
	for name, r := range map[string]ports.Receipt{
		"ShortFingerprint":      {ProviderID: "SM1", SentAt: time.UnixMilli(1775121240000), Fingerprint: "ab"},
		"FingerprintNotBase64":  {ProviderID: "SM1", SentAt: time.UnixMilli(1775121240000), Fingerprint: "a.b+c/d"},
		"SentBefore1970":        {ProviderID: "SM1", SentAt: time.UnixMilli(-1000), Fingerprint: "abcdefgh"},
		"SentAfter2106":         {ProviderID: "SM1", SentAt: time.Date(2107, 1, 1, 0, 0, 0, 0, time.UTC), Fingerprint: "abcdefgh"},
		"FingerprintOfZeroBits": {ProviderID: "SM1", SentAt: time.UnixMilli(1775121240000), Fingerprint: "AAAAAxyz"},
	} {
		t.Run(name, func(t *testing.T) {
			s, k := MustStore(t, redis.Config{URL: srv.URL()}), "sms:"+uniqueKey(t)
			if err := s.Record(ctx, k, r, time.Hour); err != nil {
				t.Fatalf("Record: %v", err)
			}
			got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute)
			if got.State != ports.AlreadySent {
				t.Fatalf("claim: %v, want already_sent", got.State)
			}
			if name == "FingerprintOfZeroBits" {
				// Indistinguishable from no fingerprint: read back as none,
				// so it never conflicts, and still suppresses.
				if got.Receipt.Fingerprint != "" {
					t.Fatalf("fingerprint %q, want none", got.Receipt.Fingerprint)
				}
				return
			}
			if !got.Receipt.SentAt.Equal(r.SentAt) || got.Receipt.Fingerprint != r.Fingerprint || got.Receipt.ProviderID != r.ProviderID {
				t.Fatalf("receipt %+v, want %+v", got.Receipt, r)
			}
		})
	}
}

// fingerprint30 is the first 30 bits of a base64url fingerprint.
func fingerprint30(f string) int64 {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var n int64
	for i := range 5 {
		n = n<<6 | int64(strings.IndexByte(alphabet, f[i]))
	}
	return n
}

// TestReadBoth: during a rolling upgrade from a release that wrote readable
// keys, and after a change of Format, what the other format holds decides
// a notification the store's own key knows nothing of.
func TestReadBoth(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	ctx := testCtx(t)
	compact := redis.Config{URL: srv.URL(), CompactPrefix: "rb:", KeyPrefix: "rb-r:", ReadBoth: true}
	readable := compact
	readable.Format = redis.Readable
	leaseUntil := func(d time.Duration) string {
		start, until := time.Now().UnixMilli()-60000, time.Now().Add(d).UnixMilli()
		return fmt.Sprintf("pending:old-worker..%d..%d.%d.%d", until, start, start, until)
	}

	for _, tc := range []struct {
		name, value string
		want        ports.ClaimState
	}{
		{"SentWithFingerprint", "sent:1775121240123:~Zx9_k2ab:SM0123", ports.AlreadySent},
		{"OptedOut", "sent:1775121240123:~Zx9_k2ab:opted-out:21610", ports.AlreadySent},
		{"ClaimWithLiveLease", leaseUntil(time.Minute), ports.InFlight},
	} {
		t.Run("Readable"+tc.name, func(t *testing.T) {
			s, k := MustStore(t, compact), "sms:"+uniqueKey(t)
			MustSet(t, raw, compact.OtherKey(k), tc.value)
			got := storetest.MustClaim(t, s, ctx, k, "tok-new", time.Minute)
			if got.State != tc.want {
				t.Fatalf("claim over readable %q: %+v, want %v", tc.value, got, tc.want)
			}
			if tc.want == ports.AlreadySent && got.Receipt.ProviderID != "SM0123" && got.Receipt.ProviderID != "opted-out:21610" {
				t.Fatalf("receipt %+v, want the readable record's", got.Receipt)
			}
			// A worker of the release before looks only at the readable key:
			// the compact claim is gone, so nothing of ours stands in the way
			// and no compact claim outlives the notification.
			if v, ok := MustGet(t, raw, compact.Key(k)); ok {
				t.Fatalf("compact key holds %q, want it released", v)
			}
			if v, _ := MustGet(t, raw, compact.OtherKey(k)); v != tc.value {
				t.Fatalf("readable key now %q, want it untouched", v)
			}
		})
	}

	t.Run("ReadableClaimAbandoned", func(t *testing.T) {
		s, k := MustStore(t, compact), "sms:"+uniqueKey(t)
		MustSet(t, raw, compact.OtherKey(k), leaseUntil(-time.Second))
		got := storetest.MustClaim(t, s, ctx, k, "tok-new", time.Minute)
		if got.State != ports.TakenOver || got.Lease.Token != "old-worker" {
			t.Fatalf("claim over an abandoned readable claim: %+v, want taken_over from old-worker", got)
		}
		if v, _ := MustGet(t, raw, compact.Key(k)); !strings.HasPrefix(v, "pending:tok-new.") {
			t.Fatalf("compact key holds %q, want our claim", v)
		}
		// Another new worker now finds our claim.
		if got := storetest.MustClaim(t, MustStore(t, compact), ctx, k, "tok-other", time.Minute); got.State != ports.InFlight || got.Lease.Token != "tok-new" {
			t.Fatalf("second claim: %+v, want in_flight owned by tok-new", got)
		}
	})

	t.Run("OwnClaimThenReadableRecord", func(t *testing.T) {
		// An earlier attempt claimed the compact key; meanwhile a worker of
		// the release before sent and recorded the notification.
		s, k := MustStore(t, compact), "sms:"+uniqueKey(t)
		storetest.MustClaim(t, s, ctx, k, "tok-new", time.Minute)
		MustSet(t, raw, compact.OtherKey(k), "sent:1775121240000:~Zx9_k2ab:SM0123")
		if got := storetest.MustClaim(t, s, ctx, k, "tok-new", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("own claim, then a readable record: %+v, want already_sent", got)
		}
	})

	t.Run("CompactRecordWins", func(t *testing.T) {
		s, k := MustStore(t, compact), "sms:"+uniqueKey(t)
		if err := s.Record(ctx, k, ports.Receipt{SentAt: time.Now()}, time.Hour); err != nil {
			t.Fatal(err)
		}
		MustSet(t, raw, compact.OtherKey(k), leaseUntil(time.Minute))
		if got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("compact record and a readable claim: %v, want already_sent", got.State)
		}
	})

	t.Run("ReadableStoreReadsCompactRecords", func(t *testing.T) {
		// Switching back from compact to readable.
		c, r, k := MustStore(t, compact), MustStore(t, readable), "email:"+uniqueKey(t)
		if err := c.Record(ctx, k, ports.Receipt{SentAt: time.Now(), Fingerprint: "abcdefgh"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		got := storetest.MustClaim(t, r, ctx, k, "tok", time.Minute)
		if got.State != ports.AlreadySent || got.Receipt.Fingerprint != "abcde" {
			t.Fatalf("readable store over a compact record: %+v, want already_sent with fingerprint abcde", got)
		}
		if _, ok := MustGet(t, raw, readable.Key(k)); ok {
			t.Fatalf("readable key left behind")
		}
	})

	t.Run("ForeignValueInOtherKey", func(t *testing.T) {
		s, k := MustStore(t, compact), "sms:"+uniqueKey(t)
		MustSet(t, raw, compact.OtherKey(k), "hello-secret-value")
		_, err := s.Claim(ctx, k, "tok", "", "", time.Minute)
		if !errors.Is(err, redis.ErrForeignValue) || !strings.Contains(err.Error(), compact.OtherKey(k)) || strings.Contains(err.Error(), "hello-secret") {
			t.Fatalf("Claim: %v, want ErrForeignValue naming the readable key, not its value", err)
		}
		if v, ok := MustGet(t, raw, compact.Key(k)); ok {
			t.Fatalf("compact key holds %q after the error, want it released", v)
		}
	})

	t.Run("WithoutReadBothTheOtherKeyIsIgnored", func(t *testing.T) {
		only := compact
		only.ReadBoth = false
		s, k := MustStore(t, only), "sms:"+uniqueKey(t)
		MustSet(t, raw, only.OtherKey(k), "sent:1775121240000:~Zx9_k2ab:SM0123")
		if got := storetest.MustClaim(t, s, ctx, k, "tok", time.Minute); got.State != ports.Claimed {
			t.Fatalf("claim: %v, want claimed", got.State)
		}
	})
}

// TestReadBothTakesTheOtherFormatsAbandonedClaimOver: a worker writing one
// format was killed mid-send and left its claim; a worker writing the other
// format, reading both, takes that claim over, once, and may then claim the
// notification for a send of its own. Both directions: a compact worker
// meeting a readable claim (a rolling upgrade) and a readable one meeting a
// compact claim (a switch back).
func TestReadBothTakesTheOtherFormatsAbandonedClaimOver(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	ctx := testCtx(t)
	compact := redis.Config{URL: srv.URL(), CompactPrefix: "tko:", KeyPrefix: "tko-r:", ReadBoth: true}
	readable := compact
	readable.Format = redis.Readable

	for name, formats := range map[string][2]redis.Config{
		"ReadableClaimCompactWorker": {readable, compact},
		"CompactClaimReadableWorker": {compact, readable},
	} {
		t.Run(name, func(t *testing.T) {
			killedCfg, liveCfg := formats[0], formats[1]
			killed, live, k := MustStore(t, killedCfg), MustStore(t, liveCfg), "sms:"+uniqueKey(t)
			if got := storetest.MustClaim(t, killed, ctx, k, "killed-worker", 20*time.Millisecond); got.State != ports.Claimed {
				t.Fatalf("the killed worker's claim: %v", got.State)
			}
			time.Sleep(50 * time.Millisecond) // its lease passes: the scenario
			abandoned, _ := MustGet(t, raw, killedCfg.Key(k))

			got := storetest.MustClaim(t, live, ctx, k, "tok-1", time.Minute)
			if got.State != ports.TakenOver || got.Lease.Token != "killed-worker" {
				t.Fatalf("claim over the other format's abandoned claim: %+v, want taken_over from killed-worker", got)
			}
			if v, ok := MustGet(t, raw, killedCfg.Key(k)); ok && v == abandoned {
				t.Fatalf("the abandoned claim %q is still there: it was reported taken over, not taken", v)
			}
			// A second taker, of either format, finds it taken.
			for _, cfg := range []redis.Config{killedCfg, liveCfg} {
				if got := storetest.MustClaim(t, MustStore(t, cfg), ctx, k, "tok-late", time.Minute); got.State != ports.InFlight || got.Lease.Token != "tok-1" {
					t.Fatalf("%v worker's claim after the takeover: %+v, want in_flight owned by tok-1", cfg.Format, got)
				}
			}
			// The provider said "not sent": the taker releases and claims
			// the notification for its own send.
			if err := live.Release(ctx, k, "tok-1"); err != nil {
				t.Fatal(err)
			}
			if got := storetest.MustClaim(t, live, ctx, k, "tok-2", time.Minute); got.State != ports.Claimed {
				t.Fatalf("claim after releasing the takeover: %+v, want claimed", got)
			}
		})
	}
}

// TestReadBothOneTakerOfAnAbandonedClaim: workers of both formats, all
// reading both, find the same abandoned claim at once (a rebalance overlap
// during a switch of format). At most one may take it over, and none may
// find the key free: a second taker would reconcile and send too.
func TestReadBothOneTakerOfAnAbandonedClaim(t *testing.T) {
	srv := redistest.MustStart(t)
	ctx := testCtx(t)
	compact := redis.Config{URL: srv.URL(), CompactPrefix: "race:", KeyPrefix: "race-r:", ReadBoth: true}
	readable := compact
	readable.Format = redis.Readable
	stores := []*redis.Store{MustStore(t, compact), MustStore(t, readable)}
	for run := range 20 {
		k := "sms:" + uniqueKey(t)
		killed := stores[run%2]
		if got := storetest.MustClaim(t, killed, ctx, k, "killed-worker", 20*time.Millisecond); got.State != ports.Claimed {
			t.Fatalf("run %d: the killed worker's claim: %v", run, got.State)
		}
		time.Sleep(40 * time.Millisecond) // its lease passes: the scenario

		const takers = 16
		states := make(chan ports.ClaimState, takers)
		errs := make(chan error, takers)
		start := make(chan struct{})
		for i := range takers {
			go func() {
				<-start
				got, err := stores[i%2].Claim(ctx, k, fmt.Sprintf("tok-%d", i), "", "", time.Minute)
				if err != nil {
					errs <- err
					return
				}
				states <- got.State
			}()
		}
		close(start)
		count := map[ports.ClaimState]int{}
		for range takers {
			select {
			case s := <-states:
				count[s]++
			case err := <-errs:
				t.Fatalf("run %d: Claim: %v", run, err)
			}
		}
		if count[ports.TakenOver] > 1 || count[ports.Claimed] > 0 {
			t.Fatalf("run %d: %d workers of both formats over one abandoned claim: %v, want at most one taken_over and none claimed", run, takers, count)
		}
	}
}
