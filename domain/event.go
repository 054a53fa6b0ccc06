package domain

import (
	"encoding/json/jsontext"
	"encoding/json/v2"
	"errors"
	"fmt"
	"maps"
	"net/mail"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/harborlight/notification-worker/ports"
)

// Limits on the identifiers of an event. They keep an idempotency key well
// inside Redis's and Kafka's limits, and make a 10 kB event_id a clear error
// instead of a 10 kB key.
const (
	MaxIDBytes   = 128
	MaxNameRunes = 100
	MaxEmailLen  = ports.MaxEmailLen
)

// MaxJSONDepth bounds how deeply objects and arrays nest in a record. The
// event itself nests 3 deep (record, recipient or data, value); the rest is
// room for fields producers add. The record's size is bounded before it gets
// here, by the event source (the consumer's MAX_RECORD_BYTES, an operator's
// setting), so Decode does not impose a second, hidden size limit.
const MaxJSONDepth = 32

// Event is a shipment event, decoded and validated (README: "The event").
// Decode reads each field from the record's member of the field's JSON
// name, and validate checks it: a field added here is decoded with no
// other change, and checked where validate checks the others.
type Event struct {
	EventID    string          `json:"event_id"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurred_at"`
	ShipmentID string          `json:"shipment_id"`
	Recipient  Recipient       `json:"recipient"`
	Channels   []ports.Channel `json:"channels"`
	Data       Data            `json:"data"`
}

// Recipient is who the notification is for: a name, and an address per
// channel, each normalised by its channel (Channel.Normalize) after Decode.
type Recipient struct {
	Name string
	// Addresses holds the address of each channel the event gave one for;
	// a channel without an address is absent.
	Addresses map[ports.Channel]string
}

// Address returns the recipient's address on ch, or "" when there is none.
func (r Recipient) Address(ch ports.Channel) string { return r.Addresses[ch] }

// Data holds the template values of an event. JSON strings, numbers and
// booleans are accepted and kept as their text, a null as no value; nested
// objects and arrays are not, because no template can print them sensibly.
type Data map[string]string

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (d *Data) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	tok, err := dec.ReadToken()
	switch {
	case err != nil:
		return err
	case tok.Kind() == 'n':
		*d = nil
		return nil
	case tok.Kind() != '{':
		return invalid("data", "", "want a JSON object, got "+kindName(tok.Kind()))
	}
	*d = Data{}
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return err
		}
		k := name.String() // the next read voids name
		v, err := dec.ReadToken()
		switch {
		case err != nil:
			return err
		case v.Kind() == '{' || v.Kind() == '[':
			return invalid("data."+clip(k, 64), "", "want a string, number or boolean, got a nested value")
		case v.Kind() != 'n':
			(*d)[k] = v.String()
		}
	}
	_, err = dec.ReadToken()
	return err
}

// InvalidEventError says why a record is not a valid event. It is permanent:
// the same bytes fail the same way on every replay.
//
// Its text goes into logs and dead-letter headers, so it never holds a
// field of the recipient in clear: a phone number or an email address
// appears masked (by its channel's Mask) or not at all, a name
// never, and a length error gives the length, not the value.
type InvalidEventError struct {
	Field  string // JSON path of the offending field; empty for the record as a whole
	Value  string // the offending value, cut to a readable length; masked or empty for a recipient's field
	Reason string
}

func (e *InvalidEventError) Error() string {
	switch {
	case e.Field == "":
		return "invalid event: " + e.Reason
	case e.Value == "":
		return fmt.Sprintf("invalid event: %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("invalid event: %s %q: %s", e.Field, e.Value, e.Reason)
}

// invalid returns the *InvalidEventError for field, value and reason. A
// field may be a producer's member name: its control characters are not
// printed.
func invalid(field, value, reason string) error {
	return &InvalidEventError{Field: noControls(field), Value: clip(value, 64), Reason: reason}
}

// Decode is Templates.DecodeEvent for the Builtin channels: it parses and
// validates a record value whose recipient may give a phone and an email.
// The returned event is normalised: each address by its channel, the name
// on one line, the channels defaulted (in the channels' order) and
// de-duplicated. Any error is an *InvalidEventError.
//
// Besides the rules of the README's event section, Decode refuses what two
// JSON readers could understand differently, so that no downstream system
// (an audit consumer, a replay tool) can disagree with this worker on who
// the customer is. It reads the record with encoding/json/v2: a name
// repeated in any object of the record is refused, and names match fields
// exactly. It also refuses a member beside the event's fields whose name
// differs from a field's only in case (a case-insensitive reader would take
// "Event_ID" for event_id), a recipient field that no channel reads,
// records nested deeper than MaxJSONDepth, and text that is not valid
// UTF-8, raw or as a lone surrogate escape ("\ud800").
func Decode(value []byte) (Event, error) { return decode(value, Builtin) }

// decode is Decode for chans.
func decode(value []byte, chans []ChannelSpec) (Event, error) {
	if !utf8.Valid(value) {
		return Event{}, invalid("", "", "not valid UTF-8")
	}
	var r record
	// A lone surrogate escape decodes to U+FFFD, which validate refuses
	// naming the field (raw bytes that are not UTF-8 were refused above).
	if err := json.Unmarshal(value, &r, jsontext.AllowInvalidUTF8(true)); err != nil {
		return Event{}, jsonError(err)
	}
	ev := r.Event
	err := ev.validate(r.Recipient, chans)
	return ev, err
}

// record is an Event as a record carries it: the recipient's fields by
// name, which validate reads against the channels (a null is ""), and the
// members beside the event's fields.
type record struct {
	Event
	Recipient map[string]string `json:"recipient"`
	Others    map[string]other  `json:",embed"`
}

// other is a member beside the event's fields. The top level stays open:
// producers may add members of their own (a trace context, say), which the
// worker ignores, but not one named like a field but for case, nor one
// nested deeper than MaxJSONDepth.
type other struct{}

// UnmarshalJSONFrom implements json.UnmarshalerFrom.
func (other) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	name := dec.StackPointer().LastToken()
	for _, f := range eventFields {
		if strings.EqualFold(name, f) {
			return invalid(clip(name, 64), "", fmt.Sprintf("field names are case-sensitive: want %q", f))
		}
	}
	depth := dec.StackDepth()
	for {
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		switch d := dec.StackDepth(); {
		case d > MaxJSONDepth:
			return invalid("", "", fmt.Sprintf("JSON nested deeper than %d levels", MaxJSONDepth))
		case d == depth:
			return nil
		}
	}
}

// eventFields are the JSON names of Event's fields.
var eventFields = func() []string {
	t := reflect.TypeFor[Event]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}()

// jsonError is the *InvalidEventError for err, json.Unmarshal's error on a
// record. The error may quote the input (a bad occurred_at, say): it is
// clipped so that a dead letter's reason stays readable, and its control
// characters are not printed (time's errors quote a DEL or a C1 control raw).
func jsonError(err error) error {
	var (
		ie  *InvalidEventError
		syn *jsontext.SyntacticError
		sem *json.SemanticError
	)
	switch {
	case errors.As(err, &ie):
		return ie
	case errors.As(err, &syn) && errors.Is(syn.Err, jsontext.ErrDuplicateName):
		return invalid(fieldPath(syn.JSONPointer), "", "the key appears more than once: readers of the record could disagree on its value")
	case errors.As(err, &sem) && sem.Err != nil:
		return invalid(fieldPath(sem.JSONPointer), "", clip(noControls(sem.Err.Error()), 200))
	case errors.As(err, &sem) && sem.JSONKind != 0:
		return invalid(fieldPath(sem.JSONPointer), "", "unexpected JSON "+kindName(sem.JSONKind))
	}
	return invalid("", "", "not a JSON event: "+clip(noControls(err.Error()), 200))
}

// fieldPath is p as an InvalidEventError's Field: "recipient.phone" for
// /recipient/phone.
func fieldPath(p jsontext.Pointer) string {
	return clip(strings.Join(slices.Collect(p.Tokens()), "."), 200)
}

// kindName names the JSON kind k as a reason says it.
func kindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return k.String()
}

// noControls returns s with every control character made a '?'.
func noControls(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// validate checks ev, whose recipient object held given, for chans, and
// normalises it (see decode). The recipient is closed: each of its fields
// is the name or an address, and an address the worker does not know
// ("mobile" for "phone") would otherwise be dropped without a word, and its
// channel never notified.
func (ev *Event) validate(given map[string]string, chans []ChannelSpec) error {
	ev.Recipient.Addresses = map[ports.Channel]string{}
	for _, name := range slices.Sorted(maps.Keys(given)) { // the same error for the same bytes
		i := slices.IndexFunc(chans, func(c ChannelSpec) bool { return c.Field == name })
		switch {
		case name == "name":
			ev.Recipient.Name = given[name]
		case i >= 0:
			ev.Recipient.Addresses[chans[i].Name] = given[name]
		default:
			return unknownRecipientField(name, chans)
		}
	}
	for _, f := range []struct{ name, value string }{
		{"event_id", ev.EventID}, {"type", ev.Type}, {"shipment_id", ev.ShipmentID},
	} {
		if err := checkID(f.name, f.value); err != nil {
			return err
		}
	}
	// A lone surrogate escape decodes to U+FFFD: garbage for the customer,
	// as raw bytes that are not UTF-8 would be.
	if strings.ContainsRune(ev.Recipient.Name, utf8.RuneError) {
		return invalid("recipient.name", "", badText)
	}
	for k, v := range ev.Data {
		if strings.ContainsRune(k, utf8.RuneError) || strings.ContainsRune(v, utf8.RuneError) {
			return invalid("data."+clip(k, 64), "", badText)
		}
	}
	ev.Recipient.Name = OneLine(ev.Recipient.Name)
	if n := utf8.RuneCountInString(ev.Recipient.Name); n > MaxNameRunes {
		return invalid("recipient.name", "", fmt.Sprintf("%d characters, longer than %d", n, MaxNameRunes))
	}
	if err := ev.Recipient.normalize(chans); err != nil {
		return err
	}
	return ev.pickChannels(chans)
}

// unknownRecipientField is the error for the recipient field name, which is
// neither "name" nor a field of chans.
func unknownRecipientField(name string, chans []ChannelSpec) error {
	keys := recipientKeys(chans)
	for _, k := range keys {
		if strings.EqualFold(name, k) {
			return invalid("recipient."+clip(name, 64), "", fmt.Sprintf("field names are case-sensitive: want %q", k))
		}
	}
	return invalid("recipient."+clip(name, 64), "", "unknown field: want one of "+strings.Join(keys, ", "))
}

// recipientKeys are the keys a recipient may hold: "name", then each
// channel's Field.
func recipientKeys(chans []ChannelSpec) []string {
	keys := []string{"name"}
	for _, c := range chans {
		keys = append(keys, c.Field)
	}
	return keys
}

// normalize normalises each address of r by its channel of chans. A blank
// address is no address: a producer that writes "phone": " " has no phone
// for the customer, and the email should still go out. A refused address
// is shown masked only when its channel's Shaped says it could be one.
func (r *Recipient) normalize(chans []ChannelSpec) error {
	for _, c := range chans {
		v := strings.TrimSpace(r.Addresses[c.Name])
		if v == "" {
			delete(r.Addresses, c.Name)
			continue
		}
		a, err := c.Normalize(v)
		switch {
		case err != nil && c.Shaped != nil && c.Shaped(v):
			return invalid("recipient."+c.Field, c.Mask(v), err.Error())
		case err != nil:
			// Text that is no address of the kind (a name in the wrong
			// field, a 10 kB value) is shown by its length alone: a mask
			// could partly reveal it.
			return invalid("recipient."+c.Field, "", fmt.Sprintf("%v (a value of %d bytes, not shown)", err, len(v)))
		}
		r.Addresses[c.Name] = a
	}
	if len(r.Addresses) == 0 {
		return invalid("recipient", "", noAddress(chans)+": nothing can be sent")
	}
	return nil
}

// pickChannels defaults ev's channels to every one of chans the recipient
// has an address for, or checks those given and drops repeats.
func (ev *Event) pickChannels(chans []ChannelSpec) error {
	if len(ev.Channels) == 0 {
		for _, c := range chans {
			if ev.Recipient.Address(c.Name) != "" {
				ev.Channels = append(ev.Channels, c.Name)
			}
		}
		return nil
	}
	seen := make(map[ports.Channel]bool, len(ev.Channels))
	out := ev.Channels[:0]
	for _, ch := range ev.Channels {
		switch {
		case !slices.ContainsFunc(chans, func(c ChannelSpec) bool { return c.Name == ch }):
			return invalid("channels", string(ch), "unknown channel")
		case ev.Recipient.Address(ch) == "":
			return invalid("channels", string(ch), "the recipient has no address for this channel")
		case !seen[ch]:
			seen[ch] = true
			out = append(out, ch)
		}
	}
	ev.Channels = out
	return nil
}

// noAddress says that the recipient has none of chans' fields: "neither
// phone nor email", "none of phone, email, device_token".
func noAddress(chans []ChannelSpec) string {
	fields := recipientKeys(chans)[1:]
	switch len(fields) {
	case 1:
		return "no " + fields[0]
	case 2:
		return "neither " + fields[0] + " nor " + fields[1]
	}
	return "none of " + strings.Join(fields, ", ")
}

// badText is the reason for text holding U+FFFD, the mark of bytes that
// were not valid UTF-8 somewhere upstream.
const badText = "not valid UTF-8 text (holds U+FFFD or a lone surrogate escape)"

// CheckEventID returns the *InvalidEventError Decode returns for an
// event_id that is not valid: empty, longer than MaxIDBytes, or holding
// spaces, control or format characters. A tool that takes an event_id
// from a person checks it here, so it accepts what the worker accepts.
func CheckEventID(id string) error { return checkID("event_id", id) }

// checkID checks an identifier: it goes into idempotency keys, log fields,
// headers and messages, so it must be short, on one line, and printable. A
// format character (a bidi override, a zero-width space) is refused too: it
// would make two ids that print alike differ, or one print misleadingly.
func checkID(field, v string) error {
	switch {
	case strings.TrimSpace(v) == "":
		return invalid(field, "", "required")
	case len(v) > MaxIDBytes:
		return invalid(field, v, fmt.Sprintf("longer than %d bytes", MaxIDBytes))
	}
	for _, r := range v {
		if r == utf8.RuneError {
			return invalid(field, "", badText)
		}
		if unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return invalid(field, v, "must not contain spaces, control or format characters")
		}
	}
	return nil
}

// OneLine folds every run of white space and control characters into one
// space, so a name can go into a header or an SMS without starting a new line.
func OneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
}

// clip cuts s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// normalizeEmail returns e as a bare address, without a display name.
func normalizeEmail(e string) (string, error) {
	if len(e) > MaxEmailLen {
		return "", fmt.Errorf("longer than %d bytes", MaxEmailLen)
	}
	if strings.ContainsRune(e, utf8.RuneError) {
		return "", errors.New(badText)
	}
	a, err := mail.ParseAddress(e)
	if err != nil {
		return "", errors.New("not an email address")
	}
	if a.Name != "" || a.Address != strings.TrimSpace(e) {
		return "", errors.New("want a bare address, without a display name")
	}
	for _, r := range a.Address {
		// net/mail takes any non-ASCII rune in an atom; an address that goes
		// into a header must not hold white space, controls or U+FFFD.
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return "", errors.New("not an email address")
		}
	}
	return a.Address, nil
}
