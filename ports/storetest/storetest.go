// Package storetest is the contract every ports.IdempotencyStore must pass
// (Run), one suite run against every implementation: the memory store and
// the Redis store answer the same questions the same way. Its Fake is the
// store for tests of what uses one, answering as each test chooses.
package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/internal/contract"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// Harness builds the store under test.
type Harness struct {
	// New returns an empty store whose claims' keys outlive their lease by
	// keep. Each call may share a backend with earlier ones; the suite uses
	// a unique key per test.
	New func(t *testing.T, keep time.Duration) ports.IdempotencyStore
	// TTL, when set, reads a key's remaining lifetime from the backend (Redis
	// PTTL), so the suite can check the TTL the store wrote.
	TTL func(t *testing.T, key string) time.Duration
}

// key returns a key no other test in this process uses.
func key(t *testing.T) string { return contract.Unique(t, "storetest") }

// ctx returns a context that ends with the test, within 10 seconds.
func ctx(t *testing.T) context.Context { return contract.Ctx(t, 10*time.Second) }

// MustClaim claims k without a digest and fails the test on error.
func MustClaim(tb testing.TB, s ports.IdempotencyStore, c context.Context, k, token string, ttl time.Duration) ports.Claim {
	tb.Helper()
	return MustClaimSent(tb, s, c, k, token, "", "", ttl)
}

// MustClaimSent claims k to send the text digest from sender and fails
// the test on error.
func MustClaimSent(tb testing.TB, s ports.IdempotencyStore, c context.Context, k, token, digest, sender string, ttl time.Duration) ports.Claim {
	tb.Helper()
	got, err := s.Claim(c, k, token, digest, sender, ttl)
	if err != nil {
		tb.Fatalf("Claim(%q, %q): %v", k, token, err)
	}
	return got
}

// Run runs the contract suite.
func Run(t *testing.T, h Harness) {
	for _, group := range []func(*testing.T, Harness){claims, releases, leases, takeovers, histories, expiry, races} {
		group(t, h)
	}
}

// testReceipt is the sent record the suite writes: its send time has a
// fraction of a second, which a store may drop.
var testReceipt = ports.Receipt{ProviderID: "SM0123456789abcdef", SentAt: time.UnixMilli(1775121240123).UTC(), Fingerprint: "f1ngerpr"}

// Kept reports whether got is what ports.IdempotencyStore.Record may keep
// of want: the send time, or the send time to the second; the fingerprint,
// or its first ports.FingerprintKept characters; the provider id, or none.
func Kept(got, want ports.Receipt) bool {
	sentAt := got.SentAt.Equal(want.SentAt) || got.SentAt.Equal(want.SentAt.Truncate(time.Second))
	fp := got.Fingerprint == want.Fingerprint ||
		len(got.Fingerprint) >= ports.FingerprintKept && strings.HasPrefix(want.Fingerprint, got.Fingerprint)
	id := got.ProviderID == want.ProviderID || got.ProviderID == ""
	return sentAt && fp && id
}

// claims checks Claim, Record and Release on one key at a time.
func claims(t *testing.T, h Harness) {

	t.Run("ClaimAbsentKey", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		if got := MustClaim(t, s, c, k, "tok-a", time.Minute); got.State != ports.Claimed {
			t.Fatalf("first claim: state %v, want claimed", got.State)
		}
	})

	t.Run("ClaimHeldKeyReportsOwner", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", time.Minute)
		got := MustClaim(t, s, c, k, "tok-b", time.Minute)
		if got.State != ports.InFlight || got.Lease.Token != "tok-a" {
			t.Fatalf("second claim: %+v, want in_flight owned by tok-a", got)
		}
		// The losing claim must not have replaced the owner.
		if got := MustClaim(t, s, c, k, "tok-c", time.Minute); got.Lease.Token != "tok-a" {
			t.Fatalf("third claim: owner %q, want tok-a", got.Lease.Token)
		}
	})

	t.Run("ClaimSentKeyReportsReceipt", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", time.Minute)
		if err := s.Record(c, k, testReceipt, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		got := MustClaim(t, s, c, k, "tok-b", time.Minute)
		if got.State != ports.AlreadySent {
			t.Fatalf("claim after record: state %v, want already_sent", got.State)
		}
		if !Kept(got.Receipt, testReceipt) {
			t.Fatalf("receipt %+v, want %+v or what a store may keep of it", got.Receipt, testReceipt)
		}
	})

	t.Run("RecordWithoutClaim", func(t *testing.T) {
		// Fail-open sends record without having claimed.
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		if err := s.Record(c, k, testReceipt, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if got := MustClaim(t, s, c, k, "tok", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("state %v, want already_sent", got.State)
		}
	})
}

// releases checks that Release ends only the caller's own claim.
func releases(t *testing.T, h Harness) {
	t.Run("ReleaseByOwner", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", time.Minute)
		if err := s.Release(c, k, "tok-a"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if got := MustClaim(t, s, c, k, "tok-b", time.Minute); got.State != ports.Claimed {
			t.Fatalf("claim after release: state %v, want claimed", got.State)
		}
	})

	t.Run("ReleaseByNonOwnerIsNoop", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", time.Minute)
		if err := s.Release(c, k, "tok-b"); err != nil {
			t.Fatalf("Release by non-owner: %v", err)
		}
		if got := MustClaim(t, s, c, k, "tok-c", time.Minute); got.State != ports.InFlight || got.Lease.Token != "tok-a" {
			t.Fatalf("after non-owner release: %+v, want in_flight owned by tok-a", got)
		}
	})

	t.Run("ReleaseOfSentKeyIsNoop", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", time.Minute)
		if err := s.Record(c, k, testReceipt, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if err := s.Release(c, k, "tok-a"); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if got := MustClaim(t, s, c, k, "tok-b", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("after release of sent key: state %v, want already_sent", got.State)
		}
	})

	t.Run("ReleaseOfAbsentKeyIsNoop", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		if err := s.Release(c, k, "tok-a"); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})
}

// leases checks the lease a claim reports, and that a claim found holding
// one is judged by ports.Lease.Passed and taken over once it passed.
func leases(t *testing.T, h Harness) {
	t.Run("ClaimReportsItsLease", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		before := time.Now()
		MustClaim(t, s, c, k, "tok-a", time.Minute)
		got := MustClaim(t, s, c, k, "tok-b", time.Minute)
		l := got.Lease
		if got.State != ports.InFlight || l.Token != "tok-a" {
			t.Fatalf("second claim: %+v, want in_flight owned by tok-a", got)
		}
		if l.Start.Before(before.Add(-time.Second)) || l.Start.After(time.Now().Add(time.Second)) || l.Until.Sub(l.Start) != time.Minute {
			t.Fatalf("lease %+v, want a minute from about %v", l, before)
		}
	})

	t.Run("LeaseExpiredClaimTakenOver", func(t *testing.T) {
		s := h.New(t, time.Hour)
		withinLease(t, 200*time.Millisecond, func(lease time.Duration) bool {
			c, k := ctx(t), key(t)
			start := time.Now()
			MustClaim(t, s, c, k, "tok-a", lease)
			if h.TTL != nil {
				// The key outlives the lease, so the claim is found once
				// abandoned.
				checkTTL(t, h.TTL(t, k), lease+time.Hour, start)
			}
			// A claim within the lease finds it held.
			if _, ok := probeLease(t, s, c, k, "tok-b", "tok-a", lease, start); !ok {
				return false
			}
			got := waitState(t, s, c, k, "tok-b", ports.TakenOver, 5*time.Second+lease)
			if got.Lease.Token != "tok-a" || got.Lease.Until.Sub(got.Lease.Start) != lease {
				t.Fatalf("taken over %+v, want tok-a's lease of %v", got.Lease, lease)
			}
			// Now it is tok-b's, with a live lease of its own.
			if got := MustClaim(t, s, c, k, "tok-c", time.Minute); got.State != ports.InFlight || got.Lease.Token != "tok-b" {
				t.Fatalf("after takeover: %+v, want in_flight owned by tok-b", got)
			}
			if err := s.Release(c, k, "tok-b"); err != nil {
				t.Fatalf("Release by the new owner: %v", err)
			}
			if got := MustClaim(t, s, c, k, "tok-d", time.Minute); got.State != ports.Claimed {
				t.Fatalf("after release: %v, want claimed", got.State)
			}
			return true
		})
	})

	t.Run("LeasesJudgedByTheRule", func(t *testing.T) {
		// Every claim of a held key answers by ports.Lease.Passed at the
		// store's now, which lies between the call's start and its
		// return: InFlight only while the lease found has not passed,
		// TakenOver only once it has.
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", 300*time.Millisecond)
		n := 0
		wait.For(t, 5*time.Second, "tok-a's claim taken over after its 300ms lease", func() (bool, string) {
			n++
			before := time.Now()
			got := MustClaim(t, s, c, k, fmt.Sprintf("tok-%d", n), time.Minute)
			after := time.Now()
			switch {
			case got.State == ports.InFlight && got.Lease.Token == "tok-a":
				if got.Lease.Passed(before) {
					t.Fatalf("claim %d at %v: in_flight with a lease that had passed by the rule: %+v", n, before, got.Lease)
				}
				return false, fmt.Sprintf("last %+v", got)
			case got.State == ports.TakenOver && got.Lease.Token == "tok-a":
				if !got.Lease.Passed(after) {
					t.Fatalf("claim %d by %v: taken_over a lease that had not passed by the rule: %+v", n, after, got.Lease)
				}
				return true, ""
			}
			t.Fatalf("claim %d: %+v, want in_flight or taken_over from tok-a", n, got)
			return false, ""
		})
	})
}

// histories checks that a claim's history (its first lease, digest and
// sender) travels unchanged with it through every takeover, and starts
// afresh with a claim of a free key.
func histories(t *testing.T, h Harness) {
	// sameMilli: a store keeps a claim's times to the millisecond.
	sameMilli := func(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }
	// senderA holds the characters a store might use to separate fields.
	const senderA, senderB = "from:Harbor.Light%2E:1", "service:MG0123456789abcdef"

	t.Run("ClaimStartsAHistory", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaimSent(t, s, c, k, "tok-a", "dgst-A1", senderA, time.Minute)
		got := MustClaimSent(t, s, c, k, "tok-b", "dgst-B1", senderB, time.Minute)
		l := got.Lease
		if got.State != ports.InFlight || l.Digest != "dgst-A1" || l.Sender != senderA || l.Start.IsZero() ||
			!sameMilli(l.First, l.Start) || !sameMilli(l.FirstUntil, l.Until) {
			t.Fatalf("a fresh claim, found: %+v, want in_flight with digest dgst-A1, sender %q, and its own lease as the first", got, senderA)
		}
	})

	t.Run("TakeoverKeepsTheHistory", func(t *testing.T) {
		// A claims and dies; B takes over and dies; C takes over and must
		// see A's lease, digest and sender, not B's. A probe reads each
		// lease while it holds, so it must come within the lease: a
		// machine too slow for that gets the scenario again with a longer
		// one.
		s := h.New(t, time.Hour)
		withinLease(t, 50*time.Millisecond, func(lease time.Duration) bool {
			c, k := ctx(t), key(t)
			startA := time.Now()
			MustClaimSent(t, s, c, k, "tok-a", "dgst-A1", senderA, lease)
			a, ok := probeLease(t, s, c, k, "tok-probe", "tok-a", lease, startA)
			if !ok {
				return false
			}
			ofA := func(l ports.Lease) bool {
				return l.Digest == "dgst-A1" && l.Sender == senderA && sameMilli(l.First, a.Start) && sameMilli(l.FirstUntil, a.Until)
			}
			// A's lease passes: the scenario.
			got, startB := waitStateSent(t, s, c, k, "tok-b", "dgst-B1", senderB, lease, ports.TakenOver, "tok-a", 5*time.Second+lease)
			if got.State != ports.TakenOver || got.Lease.Token != "tok-a" || !ofA(got.Lease) {
				t.Fatalf("B's takeover: %+v, want taken_over from tok-a, with A's lease %v as the first, digest dgst-A1, sender %q", got, a, senderA)
			}
			b, ok := probeLease(t, s, c, k, "tok-probe", "tok-b", lease, startB)
			if !ok {
				return false
			}
			if b.Token != "tok-b" || !b.Start.After(a.Start) || !b.Until.After(a.Until) || !ofA(b) {
				t.Fatalf("B's claim: %+v, want tok-b's lease, after A's, carrying A's history (%+v)", b, a)
			}
			// B's lease passes.
			got, _ = waitStateSent(t, s, c, k, "tok-c", "dgst-C1", "", time.Minute, ports.TakenOver, "tok-b", 5*time.Second+lease)
			if got.State != ports.TakenOver || got.Lease.Token != "tok-b" || !ofA(got.Lease) {
				t.Fatalf("C's takeover of B's claim: %+v, want taken_over from tok-b, carrying A's history (%+v)", got, a)
			}
			return true
		})
	})

	t.Run("ReleaseEndsTheHistory", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaimSent(t, s, c, k, "tok-a", "dgst-A1", senderA, 50*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		MustClaimSent(t, s, c, k, "tok-b", "dgst-B1", senderB, time.Minute)
		if err := s.Release(c, k, "tok-b"); err != nil {
			t.Fatal(err)
		}
		if got := MustClaimSent(t, s, c, k, "tok-c", "dgst-C1", senderB, time.Minute); got.State != ports.Claimed {
			t.Fatalf("claim after the release: %v, want claimed", got.State)
		}
		got := MustClaim(t, s, c, k, "tok-probe", time.Minute)
		if l := got.Lease; l.Token != "tok-c" || l.Digest != "dgst-C1" || l.Sender != senderB || !sameMilli(l.First, l.Start) || !sameMilli(l.FirstUntil, l.Until) {
			t.Fatalf("the new claim: %+v, want a history of its own (digest dgst-C1, sender %q, its own lease)", got.Lease, senderB)
		}
	})
}

// takeovers checks that of many callers finding a passed lease, one takes
// the claim over, and none once it is recorded.
func takeovers(t *testing.T, h Harness) {
	t.Run("TakeoverByExactlyOneOfMany", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", 50*time.Millisecond)
		time.Sleep(100 * time.Millisecond) // past the lease
		states := claimConcurrently(t, s, c, k, 64, nil)
		if states[ports.TakenOver] != 1 || states[ports.InFlight] != 63 {
			t.Fatalf("64 concurrent claims of an abandoned key: %v, want 1 taken_over and 63 in_flight", states)
		}
	})

	t.Run("TakeoverRacesTheRecord", func(t *testing.T) {
		// The abandoned claim's worker records after all, while others
		// try to take the claim over: whatever the order, the record stays.
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", 50*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		states := claimConcurrently(t, s, c, k, 32, func() error { return s.Record(c, k, testReceipt, time.Hour) })
		if states[ports.TakenOver] > 1 || states[ports.Claimed] != 0 {
			t.Fatalf("claims racing a record: %v, want at most one taken_over and none claimed", states)
		}
		if got := MustClaim(t, s, c, k, "tok-z", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("after the race: %v, want already_sent", got.State)
		}
	})

	t.Run("RecordedKeyIsNotTakenOver", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", 50*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		if err := s.Record(c, k, testReceipt, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if got := MustClaim(t, s, c, k, "tok-b", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("claim of a recorded key past the lease: %v, want already_sent", got.State)
		}
	})
}

// expiry checks what the TTLs do: a record's, and a claim's key kept
// past its lease.
func expiry(t *testing.T, h Harness) {
	t.Run("RecordExpires", func(t *testing.T) {
		// The TTL read and the claim must come before the record expires:
		// a machine too slow for that gets the scenario again with a
		// longer TTL.
		s := h.New(t, time.Hour)
		withinLease(t, 300*time.Millisecond, func(ttl time.Duration) bool {
			c, k := ctx(t), key(t)
			start := time.Now()
			if err := s.Record(c, k, testReceipt, ttl); err != nil {
				t.Fatalf("Record: %v", err)
			}
			if h.TTL != nil && !checkTTL(t, h.TTL(t, k), ttl, start) {
				return false
			}
			// Right after the write, the record is there...
			got := MustClaim(t, s, c, k, "tok-a", time.Minute)
			if got.State == ports.Claimed && time.Since(start) >= ttl-milli {
				return false // ...unless the claim came after the TTL.
			}
			if got.State != ports.AlreadySent {
				t.Fatalf("state %v, want already_sent", got.State)
			}
			// ...and once its TTL has passed, the key is free again.
			waitState(t, s, c, k, "tok-b", ports.Claimed, 5*time.Second+ttl)
			return true
		})
	})

	t.Run("AbandonedClaimExpiresAfterKeep", func(t *testing.T) {
		// The TTL read must come before the key expires: a machine too
		// slow for that gets the scenario again with a longer lease and keep.
		withinLease(t, 300*time.Millisecond, func(keep time.Duration) bool {
			s, c, k := h.New(t, keep), ctx(t), key(t)
			lease := keep / 3
			start := time.Now()
			MustClaim(t, s, c, k, "tok-a", lease)
			// The key was written before now, so it is gone by then.
			gone := time.Now().Add(lease + keep)
			if h.TTL != nil && !checkTTL(t, h.TTL(t, k), lease+keep, start) {
				return false
			}
			// A claim made in between would take the key over: look only
			// once the key has expired.
			time.Sleep(time.Until(gone) + 50*time.Millisecond)
			if got := MustClaim(t, s, c, k, "tok-b", time.Minute); got.State != ports.Claimed {
				t.Fatalf("claim after lease and keep: %v, want claimed", got.State)
			}
			return true
		})
	})

	t.Run("RecordReplacesClaimTTL", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		MustClaim(t, s, c, k, "tok-a", 200*time.Millisecond)
		start := time.Now()
		if err := s.Record(c, k, testReceipt, time.Hour); err != nil {
			t.Fatalf("Record: %v", err)
		}
		if h.TTL != nil {
			checkTTL(t, h.TTL(t, k), time.Hour, start)
		}
		// Past the claim's TTL, the record (with its own TTL) is still there.
		time.Sleep(400 * time.Millisecond)
		if got := MustClaim(t, s, c, k, "tok-b", time.Minute); got.State != ports.AlreadySent {
			t.Fatalf("state %v after claim TTL, want already_sent", got.State)
		}
	})
}

// races checks concurrent claims and a cancelled context.
func races(t *testing.T, h Harness) {
	t.Run("ClaimRace", func(t *testing.T) {
		s, c, k := h.New(t, time.Hour), ctx(t), key(t)
		if won := claimConcurrently(t, s, c, k, 64, nil)[ports.Claimed]; won != 1 {
			t.Fatalf("%d of 64 concurrent claims won, want exactly 1", won)
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s, k := h.New(t, time.Hour), key(t)
		c, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Claim(c, k, "tok", "", "", time.Minute); err == nil {
			t.Fatalf("Claim with a cancelled context: no error")
		}
	})
}

// checkTTL judges got, a key's remaining lifetime read after a write
// that set want and began at start: at most want, and at least want less
// the time since start and milli. It reports false, judging nothing, when
// want less milli had passed since start: the key may rightly be gone,
// and the machine was too slow to tell.
func checkTTL(t *testing.T, got, want time.Duration, start time.Time) bool {
	t.Helper()
	elapsed := time.Since(start)
	if elapsed >= want-milli {
		return false
	}
	if got > want || got < want-elapsed-milli {
		t.Fatalf("TTL %v read %v after the write began, want at most %v and at least %v", got, elapsed, want, want-elapsed)
	}
	return true
}

// waitState claims k until a claim answers want, and returns that claim.
func waitState(t *testing.T, s ports.IdempotencyStore, c context.Context, k, token string, want ports.ClaimState, within time.Duration) ports.Claim {
	t.Helper()
	var got ports.Claim
	wait.For(t, within, fmt.Sprintf("key %q: %v", k, want), func() (bool, string) {
		got = MustClaim(t, s, c, k, token, time.Minute)
		return got.State == want, "last state " + got.State.String()
	})
	return got
}

// claimConcurrently runs n claims of k at once, each with its own token,
// and also, when set, also at once; it returns how many ended in each state.
func claimConcurrently(t *testing.T, s ports.IdempotencyStore, c context.Context, k string, n int, also func() error) map[ports.ClaimState]int {
	t.Helper()
	var mu sync.Mutex
	states := map[ports.ClaimState]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n+1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := s.Claim(c, k, fmt.Sprintf("tok-%d", i), "", "", time.Minute)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			states[got.State]++
			mu.Unlock()
		}()
	}
	if also != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := also(); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent call: %v", err)
	}
	return states
}

// milli is how much earlier than the caller's clock a store may reckon
// a lease or TTL to start: it keeps times, and Redis counts TTLs, in whole
// milliseconds.
const milli = time.Millisecond

// longestLease bounds the leases (and TTLs) withinLease tries: longer
// than any load on a test machine delays a store call.
const longestLease = 5 * time.Second

// withinLease runs scenario with a lease (or TTL) of first, then four
// times as long each time, up to longestLease, until it reports that its
// steps which must come within that time did (true). A scenario reports
// false only on proof that the machine was too slow: a lease or TTL found
// passed after at least its length of wall time (see probeLease,
// checkTTL). It fails the test when even the longest was too short.
func withinLease(t *testing.T, first time.Duration, scenario func(lease time.Duration) bool) {
	t.Helper()
	lease := first
	for ; lease <= longestLease; lease *= 4 {
		if scenario(lease) {
			return
		}
		t.Logf("%v passed before the steps within it were done: the machine was slow; again with a longer lease or TTL", lease)
	}
	t.Fatalf("every lease or TTL from %v to %v passed before the steps within it were done", first, lease/4)
}

// probeLease claims k as token, k held by owner with a lease of lease,
// and returns the lease found. A claim of a held key must not replace its
// owner while the lease holds, so the probe must answer in_flight owned by
// owner; it may instead take the claim over (ok false: the probe spoiled
// the scenario) only when lease (less milli) has passed since start, taken
// before owner's claim.
func probeLease(t *testing.T, s ports.IdempotencyStore, c context.Context, k, token, owner string, lease time.Duration, start time.Time) (l ports.Lease, ok bool) {
	t.Helper()
	got := MustClaim(t, s, c, k, token, time.Minute)
	switch {
	case got.State == ports.InFlight && got.Lease.Token == owner:
		return got.Lease, true
	case got.State == ports.TakenOver && got.Lease.Token == owner && time.Since(start) >= lease-milli:
		return got.Lease, false
	}
	t.Fatalf("probe %v after %s's claim with a lease of %v: %+v, want in_flight owned by %s", time.Since(start), owner, lease, got, owner)
	return l, false
}

// waitStateSent claims k to send digest from sender, with lease, until a
// claim answers want; every claim before must answer in_flight owned by
// owner. It returns the claim that answered want, and the time just before
// it was made (when a claim it won began, at the latest).
func waitStateSent(t *testing.T, s ports.IdempotencyStore, c context.Context, k, token, digest, sender string, lease time.Duration, want ports.ClaimState, owner string, within time.Duration) (got ports.Claim, before time.Time) {
	t.Helper()
	wait.For(t, within, fmt.Sprintf("key %q: %v", k, want), func() (bool, string) {
		before = time.Now()
		got = MustClaimSent(t, s, c, k, token, digest, sender, lease)
		if got.State != want && (got.State != ports.InFlight || got.Lease.Token != owner) {
			t.Fatalf("key %q: waiting for %v: %+v, want in_flight owned by %s until then", k, want, got, owner)
		}
		return got.State == want, fmt.Sprintf("last %+v", got)
	})
	return got, before
}
