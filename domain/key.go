package domain

import (
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
