package domain

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/harborlight/notification-worker/ports"
)

// MaxKeyBytes bounds NotificationKey for every event Decode accepts (a
// channel name, a colon, at most MaxIDBytes of event_id). With a store's
// prefix it stays far inside what the key meets on its way: a Redis key
// (512 MB), a Kafka header (a key of at most 32767 bytes), one line of an
// SMTP header such as a Message-ID (998 octets).
const MaxKeyBytes = 256

// NotificationKey is the idempotency key of one notification: the channel,
// a colon, the event_id. ADR-0006 keys on event_id alone; one key per
// channel refines it for fan-out, so an event whose SMS went out and whose
// email failed re-sends only the email on replay.
//
// The mapping is injective whatever bytes eventID and ch hold: the first
// colon of a key always ends the channel part, and what follows is the
// event_id byte for byte. The known channels never contain a colon; should
// a channel ever do, its '%' and ':' are percent-encoded, so it still cannot
// borrow a prefix of the event_id. Decode bounds event_id to MaxIDBytes, so
// a key stays within MaxKeyBytes.
func NotificationKey(eventID string, ch ports.Channel) string {
	c := string(ch)
	if strings.ContainsAny(c, "%:") {
		c = strings.NewReplacer("%", "%25", ":", "%3A").Replace(c)
	}
	return c + ":" + eventID
}

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
