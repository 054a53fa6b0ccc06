package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nyaruka/phonenumbers"

	"github.com/harborlight/notification-worker/ports"
)

// Limits on the identifiers of an event. They keep an idempotency key well
// inside Redis's and Kafka's limits, and make a 10 kB event_id a clear error
// instead of a 10 kB key.
const (
	MaxIDBytes   = 128
	MaxNameRunes = 100
	MaxEmailLen  = 254 // RFC 5321 path limit
)

// MaxJSONDepth bounds how deeply objects and arrays nest in a record. The
// event itself nests 3 deep (record, recipient or data, value); the rest is
// room for fields producers add. The record's size is bounded before it gets
// here, by the event source (the consumer's MAX_RECORD_BYTES, an operator's
// setting), so Decode does not impose a second, hidden size limit.
const MaxJSONDepth = 32

// Event is a shipment event, decoded and validated (README: "The event").
type Event struct {
	EventID    string          `json:"event_id"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurred_at"`
	ShipmentID string          `json:"shipment_id"`
	Recipient  Recipient       `json:"recipient"`
	Channels   []ports.Channel `json:"channels"`
	Data       Data            `json:"data"`
}

// wireEvent is an Event as a record carries it: the recipient is read by
// the channels' fields once the rest decoded.
type wireEvent struct {
	EventID    string          `json:"event_id"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurred_at"`
	ShipmentID string          `json:"shipment_id"`
	Recipient  json.RawMessage `json:"recipient"`
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
	// fields names the recipient field each address was read from.
	fields map[ports.Channel]string
}

// Address returns the recipient's address on ch, or "" when there is none.
func (r Recipient) Address(ch ports.Channel) string { return r.Addresses[ch] }

// MarshalJSON encodes r as an event's recipient object: "name" and each
// address under its channel's recipient field (under the channel's name
// for a Recipient that Decode did not make).
func (r Recipient) MarshalJSON() ([]byte, error) {
	obj := make(map[string]string, len(r.Addresses)+1)
	obj["name"] = r.Name
	for ch, a := range r.Addresses {
		f := r.fields[ch]
		if f == "" {
			f = string(ch)
		}
		obj[f] = a
	}
	return json.Marshal(obj)
}

// Data holds the template values of an event. JSON strings, numbers and
// booleans are accepted and kept as their text; nested objects and arrays are
// not, because no template can print them sensibly.
type Data map[string]string

// UnmarshalJSON implements json.Unmarshaler.
func (d *Data) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*d = nil
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("data: want an object of scalars: %w", err)
	}
	out := make(Data, len(raw))
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		switch {
		case len(v) == 0 || string(v) == "null":
			continue
		case v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("data.%s: %w", k, err)
			}
			out[k] = s
		case v[0] == '{' || v[0] == '[':
			return fmt.Errorf("data.%s: want a string, number or boolean, got a nested value", k)
		default: // number, true, false: already valid JSON text
			out[k] = string(v)
		}
	}
	*d = out
	return nil
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

func invalid(field, value, reason string) error {
	return &InvalidEventError{Field: field, Value: clip(value, 64), Reason: reason}
}

// Decode is Templates.Decode for the Builtin channels: it parses and
// validates a record value whose recipient may give a phone and an email.
func Decode(value []byte) (Event, error) { return decode(value, Builtin) }

// decode parses and validates a record value for chans. The returned event
// is normalised: each address by its channel, the name on one line, the
// channels defaulted (in the order of chans) and de-duplicated. Any error
// is an *InvalidEventError.
//
// Besides the rules of the README's event section, Decode refuses what two JSON
// readers could understand differently, so that no downstream system (an
// audit consumer, a replay tool) can disagree with this worker on who the
// customer is: a key repeated in the record, its recipient or its data, and
// a key that differs from a field's name only in case (encoding/json would
// read "Event_ID" as event_id; a case-sensitive reader would not). It also
// refuses records nested deeper than MaxJSONDepth, and text that is not
// valid UTF-8, including a lone surrogate escaped as "\ud800".
func decode(value []byte, chans []Channel) (Event, error) {
	if !utf8.Valid(value) {
		// encoding/json would silently replace bad bytes with U+FFFD, and a
		// customer would get a message with garbage in it.
		return Event{}, invalid("", "", "not valid UTF-8")
	}
	valid, deep := checkJSON(value, MaxJSONDepth)
	if deep || !valid && tooDeep(value, MaxJSONDepth) {
		return Event{}, invalid("", "", fmt.Sprintf("JSON nested deeper than %d levels", MaxJSONDepth))
	}
	if valid {
		if w, given, ok := decodeFast(value, chans); ok {
			ev := Event{EventID: w.EventID, Type: w.Type, OccurredAt: w.OccurredAt, ShipmentID: w.ShipmentID, Channels: w.Channels, Data: w.Data}
			ev.Recipient.Name = given["name"]
			return ev, ev.normalize(chans, given)
		}
	}
	return decodeFull(value, chans)
}

// decodeFull is decode after its UTF-8 and depth checks, by encoding/json:
// what decodeFast leaves to it, and the reference decodeFast agrees with.
func decodeFull(value []byte, chans []Channel) (Event, error) {
	var w wireEvent
	if err := json.Unmarshal(value, &w); err != nil {
		return Event{}, jsonError("", err)
	}
	given, err := recipientFields(w.Recipient, chans)
	if err != nil {
		return Event{}, err
	}
	if err := checkKeys(value, chans); err != nil {
		return Event{}, err
	}
	ev := Event{EventID: w.EventID, Type: w.Type, OccurredAt: w.OccurredAt, ShipmentID: w.ShipmentID, Channels: w.Channels, Data: w.Data}
	ev.Recipient.Name = given["name"]
	return ev, ev.normalize(chans, given)
}

// jsonError is the *InvalidEventError for err, encoding/json's error
// decoding the value at path ("" for the record).
func jsonError(path string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return invalid(join(path, te.Field), "", "want a JSON "+te.Type.String()+", got "+te.Value)
	}
	// The error may quote the input (a bad occurred_at, say): clip it
	// so a dead letter's reason stays readable, and print no control
	// character of it (time's errors quote a DEL or a C1 control raw).
	return invalid(path, "", "not a JSON event: "+clip(noControls(err.Error()), 200))
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

// recipientFields returns the recipient's name and the address fields of
// chans that raw, the recipient object, gives, as given (a null is "").
// Other keys are left to checkKeys.
func recipientFields(raw json.RawMessage, chans []Channel) (map[string]string, error) {
	given := map[string]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return given, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, invalid("recipient", "", "want a JSON object, got "+te.Value)
		}
		return nil, jsonError("recipient", err)
	}
	for _, f := range recipientKeys(chans) {
		v, ok := obj[f]
		if !ok {
			continue
		}
		var s *string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, jsonError("recipient."+f, err)
		}
		if s != nil {
			given[f] = *s
		}
	}
	return given, nil
}

// recipientKeys are the keys a recipient may hold: "name", then each
// channel's Field.
func recipientKeys(chans []Channel) []string {
	keys := []string{"name"}
	for _, c := range chans {
		keys = append(keys, c.Field)
	}
	return keys
}

// tooDeep reports whether objects and arrays in b nest deeper than limit. It
// runs before encoding/json, whose own limit (10000 levels) is far beyond any
// event, and only counts brackets outside strings: a malformed b is left for
// the parser to name.
func tooDeep(b []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// The JSON names of Event's fields, for checkKeys.
var eventFields = []string{"event_id", "type", "occurred_at", "shipment_id", "recipient", "channels", "data"}

// checkKeys refuses a record whose top-level, recipient or data object
// repeats a key, or spells a field's name in another case, and a recipient
// with a field not among recipientKeys(chans). value is valid JSON
// (json.Unmarshal accepted it).
//
// The top level stays open: producers may add fields of their own (a trace
// context, say), which the worker ignores. The recipient is closed: each of
// its fields is an address or a name, and an address the worker does not
// know ("mobile" for "phone") would otherwise be dropped without a word,
// and its channel never notified.
func checkKeys(value []byte, chans []Channel) error {
	return checkObject("", value, eventFields, false, recipientKeys(chans))
}

// checkObject checks the members of the object raw (anything else is left
// alone: the typed decode already judged it). fields are the names
// encoding/json matches case-insensitively; nil for a map, whose keys it
// matches exactly. closed refuses a key not among fields.
// recipient are the recipient's fields, checked when path is the record.
//
// raw is valid JSON (json.Unmarshal accepted the record holding it), so it
// is walked in one pass without a tokenizer: keys are read as encoding/json
// reads them, members in the order written, and the first offending key is
// the one named.
func checkObject(path string, raw []byte, fields []string, closed bool, recipient []string) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil
	}
	var seen map[string]bool
	for k, v := range members(raw[i:]) {
		key := string(k)
		field := join(path, key)
		if seen[key] {
			return invalid(field, "", "the key appears more than once: readers of the record could disagree on its value")
		}
		if seen == nil {
			seen = make(map[string]bool, 8)
		}
		seen[key] = true
		for _, f := range fields {
			if key != f && strings.EqualFold(key, f) {
				return invalid(field, "", fmt.Sprintf("field names are case-sensitive: want %q", f))
			}
		}
		if closed && !slices.Contains(fields, key) {
			return invalid(field, "", "unknown field: want one of "+strings.Join(fields, ", "))
		}
		var err error
		switch {
		case path == "" && key == "recipient":
			err = checkObject(field, v, recipient, true, nil)
		case path == "" && key == "data":
			err = checkObject(field, v, nil, false, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// jsonKey returns the string the JSON string literal q (quotes included)
// holds, as encoding/json decodes it.
func jsonKey(q []byte) string {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1])
	}
	var s string
	_ = json.Unmarshal(q, &s) // q is a valid literal: see checkObject
	return s
}

// skipSpace returns the index of the first byte of b at or after i that is
// not JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string literal starting at
// b[i] (a '"').
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

func join(path, key string) string {
	key = clip(key, 64)
	if path == "" {
		return key
	}
	return path + "." + key
}

func (ev *Event) normalize(chans []Channel, given map[string]string) error {
	for _, f := range []struct{ name, value string }{
		{"event_id", ev.EventID}, {"type", ev.Type}, {"shipment_id", ev.ShipmentID},
	} {
		if err := checkID(f.name, f.value); err != nil {
			return err
		}
	}

	// encoding/json turns a lone surrogate escape ("\ud800") into U+FFFD
	// without a word: the same garbage utf8.Valid keeps out as raw bytes.
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
	// A blank address is no address: a producer that writes "phone": " "
	// has no phone for the customer, and the email should still go out.
	ev.Recipient.Addresses = map[ports.Channel]string{}
	ev.Recipient.fields = map[ports.Channel]string{}
	for _, c := range chans {
		v := strings.TrimSpace(given[c.Field])
		if v == "" {
			continue
		}
		a, err := c.Normalize(v)
		if err != nil {
			return invalidAddress("recipient."+c.Field, v, c.Shaped, c.Mask, err)
		}
		ev.Recipient.Addresses[c.Name] = a
		ev.Recipient.fields[c.Name] = c.Field
	}
	if len(ev.Recipient.Addresses) == 0 {
		return invalid("recipient", "", noAddress(chans)+": nothing can be sent")
	}

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
		case !slices.ContainsFunc(chans, func(c Channel) bool { return c.Name == ch }):
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
func noAddress(chans []Channel) string {
	fields := recipientKeys(chans)[1:]
	switch len(fields) {
	case 1:
		return "no " + fields[0]
	case 2:
		return "neither " + fields[0] + " nor " + fields[1]
	}
	return "none of " + strings.Join(fields, ", ")
}

// invalidAddress reports the recipient's address v in field as invalid
// for err. It shows v masked by mask only when shapely(v), when v could be
// an address of that kind; anything else, text that a mask keeping a few
// characters or the domain would partly reveal (a name in the wrong field,
// a 10 kB value), is shown by its length alone.
func invalidAddress(field, v string, shapely func(string) bool, mask func(string) string, err error) error {
	if shapely == nil || !shapely(v) {
		return invalid(field, "", fmt.Sprintf("%v (a value of %d bytes, not shown)", err, len(v)))
	}
	return invalid(field, mask(v), err.Error())
}

// phoneShaped reports whether v holds only what a written phone number
// does: digits, "+" and the separators NormalizePhone drops, 32 bytes at
// most.
func phoneShaped(v string) bool {
	return len(v) <= 32 && strings.Trim(v, "+0123456789 .-()") == ""
}

// emailShaped reports whether v could be an email address: at most
// MaxEmailLen bytes, one "@", and no space, control or format character.
func emailShaped(v string) bool {
	if len(v) > MaxEmailLen || strings.Count(v, "@") != 1 {
		return false
	}
	for _, r := range v {
		if unicode.IsSpace(r) || !unicode.IsGraphic(r) {
			return false
		}
	}
	return true
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

// NormalizePhone returns p in E.164 ("+", a country code and the national
// number, 15 digits at most), after dropping surrounding white space and the
// separators people write: spaces, dots, dashes and parentheses. The number
// must start with "+": a leading "00" or a national number is ambiguous
// without a known dialing country, so it is an error.
//
// The number is checked against libphonenumber's numbering plans
// (github.com/nyaruka/phonenumbers): a country code that does not exist, a
// length no number of that country has, or a number in no range the country
// assigns is an error, before any provider is asked to send to it. A trunk
// prefix written after the country code ("+44 (0)20 ...") is dropped, as
// dialing from abroad does. Its output is a fixed point:
// NormalizePhone(out) returns out. Its errors never quote a digit of p.
func NormalizePhone(p string) (string, error) {
	p = strings.TrimSpace(p)
	var b strings.Builder
	for i, r := range p {
		switch {
		case r == '+' && i == 0:
			b.WriteByte('+')
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == ' ' || r == '.' || r == '-' || r == '(' || r == ')':
		default:
			return "", errors.New("not an E.164 phone number: unexpected character")
		}
	}
	s := b.String()
	switch {
	case !strings.HasPrefix(s, "+"):
		return "", errors.New("not an E.164 phone number: must start with +")
	case len(s) < 4:
		return "", errors.New("impossible phone number: too short")
	case len(s) > maxPhoneDigits+1:
		// A trunk prefix may add a digit or two to the 15 of E.164; more
		// than that is no number.
		return "", errors.New("impossible phone number: too long")
	case s[1] == '0':
		return "", errors.New("not an E.164 phone number: country code cannot start with a zero")
	}
	return phones.get(s)
}

// checkPhone is NormalizePhone's check of s, a "+" and 3 to maxPhoneDigits
// digits, against the numbering plans.
func checkPhone(s string) (string, error) {
	num, err := phonenumbers.Parse(s, unknownRegion)
	if err != nil {
		// phonenumbers' errors name no digits, but say it in our words:
		// its texts are not a contract.
		if errors.Is(err, phonenumbers.ErrInvalidCountryCode) {
			return "", errors.New("impossible phone number: no country has this country code")
		}
		return "", errors.New("impossible phone number: too short or too long")
	}
	switch phonenumbers.IsPossibleNumberWithReason(num) {
	case phonenumbers.IS_POSSIBLE, phonenumbers.IS_POSSIBLE_LOCAL_ONLY:
	case phonenumbers.INVALID_COUNTRY_CODE:
		return "", errors.New("impossible phone number: no country has this country code")
	case phonenumbers.TOO_SHORT:
		return "", errors.New("impossible phone number: too short for its country")
	case phonenumbers.TOO_LONG:
		return "", errors.New("impossible phone number: too long for its country")
	default:
		return "", errors.New("impossible phone number: no number of its country has this length")
	}
	if !phonenumbers.IsValidNumber(num) {
		return "", errors.New("invalid phone number: in no range its country assigns")
	}
	out := phonenumbers.Format(num, phonenumbers.E164)
	if len(out) > 16 {
		// Some plans allow longer numbers than E.164 (and Twilio) carry.
		return "", errors.New("impossible phone number: more digits than E.164 allows")
	}
	if !onlyTrunkDropped(s[1:], out[1:]) {
		// A few plans rewrite a national number (Norfolk Island adds a
		// digit): we send to the number the producer wrote, or to none.
		return "", errors.New("not an E.164 phone number: written in a national form its country rewrites")
	}
	return out, nil
}

// phones remembers checkPhone's answers: parsing a number against the
// numbering plans is most of the CPU a record costs, and the same customers
// get a notification per shipment event. checkPhone is a pure function of
// its argument, so an answer remembered is the answer computed.
var phones = &phoneCache{max: phoneCacheSize}

// phoneCacheSize bounds the numbers phones holds: at about 100 bytes an
// entry, 8192 of them are under a MiB.
const phoneCacheSize = 8192

// phoneCache is a bounded memo of checkPhone, safe for concurrent use. When
// full it starts over empty: no eviction order to keep, and a worker's
// working set of numbers refills it at once.
type phoneCache struct {
	mu  sync.Mutex
	max int
	m   map[string]phoneAnswer
}

type phoneAnswer struct {
	out string
	err error
}

// get returns checkPhone(s), from memory when s was asked before.
func (c *phoneCache) get(s string) (string, error) {
	c.mu.Lock()
	a, ok := c.m[s]
	c.mu.Unlock()
	if ok {
		return a.out, a.err
	}
	out, err := checkPhone(s)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[string]phoneAnswer, c.max)
	}
	c.m[s] = phoneAnswer{out, err}
	c.mu.Unlock()
	return out, err
}

// onlyTrunkDropped reports whether the digits out are the digits in, or in
// with a run of at most two digits (a trunk prefix) removed right after a
// country code of one to three digits.
func onlyTrunkDropped(in, out string) bool {
	n := len(in) - len(out)
	switch {
	case n == 0:
		return in == out
	case n < 0 || n > 2:
		return false
	}
	for cc := 1; cc <= 3 && cc <= len(out); cc++ {
		if in[:cc] == out[:cc] && in[cc+n:] == out[cc:] {
			return true
		}
	}
	return false
}

// maxPhoneDigits is the most digits NormalizePhone reads: 15 (E.164) and
// room for a trunk prefix written after the country code.
const maxPhoneDigits = 17

// unknownRegion tells phonenumbers.Parse that no default country applies:
// the number must carry its own country code.
const unknownRegion = "ZZ"

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

// OneLine folds every run of white space and control characters into one
// space, so a name can go into a header or an SMS without starting a new line.
func OneLine(s string) string {
	if isOneLine(s) {
		return s
	}
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
}

// isOneLine reports whether OneLine(s) is s itself, without allocating:
// s is printable ASCII whose spaces stand one at a time between words.
func isOneLine(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ':
			if i == 0 || i == len(s)-1 || s[i-1] == ' ' {
				return false
			}
		case c < '!' || c > '~':
			return false
		}
	}
	return true
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
