// Package domain is the service "send unless already sent": it decodes a
// shipment event, renders one message per channel, and sends each through
// the claim / send / record-or-release protocol (the README's "How it
// works"), so a replayed event reaches no customer twice. It depends on the
// standard library, ports and libphonenumber's numbering plans only.
//
// Every byte of a record is hostile until Decode has judged it: what two
// JSON readers could understand differently, and what no message can
// carry, is refused with an *InvalidEventError, which the consumer
// dead-letters. Render keeps what it produces safe whatever the event
// holds: the subject and the recipient's name on one line, the HTML
// escaped by context, the SMS cut to Twilio's limit with an ellipsis rather
// than refused. The fuzz targets in this package's tests (make fuzz)
// assert these properties.
package domain
