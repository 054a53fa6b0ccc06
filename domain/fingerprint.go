package domain

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"slices"

	"github.com/harborlight/notification-worker/ports"
)

// FingerprintLen is the length of a Fingerprint: 8 base64url characters,
// 48 bits of SHA-256, enough to tell apart the events one event_id is
// (wrongly) reused for, and short enough for the sent record.
const FingerprintLen = 8

// Fingerprint digests what decides the notification of ev on ch: the event
// type, the shipment, the recipient's address on that channel, and the
// template data. Equal inputs give equal fingerprints; a change in any of
// them gives another (but for a 2^-48 collision). The recipient's name and
// occurred_at are left out: they do not change which message a customer
// gets, and a producer may well correct a name between retries. The
// templates are left out too, so that a template deployed between a send and
// its replay does not make the replay look like another event.
func Fingerprint(ev Event, ch ports.Channel) string {
	h := sha256.New()
	field(h, ev.Type)
	field(h, ev.ShipmentID)
	field(h, string(ch))
	field(h, ev.Recipient.Address(ch))
	keys := make([]string, 0, len(ev.Data))
	for k := range ev.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field(h, k)
		field(h, ev.Data[k])
	}
	sum := h.Sum(nil)
	return base64.RawURLEncoding.EncodeToString(sum[:6])
}

// field writes s length-prefixed, so that no two sequences of fields write
// the same bytes.
func field(h hash.Hash, s string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
	h.Write([]byte(s))
}

// TextDigest digests text as a message sends it (an SMS body): 8 base64url
// characters, 48 bits of SHA-256. A claim keeps the digest of the text it
// was made to send (ports.Lease.Digest), so that a send whose outcome is
// unknown is reconciled against what was sent, not against what the
// message renders to now (a template reworded, a recipient's name
// corrected since). It never contains '.', as a claim's digest must not.
func TextDigest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return base64.RawURLEncoding.EncodeToString(sum[:6])
}
