package ports_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nyaruka/phonenumbers"

	"github.com/harborlight/notification-worker/ports"
)

func TestMaskPhone(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"E164US", "+15551234567", "+1********67"},
		{"E164UK", "+447911123456", "+44********56"},
		{"E164NL", "+31201234567", "+31*******67"},
		{"ThreeDigitCountryCode", "+353861234567", "+353*******67"},
		{"E164Long", "+123456789012", "+1*********12"},
		{"ShortKeepsTheCountryCodeOnly", "+4912345", "+49*****"},
		{"VeryShort", "+12345", "+1****"},
		{"CountryCodeAlone", "+1", "***"},
		{"NoKnownCountryCode", "+999123456789", "***********89"},
		{"NotE164", "0612345678", "********78"},
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

// TestMaskPhone_KeepsAtMostTwoDigits checks every number of every supported
// country's example: past the country code, at most 2 digits show.
func TestMaskPhone_KeepsAtMostTwoDigits(t *testing.T) {
	for region := range phonenumbers.GetSupportedRegions() {
		num := phonenumbers.GetExampleNumberForType(region, phonenumbers.MOBILE)
		if num == nil {
			continue
		}
		e164 := phonenumbers.Format(num, phonenumbers.E164)
		cc := "+" + strconv.Itoa(int(num.GetCountryCode()))
		got := ports.MaskPhone(e164)
		if !strings.HasPrefix(got, cc) || len(got) != len(e164) {
			t.Errorf("MaskPhone(%s) = %s, want it to start with %s and keep the length", region, got, cc)
			continue
		}
		if shown := len(strings.Trim(got[len(cc):], "*")); shown > 2 {
			t.Errorf("MaskPhone(%s) = %s: %d digits shown past the country code, want at most 2", region, got, shown)
		}
	}
}
