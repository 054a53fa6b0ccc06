package redis

import (
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// The values the store writes under a key, newest version first:
//
//	pending:<token>.<sender>.<firstuntilms>.<digest>.<startms>.<firstms>.<untilms>
//	                                        a claim, its lease (start and
//	                                        end, Unix milliseconds) and its
//	                                        history, carried through
//	                                        takeovers: the first claim's
//	                                        sender, lease end, digest and
//	                                        start (sender and digest may be
//	                                        empty)
//	pending:<token>.<digest>.<startms>.<firstms>.<untilms>
//	                                        a claim written before histories
//	                                        kept the sender and the first
//	                                        lease's end (read as its own
//	                                        until)
//	pending:<token>.<startms>.<untilms>     a claim written before histories,
//	                                        whose history is its own lease
//	pending:<token>                         a claim written before leases: live
//	                                        for as long as its key
//	sent:<unixms>:~<fingerprint>:<id>       a sent record and the fingerprint
//	                                        of what was sent
//	sent:<unixms>:<id>                      a sent record written before
//	                                        fingerprints
//	<decimal integer in [2^62, 2^63)>       a compact sent record (see
//	                                        encodeCompact)
//
// A claim is written in the same form whatever the Format: it lives for
// a lease, and an abandoned one is rare, so its size does not matter. A
// sent record is written compact under a Compact key when it can be, else
// in the newest sent: form.
//
// Every string version keeps the prefixes and the decimal send time of the first,
// so workers of different releases share keys during a rolling upgrade:
// the first release reads a claim with a lease as another worker's claim
// (whose owner is "<token>.<start>.<until>") and a record with a
// fingerprint as sent (whose provider id is "~<fingerprint>:<id>"). A
// provider id never starts with '~' (Twilio SIDs are letters and digits, a
// Message-ID starts with '<'), which tells the two sent forms apart; a
// token never contains '.'.
//
// Each claim form adds its fields before those of the form it follows, and
// every release reads a claim from the right: the last two fields are the
// lease as the release before histories reads it (the history's first
// start, and the lease's end), and the last four the digest, the lease's
// start, the history's first start and the lease's end, as the release
// that kept no sender reads them. Either finds a claim of this release
// live or abandoned as its until says, takes it over by its exact value
// (writing its own form, without what it does not know), and never
// releases it: the owner it compares ("<token>.<sender>.<firstuntil>", or
// longer) is no token of its own. A worker of those releases taking such
// a claim over asks the provider about the first send's start and digest,
// and about its own sender. Their own claims are read here with what they
// hold (a sender left empty, the first lease's end taken to be the lease's
// own), and released by the same script (which matches "pending:<token>"
// and a '.' after it). A digest never contains '.'; a sender's '.' and '%'
// are written %2E and %25.
const (
	pendingPrefix   = "pending:"
	sentPrefix      = "sent:"
	fingerprintMark = "~"
)

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
	if c.first.IsZero() {
		c.first, c.firstUntil = prev.Start, prev.Until
	}
	if c.first.IsZero() {
		// A claim without a lease is never taken over.
		c.first, c.firstUntil = c.start, c.until()
	}
	if c.firstUntil.IsZero() {
		c.firstUntil = prev.Until
	}
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

// encodeSent is the value of a sent record. A receipt without a fingerprint
// is written in the first form, which is shorter.
func encodeSent(r ports.Receipt) string {
	at := sentPrefix + strconv.FormatInt(r.SentAt.UnixMilli(), 10) + ":"
	if r.Fingerprint == "" && !strings.HasPrefix(r.ProviderID, fingerprintMark) {
		return at + r.ProviderID
	}
	return at + fingerprintMark + r.Fingerprint + ":" + r.ProviderID
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

// Decode reads a value a store wrote under one of its keys, in any format
// of any release, as Claim would report it: AlreadySent with what the
// record kept, or InFlight with the claim's lease. ok is false for a value
// no store writes. It is for tools and tests that read keys by hand.
func Decode(v string) (c ports.Claim, ok bool) { return decodeValue(v) }

// decodeValue reads a value of any version as what Claim found: InFlight
// with the claim's lease, or AlreadySent with the record. ok is false for a
// value this store did not write.
func decodeValue(v string) (c ports.Claim, ok bool) {
	if owner, found := strings.CutPrefix(v, pendingPrefix); found {
		return ports.Claim{State: ports.InFlight, Lease: decodeLease(owner)}, owner != ""
	}
	r, ok := decodeSent(v)
	if !ok {
		r, ok = decodeCompact(v)
	}
	return ports.Claim{State: ports.AlreadySent, Receipt: r}, ok
}

// decodeLease reads a claim's owner in any form of the list above, from
// the right: the last field is the lease's end, as every release reads
// it, and each form's fields come before those of the form it follows.
// Any other shape is read as a bare token.
func decodeLease(owner string) ports.Lease {
	f := strings.Split(owner, ".")
	n := len(f)
	millis := func(i int) (time.Time, bool) {
		v, err := strconv.ParseInt(f[i], 10, 64)
		return time.UnixMilli(v).UTC(), err == nil
	}
	token := func(fields int) string { return strings.Join(f[:n-fields], ".") }
	if n < 3 {
		return ports.Lease{Token: owner}
	}
	until, ok1 := millis(n - 1)
	start, ok2 := millis(n - 2)
	if !ok1 || !ok2 || token(2) == "" {
		return ports.Lease{Token: owner}
	}
	l := ports.Lease{Token: token(2), Start: start, Until: until, First: start, FirstUntil: until}
	// With a history, the field before until is the first start, and the
	// lease's own start and the digest come before it.
	own, ok := time.Time{}, false
	if n >= 5 && token(4) != "" {
		own, ok = millis(n - 3)
	}
	if !ok {
		return l
	}
	l.Token, l.Start, l.Digest = token(4), own, f[n-4]
	// With a sender, the first lease's end and the sender come before.
	if n >= 7 && token(6) != "" {
		if firstUntil, ok := millis(n - 5); ok {
			l.Token, l.FirstUntil, l.Sender = token(6), firstUntil, senderUnescapes.Replace(f[n-6])
		}
	}
	return l
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
