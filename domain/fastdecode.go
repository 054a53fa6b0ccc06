package domain

import (
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
	var others map[string]bool
	given = map[string]string{}
	i = skipSpace(value, i+1)
	for i < len(value) && value[i] == '"' {
		end := skipString(value, i)
		key := jsonKey(value[i:end])
		i = skipSpace(value, skipSpace(value, end)+1)
		vend := skipValue(value, i)
		v := value[i:vend]
		i = skipSpace(value, vend)
		if i < len(value) && value[i] == ',' {
			i = skipSpace(value, i+1)
		}
		field := -1
		for n, f := range eventFields {
			if key == f {
				field = n
			} else if strings.EqualFold(key, f) {
				return w, nil, false
			}
		}
		if field < 0 {
			if others[key] {
				return w, nil, false
			}
			if others == nil {
				others = map[string]bool{}
			}
			others[key] = true
			continue
		}
		if seen[field] {
			return w, nil, false
		}
		seen[field] = true
		switch key {
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
	keys := recipientKeys(chans)
	var seen [8]bool
	if len(keys) > len(seen) {
		return false
	}
	i := skipSpace(v, 1)
	for i < len(v) && v[i] == '"' {
		end := skipString(v, i)
		key := jsonKey(v[i:end])
		i = skipSpace(v, skipSpace(v, end)+1)
		vend := skipValue(v, i)
		val := v[i:vend]
		i = skipSpace(v, vend)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
		n := -1
		for k, f := range keys {
			if key == f {
				n = k
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
		given[key] = s
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
	var seen map[string]bool
	i := skipSpace(v, 1)
	for i < len(v) && v[i] == '"' {
		end := skipString(v, i)
		key := jsonKey(v[i:end])
		i = skipSpace(v, skipSpace(v, end)+1)
		vend := skipValue(v, i)
		val := v[i:vend]
		i = skipSpace(v, vend)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
		if seen[key] {
			return nil, false
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[key] = true
		switch val[0] {
		case 'n':
		case '"':
			out[key] = jsonKey(val)
		case '{', '[':
			return nil, false
		default:
			out[key] = string(val)
		}
	}
	return out, true
}
