package redis

import (
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// The values the store writes under a key, newest version first:
//
//	pending:<token>.<startms>.<untilms>     a claim and its lease (start and
//	                                        end, Unix milliseconds)
//	pending:<token>                         a claim written before leases: live
//	                                        for as long as its key
//	sent:<unixms>:~<fingerprint>:<id>       a sent record and the fingerprint
//	                                        of what was sent
//	sent:<unixms>:<id>                      a sent record written before
//	                                        fingerprints
//
// Every version keeps the prefixes and the decimal send time of the first,
// so workers of different releases share keys during a rolling upgrade:
// the first release reads a claim with a lease as another worker's claim
// (whose owner is "<token>.<start>.<until>") and a record with a
// fingerprint as sent (whose provider id is "~<fingerprint>:<id>"). A
// provider id never starts with '~' (Twilio SIDs are letters and digits, a
// Message-ID starts with '<'), which tells the two sent forms apart; a
// token never contains '.'.
const (
	pendingPrefix   = "pending:"
	sentPrefix      = "sent:"
	fingerprintMark = "~"
)

// encodeClaim is the value of token's claim with a lease of ttl from start.
func encodeClaim(token string, start time.Time, ttl time.Duration) string {
	from := start.UnixMilli()
	return pendingPrefix + token + "." + strconv.FormatInt(from, 10) + "." + strconv.FormatInt(from+ms(ttl), 10)
}

// encodeSent is the value of a sent record. A receipt without a fingerprint
// is written in the first form, which is shorter.
func encodeSent(r ports.Receipt) string {
	at := sentPrefix + strconv.FormatInt(r.SentAt.UnixMilli(), 10) + ":"
	if r.Fingerprint == "" && !strings.HasPrefix(r.ProviderID, fingerprintMark) {
		return at + r.ProviderID
	}
	return at + fingerprintMark + r.Fingerprint + ":" + r.ProviderID
}

// decodeValue reads a value of any version as what Claim found: InFlight
// with the claim's lease, or AlreadySent with the record. ok is false for a
// value this store did not write.
func decodeValue(v string) (c ports.Claim, ok bool) {
	if owner, found := strings.CutPrefix(v, pendingPrefix); found {
		return ports.Claim{State: ports.InFlight, Lease: decodeLease(owner)}, owner != ""
	}
	r, ok := decodeSent(v)
	return ports.Claim{State: ports.AlreadySent, Receipt: r}, ok
}

// decodeLease reads "<token>.<startms>.<untilms>", or a bare token (a
// claim without a lease, whose Until stays zero).
func decodeLease(owner string) ports.Lease {
	rest, until, ok1 := cutLast(owner)
	token, start, ok2 := cutLast(rest)
	s, err1 := strconv.ParseInt(start, 10, 64)
	u, err2 := strconv.ParseInt(until, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || token == "" {
		return ports.Lease{Token: owner}
	}
	return ports.Lease{Token: token, Start: time.UnixMilli(s).UTC(), Until: time.UnixMilli(u).UTC()}
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// decodeSent parses either sent form. The provider id is everything after
// the time (and the fingerprint), colons included.
func decodeSent(v string) (ports.Receipt, bool) {
	rest, ok := strings.CutPrefix(v, sentPrefix)
	if !ok {
		return ports.Receipt{}, false
	}
	at, id, ok := strings.Cut(rest, ":")
	if !ok {
		return ports.Receipt{}, false
	}
	unixms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return ports.Receipt{}, false
	}
	r := ports.Receipt{ProviderID: id, SentAt: time.UnixMilli(unixms).UTC()}
	if marked, ok := strings.CutPrefix(id, fingerprintMark); ok {
		fp, pid, ok := strings.Cut(marked, ":")
		if !ok {
			return ports.Receipt{}, false
		}
		r.Fingerprint, r.ProviderID = fp, pid
	}
	return r, true
}

// ms converts a TTL to the milliseconds PX takes. PX rejects 0 and negative
// values, and a sub-millisecond TTL would round to 0: both become 1 ms, the
// closest meaning Redis can express ("expires at once").
func ms(ttl time.Duration) int64 {
	return max(ttl.Milliseconds(), 1)
}
