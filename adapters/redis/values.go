package redis

import (
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// The values the store writes under a key, and the only ones it reads:
//
//	pending:<token>.<sender>.<firstuntilms>.<digest>.<startms>.<firstms>.<untilms>
//	                                        a claim: its token, its lease
//	                                        (start and end, Unix
//	                                        milliseconds) and its history,
//	                                        carried through takeovers: the
//	                                        first claim's sender, lease end,
//	                                        digest and start (sender and
//	                                        digest may be empty)
//	sent:<unixms>:~<fingerprint>:<id>       a sent record, the fingerprint
//	                                        of what was sent (may be empty)
//	                                        and the provider id, colons
//	                                        included
//	<decimal integer in [2^62, 2^63)>       a compact sent record (see
//	                                        encodeCompact)
//
// A claim is written in the same form whatever the Format: it lives for a
// lease, and an abandoned one is rare, so its size does not matter, and
// workers writing either format take it over by comparing one value on one
// key. A sent record is written compact under a Compact key when it can
// be, else in the sent: form. These are what a mixed fleet writes through
// the rolling deploy that changes Format (ADR-0008): every worker of it
// reads all three under either key. Anything else under a key is not ours
// (ErrForeignValue). A token and a digest never contain '.'; a sender's
// '.' and '%' are written %2E and %25.
const (
	pendingPrefix   = "pending:"
	sentPrefix      = "sent:"
	fingerprintMark = "~"
)

// claimFields is how many '.'-separated fields follow pendingPrefix.
const claimFields = 7

// claimValue is a claim the store writes: token's, with a lease of ttl
// from start, and its history (see ports.Lease).
type claimValue struct {
	token             string
	first, firstUntil time.Time
	digest, sender    string
	start             time.Time
	ttl               time.Duration
}

// newClaim is token's claim, made at start to send the text digest from
// sender: its history starts with it.
func newClaim(token, digest, sender string, start time.Time, ttl time.Duration) claimValue {
	c := claimValue{token: token, digest: digest, sender: sender, start: start, ttl: ttl}
	c.first, c.firstUntil = start, c.until()
	return c
}

// until is when c's lease ends, to the millisecond.
func (c claimValue) until() time.Time {
	return time.UnixMilli(c.start.UnixMilli() + ms(c.ttl))
}

// inherit is c taking prev over: c's lease, prev's history.
func (c claimValue) inherit(prev ports.Lease) claimValue {
	c.first, c.firstUntil, c.digest, c.sender = prev.First, prev.FirstUntil, prev.Digest, prev.Sender
	return c
}

// encode is c's value.
func (c claimValue) encode() string {
	return pendingPrefix + c.token + "." + senderEscapes.Replace(c.sender) + "." +
		strconv.FormatInt(c.firstUntil.UnixMilli(), 10) + "." + c.digest + "." +
		strconv.FormatInt(c.start.UnixMilli(), 10) + "." + strconv.FormatInt(c.first.UnixMilli(), 10) + "." +
		strconv.FormatInt(c.until().UnixMilli(), 10)
}

// senderEscapes and senderUnescapes write a sender into its field of a
// claim, and read it back: '.' separates the fields.
var (
	senderEscapes   = strings.NewReplacer("%", "%25", ".", "%2E")
	senderUnescapes = strings.NewReplacer("%2E", ".", "%25", "%")
)

// encodeSent is the sent: form of a record.
func encodeSent(r ports.Receipt) string {
	return sentPrefix + strconv.FormatInt(r.SentAt.UnixMilli(), 10) + ":" + fingerprintMark + r.Fingerprint + ":" + r.ProviderID
}

// encodeRecord is the value of a sent record in format f.
func encodeRecord(f Format, r ports.Receipt) string {
	if f == Compact {
		if v, ok := encodeCompact(r); ok {
			return v
		}
	}
	return encodeSent(r)
}

// compactMark is the bit every compact sent record sets: such a record is
// the decimal integer
//
//	1<<62 | unixSeconds<<30 | fingerprint30
//
// with fingerprint30 the first 30 bits of the fingerprint (its first
// ports.FingerprintKept base64url characters), 0 for none. Redis keeps a
// value that is the decimal form of a 64-bit integer as that integer, in
// the key's own object: no string is allocated for it. A fingerprint whose
// first 30 bits are all zero reads back as none, and so never conflicts:
// one record in about 10^9 loses that check, never its suppression.
const compactMark = 1 << 62

// encodeCompact is the compact form of r, when it holds r: a send time
// from 1970 to 2106, and a fingerprint that is empty or starts with
// ports.FingerprintKept base64url characters.
func encodeCompact(r ports.Receipt) (string, bool) {
	secs := r.SentAt.Unix()
	fp, ok := fingerprintBits(r.Fingerprint)
	if secs < 0 || secs >= 1<<32 || !ok {
		return "", false
	}
	return strconv.FormatInt(compactMark|secs<<30|int64(fp), 10), true
}

// decodeCompact reads a compact sent record; ok is false for any other
// value, integers outside the compact range and non-canonical decimals
// included.
func decodeCompact(v string) (r ports.Receipt, ok bool) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n>>62 != 1 || strconv.FormatInt(n, 10) != v {
		return ports.Receipt{}, false
	}
	r.SentAt = time.Unix(n>>30&(1<<32-1), 0).UTC()
	if fp := uint32(n & (1<<30 - 1)); fp != 0 {
		var b [ports.FingerprintKept]byte
		for i := len(b) - 1; i >= 0; i-- {
			b[i] = base64URL[fp&63]
			fp >>= 6
		}
		r.Fingerprint = string(b[:])
	}
	return r, true
}

// base64URL is the alphabet of fingerprints (RFC 4648, section 5).
const base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// fingerprintBits is the first 30 bits of fingerprint f, 0 when f is empty;
// ok is false when f is not empty and does not start with
// ports.FingerprintKept base64url characters.
func fingerprintBits(f string) (bits uint32, ok bool) {
	if f == "" {
		return 0, true
	}
	if len(f) < ports.FingerprintKept {
		return 0, false
	}
	for i := range ports.FingerprintKept {
		d := strings.IndexByte(base64URL, f[i])
		if d < 0 {
			return 0, false
		}
		bits = bits<<6 | uint32(d)
	}
	return bits, true
}

// Decode reads a value the store writes (see the list above) as Claim
// reports it: AlreadySent with what the record kept, or InFlight with the
// claim's lease. ok is false for any other value. Tools and tests that
// read keys by hand use it too.
func Decode(v string) (c ports.Claim, ok bool) {
	if owner, found := strings.CutPrefix(v, pendingPrefix); found {
		l, ok := decodeLease(owner)
		return ports.Claim{State: ports.InFlight, Lease: l}, ok
	}
	r, ok := decodeSent(v)
	if !ok {
		r, ok = decodeCompact(v)
	}
	return ports.Claim{State: ports.AlreadySent, Receipt: r}, ok
}

// decodeLease reads what follows pendingPrefix in a claim; ok is false
// unless it has the claim's fields, its times in Unix milliseconds.
func decodeLease(owner string) (l ports.Lease, ok bool) {
	f := strings.Split(owner, ".")
	if len(f) != claimFields || f[0] == "" {
		return ports.Lease{}, false
	}
	var t [4]time.Time
	for i, field := range [...]string{f[2], f[4], f[5], f[6]} {
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return ports.Lease{}, false
		}
		t[i] = time.UnixMilli(n).UTC()
	}
	return ports.Lease{
		Token: f[0], Start: t[1], Until: t[3],
		First: t[2], FirstUntil: t[0], Digest: f[3], Sender: senderUnescapes.Replace(f[1]),
	}, true
}

// decodeSent reads the sent: form. The provider id is everything after
// the fingerprint, colons included.
func decodeSent(v string) (ports.Receipt, bool) {
	rest, ok := strings.CutPrefix(v, sentPrefix)
	if !ok {
		return ports.Receipt{}, false
	}
	at, rest, ok := strings.Cut(rest, ":"+fingerprintMark)
	if !ok {
		return ports.Receipt{}, false
	}
	fp, id, ok := strings.Cut(rest, ":")
	unixms, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return ports.Receipt{}, false
	}
	return ports.Receipt{ProviderID: id, SentAt: time.UnixMilli(unixms).UTC(), Fingerprint: fp}, true
}

// ms converts a TTL to the milliseconds PX takes. PX rejects 0 and negative
// values, and a sub-millisecond TTL would round to 0: both become 1 ms, the
// closest meaning Redis can express ("expires at once").
func ms(ttl time.Duration) int64 {
	return max(ttl.Milliseconds(), 1)
}
