package domain

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
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
	// The fields are hashed in one call, from a buffer on the stack for the
	// usual event.
	var (
		buf  [512]byte
		keys [8]string
	)
	b := buf[:0]
	b = field(b, ev.Type)
	b = field(b, ev.ShipmentID)
	b = field(b, string(ch))
	b = field(b, ev.Recipient.Address(ch))
	sorted := keys[:0]
	for k := range ev.Data {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	for _, k := range sorted {
		b = field(b, k)
		b = field(b, ev.Data[k])
	}
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:6])
}

// field appends s to b length-prefixed, so that no two sequences of fields
// write the same bytes.
func field(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
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
