package domain

import "github.com/harborlight/notification-worker/ports"

// NotificationKey is the idempotency key of one notification: the channel,
// a colon, the event_id. ADR-0006 keys on event_id alone; one key per
// channel refines it for fan-out, so an event whose SMS went out and whose
// email failed re-sends only the email on replay.
//
// The mapping is injective: a channel name never contains a colon, so the
// first colon always ends it, and what follows is the event_id byte for byte.
// Decode bounds event_id to MaxIDBytes, so a key stays short.
func NotificationKey(eventID string, ch ports.Channel) string {
	return string(ch) + ":" + eventID
}
