package domain_test

import (
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// TestFingerprint_Stable pins the fingerprints of fixed events: a sent
// record holds its fingerprint, and a replay compares the event's against
// it, so a fingerprint computed otherwise for the same fields would turn
// every replay of a record the stores already hold into an
// event_id_conflict.
func TestFingerprint_Stable(t *testing.T) {
	for _, c := range []struct {
		name, n    string
		extra      string // one more data value, under "k"+n
		sms, email string
	}{
		{"ShortData", "0", "", "cm1RU_Sn", "V9TWkeVc"},
		{"LongData", "1", strings.Repeat("\x00", 600), "VbvXcQ7f", "BCOVpc0T"},
		{"LongerData", "2", strings.Repeat("\x00", 1200), "wP9njlnj", "5TEVpVeC"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := c.n
			ev := domain.Event{
				EventID: "e" + n, Type: "shipment.out_for_delivery", ShipmentID: "SHP-" + n,
				Recipient: domain.Recipient{Name: "Ada", Addresses: map[ports.Channel]string{
					ports.ChannelSMS: "+31201234567", ports.ChannelEmail: "ada@example.com",
				}},
				Data: domain.Data{"eta": "14:00", "n": "3", "k" + n: c.extra},
			}
			if got := domain.Fingerprint(ev, ports.ChannelSMS); got != c.sms {
				t.Errorf("SMS fingerprint %q, want %q", got, c.sms)
			}
			if got := domain.Fingerprint(ev, ports.ChannelEmail); got != c.email {
				t.Errorf("email fingerprint %q, want %q", got, c.email)
			}
		})
	}
}
