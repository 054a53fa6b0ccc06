// Package domain is the service "send unless already sent": it decodes a
// shipment event, renders one message per channel, and sends each through
// the claim / send / record-or-release protocol (the README's "How it works"), so a
// replayed event reaches no customer twice. It depends on the standard
// library and ports only.
//
// Every byte of a record is hostile until Decode has judged it. Decode
// refuses, with an *InvalidEventError the consumer dead-letters, a record:
// nested deeper than MaxJSONDepth (its size is the event source's to bound,
// by the operator's MAX_RECORD_BYTES); not valid UTF-8
// (raw, or as a lone surrogate escape that encoding/json would turn into
// U+FFFD); whose top-level, recipient or data object repeats a key, or
// spells a field's name in another case (encoding/json matches names
// case-insensitively and keeps the last of repeated keys, other readers do
// neither, so two systems could disagree on who the customer is); with an
// id that is blank, over MaxIDBytes, or holds white space, control or format
// characters; with no phone and no email (a blank one counts as none).
// Render keeps what it produces safe whatever the event holds: the subject
// and the recipient's name on one line, the HTML escaped by context, the
// SMS cut to Twilio's limit with an ellipsis rather than refused. The fuzz
// targets in this package's tests (make fuzz) assert these properties.
package domain
