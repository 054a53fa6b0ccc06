package domain

import "bytes"

// checkJSON reports whether b is one valid JSON value, as json.Valid
// judges it, and, when it is not, whether its objects and arrays nest
// deeper than limit before its first error (deep): one pass where
// json.Valid and tooDeep take two. A b it calls valid nests at most limit
// deep; a b it calls neither valid nor deep may still nest too deep after
// its first error, which tooDeep tells.
func checkJSON(b []byte, limit int) (valid, deep bool) {
	c := jsonCheck{b: b, i: skipSpace(b, 0), limit: limit}
	if !c.value(0) {
		return false, c.deep
	}
	return c.i == len(b), false
}

// jsonCheck is checkJSON's state: b[i] is the next byte to read.
type jsonCheck struct {
	b     []byte
	i     int
	limit int
	deep  bool // stopped at a bracket nesting deeper than limit
}

// value reads the value at i, inside depth objects or arrays, and the
// white space after it.
func (c *jsonCheck) value(depth int) bool {
	b := c.b
	if c.i >= len(b) {
		return false
	}
	switch b[c.i] {
	case '{':
		return c.container(depth, '}', true)
	case '[':
		return c.container(depth, ']', false)
	case '"':
		return c.str()
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	}
	return c.number()
}

// container reads the object (keyed) or array at i, which ends at end.
func (c *jsonCheck) container(depth int, end byte, keyed bool) bool {
	b := c.b
	if depth+1 > c.limit {
		c.deep = true
		return false
	}
	c.i = skipSpace(b, c.i+1)
	if c.i < len(b) && b[c.i] == end {
		c.i = skipSpace(b, c.i+1)
		return true
	}
	for {
		if keyed {
			if c.i >= len(b) || b[c.i] != '"' || !c.str() {
				return false
			}
			if c.i >= len(b) || b[c.i] != ':' {
				return false
			}
			c.i = skipSpace(b, c.i+1)
		}
		if !c.value(depth + 1) {
			return false
		}
		if c.i >= len(b) {
			return false
		}
		switch b[c.i] {
		case ',':
			c.i = skipSpace(b, c.i+1)
		case end:
			c.i = skipSpace(b, c.i+1)
			return true
		default:
			return false
		}
	}
}

// str reads the string at i (its '"') and the white space after it.
func (c *jsonCheck) str() bool {
	b := c.b
	for i := c.i + 1; i < len(b); {
		switch ch := b[i]; {
		case ch == '"':
			c.i = skipSpace(b, i+1)
			return true
		case ch < 0x20:
			return false
		case ch == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return false
				}
				i += 6
			default:
				return false
			}
		default:
			i++
		}
	}
	return false
}

// literal reads lit (true, false or null) at i and the white space after
// it.
func (c *jsonCheck) literal(lit string) bool {
	if !bytes.HasPrefix(c.b[c.i:], []byte(lit)) {
		return false
	}
	c.i = skipSpace(c.b, c.i+len(lit))
	return true
}

// number reads the number at i and the white space after it.
func (c *jsonCheck) number() bool {
	b, i := c.b, c.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !isDigit(b[i]) {
			return false
		}
		i = digits(b, i)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		i = digits(b, i)
	}
	c.i = skipSpace(b, i)
	return true
}

// digits returns the index of the first byte at or after i of b that is
// not a decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
