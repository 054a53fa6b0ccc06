package redis

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// Format is how a store lays out its keys and sent records. Whatever it
// writes, a store reads the sent records and claims of both formats under
// the key it writes; with Config.ReadBoth it also reads the key the other
// format would use for the same notification (see Store.Claim).
type Format int

const (
	// Compact keys are Config.CompactPrefix, one tag character, and 72 bits
	// of the SHA-256 of the caller's key in 12 base64url characters. The tag
	// is the caller's key's first character when it is a lowercase letter
	// or a digit, else '_': for the worker's keys ("sms:<event_id>",
	// "email:<event_id>") it names the channel, 's' or 'e'. A sent record
	// is one integer (see encodeCompact) and keeps the send time to the
	// second and the fingerprint's first 30 bits, not the provider id.
	// With the default one-character prefix a key is 14 bytes, the most
	// Redis 7 keeps in its smallest allocation, and the record is held in
	// the key's object itself: about 117 bytes a sent key (docs/capacity.md).
	Compact Format = iota
	// Readable keys are Config.KeyPrefix followed by the caller's key, and a
	// sent record keeps the send time to the millisecond, the whole
	// fingerprint and the provider id: ADR-0006's format, about 269 bytes
	// a sent key.
	Readable
)

// ParseFormat reads "compact" or "readable".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "compact":
		return Compact, nil
	case "readable":
		return Readable, nil
	}
	return 0, fmt.Errorf("redis: unknown key format %q (want compact or readable)", s)
}

func (f Format) String() string {
	if f == Readable {
		return "readable"
	}
	return "compact"
}

// compactHashLen is how many base64url characters of the hash a compact
// key keeps: 72 bits. Two notifications of one channel share a key with a
// chance of n²/2^73 among n keys alive, about one in a million at 10^8.
const compactHashLen = 12

// Key is the Redis key a store built from c writes for the caller's key.
// It is what an operator looks a notification up by (`notification-worker
// key` prints it for an event_id).
func (c Config) Key(key string) string { return c.withDefaults().key(key) }

// OtherKey is the key the other format would use for the caller's key.
func (c Config) OtherKey(key string) string { return c.withDefaults().otherKey(key) }

// key and otherKey are Key and OtherKey of a Config with its defaults set.
func (c Config) key(key string) string {
	if c.Format == Readable {
		return c.KeyPrefix + key
	}
	return compactKey(c.CompactPrefix, key)
}

func (c Config) otherKey(key string) string {
	if c.Format == Readable {
		return compactKey(c.CompactPrefix, key)
	}
	return c.KeyPrefix + key
}

// compactKey is prefix, key's tag and 12 characters of its hash.
func compactKey(prefix, key string) string {
	// Built on the stack, for a key of the usual length, but for the
	// string returned.
	var buf [256]byte
	sum := sha256.Sum256(append(buf[:0], key...))
	var tail [1 + compactHashLen]byte
	tail[0] = compactTag(key)
	base64.RawURLEncoding.Encode(tail[1:], sum[:compactHashLen*6/8])
	return prefix + string(tail[:])
}

// compactTag is the first character of key when it is a lowercase letter
// or a digit, else '_'.
func compactTag(key string) byte {
	if key != "" {
		if c := key[0]; c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			return c
		}
	}
	return '_'
}
