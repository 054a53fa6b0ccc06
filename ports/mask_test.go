package ports_test

import (
	"testing"

	"github.com/harborlight/notification-worker/ports"
)

func TestMaskPhone(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"E164US", "+15551234567", "+1555***4567"},
		{"E164UK", "+447911123456", "+4479***3456"},
		{"E164Long", "+123456789012", "+1234***9012"},
		{"TooShortFor5And4", "+4912345678", "+4***78"},
		{"VeryShort", "+12345", "***"},
		{"Empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ports.MaskPhone(tc.in); got != tc.want {
				t.Errorf("MaskPhone(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestMaskEmail(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"Plain", "ada@example.com", "a***@example.com"},
		{"OneCharLocal", "a@example.com", "a***@example.com"},
		{"DisplayNameDropped", "Ada Lovelace <ada@example.com>", "a***@example.com"},
		{"NonASCIILocal", "élodie@example.fr", "é***@example.fr"},
		{"NoAt", "not-an-address", "n***"},
		{"Empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ports.MaskEmail(tc.in); got != tc.want {
				t.Errorf("MaskEmail(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestMaskAddress(t *testing.T) {
	for _, tc := range []struct {
		name string
		ch   ports.Channel
		in   string
		want string
	}{
		{"SMS", ports.ChannelSMS, "+15551234567", "+1555***4567"},
		{"Email", ports.ChannelEmail, "ada@example.com", "a***@example.com"},
		{"UnknownChannelEmailShape", ports.Channel("push"), "ada@example.com", "a***@example.com"},
		{"UnknownChannelOtherShape", ports.Channel("push"), "device-token-123456", "devic***3456"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ports.MaskAddress(tc.ch, tc.in); got != tc.want {
				t.Errorf("MaskAddress(%q, %q) = %q, want %q", tc.ch, tc.in, got, tc.want)
			}
		})
	}
}
