package redis

import "testing"

// crc16 is the CRC16 Redis Cluster hashes keys with (XMODEM: polynomial
// 0x1021, initial value 0), bit by bit: the slot of a key or of its hash tag
// is crc16 mod 16384.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestSelfCheckTags checks selfCheckTags hash to slots 0, 1024, ..., 15360:
// evenly spread over the 16384, so a cluster node other than the seed owning
// any 1024 consecutive slots owns one of them.
func TestSelfCheckTags(t *testing.T) {
	// The example the Redis Cluster specification gives for its CRC16.
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	const slots = 16384
	step := slots / len(selfCheckTags)
	for i, tag := range selfCheckTags {
		if got, want := int(crc16(tag)%slots), i*step; got != want {
			t.Errorf("tag %d %q: slot %d, want %d", i, tag, got, want)
		}
	}
}
