package domain

import (
	"bytes"
	"iter"
	"strings"

	"github.com/harborlight/notification-worker/ports"
)

// decodeFast reads the usual record in one pass, without encoding/json's
// reflection: value is valid UTF-8, nested no deeper than MaxJSONDepth, and
// valid JSON (its caller checked all three). It returns ok false for
// anything that is not plainly well formed: a key repeated or spelled in
// another case, an unknown recipient field, a value of another JSON type
// than its field's, an occurred_at that time.Time refuses, a nested data
// value, a record that is not an object. decode then reads the record the
// long way, which judges it and names what is wrong; when ok, the wire
// event and recipient fields returned are the ones the long way reads, and
// checkKeys has nothing to refuse.
func decodeFast(value []byte, chans []Channel) (w wireEvent, given map[string]string, ok bool) {
	i := skipSpace(value, 0)
	if i >= len(value) || value[i] != '{' {
		return w, nil, false
	}
	var seen [8]bool // by index in eventFields (7 of them)
	var others keySet
	given = map[string]string{}
	for key, v := range members(value[i:]) {
		field := -1
		for n, f := range eventFields {
			if string(key) == f {
				field = n
			} else if strings.EqualFold(string(key), f) {
				return w, nil, false
			}
		}
		if field < 0 {
			if others.add(key) {
				return w, nil, false
			}
			continue
		}
		if seen[field] {
			return w, nil, false
		}
		seen[field] = true
		switch eventFields[field] {
		case "event_id":
			w.EventID, ok = stringValue(v)
		case "type":
			w.Type, ok = stringValue(v)
		case "shipment_id":
			w.ShipmentID, ok = stringValue(v)
		case "occurred_at":
			ok = w.OccurredAt.UnmarshalJSON(v) == nil
		case "recipient":
			ok = recipientFast(v, chans, given)
		case "channels":
			w.Channels, ok = channelsFast(v)
		case "data":
			w.Data, ok = dataFast(v)
		}
		if !ok {
			return w, nil, false
		}
	}
	return w, given, true
}

// members yields the members of the JSON object obj, whose first byte is
// its '{', in the order written: each key as encoding/json reads it, and
// its value's bytes. obj is valid JSON (decode checked the record holding
// it). The key is obj's own bytes unless it holds an escape; neither it
// nor the value may be kept past obj's life or changed.
func members(obj []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(key, value []byte) bool) {
		i := skipSpace(obj, 1)
		for i < len(obj) && obj[i] == '"' {
			end := skipString(obj, i)
			key := keyBytes(obj[i:end])
			i = skipSpace(obj, skipSpace(obj, end)+1) // past the ':'
			vend := skipValue(obj, i)
			v := obj[i:vend]
			i = skipSpace(obj, vend)
			if i < len(obj) && obj[i] == ',' {
				i = skipSpace(obj, i+1)
			}
			if !yield(key, v) {
				return
			}
		}
	}
}

// keyBytes is jsonKey without a copy for a literal without escapes.
func keyBytes(q []byte) []byte {
	if bytes.IndexByte(q, '\\') < 0 {
		return q[1 : len(q)-1]
	}
	return []byte(jsonKey(q))
}

// stringValue returns the JSON string or null v as encoding/json decodes
// it into a string field (null leaves it empty); ok false for another type.
func stringValue(v []byte) (string, bool) {
	switch {
	case string(v) == "null":
		return "", true
	case len(v) < 2 || v[0] != '"':
		return "", false
	}
	return jsonKey(v), true
}

// recipientFast puts the name and address fields of the recipient object
// (or null) v into given, as recipientFields does; ok false for a key that
// is not exactly one of recipientKeys(chans), a key repeated, or a value
// that is not a string or null.
func recipientFast(v []byte, chans []Channel, given map[string]string) bool {
	if string(v) == "null" {
		return true
	}
	if v[0] != '{' {
		return false
	}
	var seen [8]bool // by index: "name", then each channel's field
	if 1+len(chans) > len(seen) {
		return false
	}
	for key, val := range members(v) {
		n, field := -1, ""
		if string(key) == "name" {
			n, field = 0, "name"
		}
		for k, c := range chans {
			if string(key) == c.Field {
				n, field = k+1, c.Field
			}
		}
		if n < 0 || seen[n] {
			return false
		}
		seen[n] = true
		if string(val) == "null" {
			continue
		}
		s, ok := stringValue(val)
		if !ok {
			return false
		}
		given[field] = s
	}
	return true
}

// channelsFast decodes the channels array (or null) v as encoding/json
// does into []ports.Channel; ok false unless every element is a string.
func channelsFast(v []byte) ([]ports.Channel, bool) {
	if string(v) == "null" {
		return nil, true
	}
	if v[0] != '[' {
		return nil, false
	}
	out := []ports.Channel{}
	i := skipSpace(v, 1)
	for i < len(v) && v[i] != ']' {
		end := skipValue(v, i)
		if v[i] != '"' {
			return nil, false
		}
		out = append(out, ports.Channel(jsonKey(v[i:end])))
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return out, true
}

// dataFast decodes the data object (or null) v as Data.UnmarshalJSON
// does; ok false for a key repeated, a nested value, or v not an object.
func dataFast(v []byte) (Data, bool) {
	if string(v) == "null" {
		return nil, true
	}
	if v[0] != '{' {
		return nil, false
	}
	out := Data{}
	var seen keySet
	for key, val := range members(v) {
		if seen.add(key) {
			return nil, false
		}
		switch val[0] {
		case 'n':
		case '"':
			out[string(key)] = jsonKey(val)
		case '{', '[':
			return nil, false
		default:
			out[string(key)] = string(val)
		}
	}
	return out, true
}

// keySet tells a key repeated in one object: it holds the first keys in
// a list, without allocating, and the rest in a map. The keys it holds
// are the caller's bytes, which must not change while it is used.
type keySet struct {
	few  [8][]byte
	n    int
	many map[string]bool
}

// add adds key and reports whether it was there already.
func (s *keySet) add(key []byte) bool {
	for _, k := range s.few[:s.n] {
		if bytes.Equal(k, key) {
			return true
		}
	}
	if s.many[string(key)] {
		return true
	}
	if s.n < len(s.few) {
		s.few[s.n] = key
		s.n++
		return false
	}
	if s.many == nil {
		s.many = map[string]bool{}
	}
	s.many[string(key)] = true
	return false
}
