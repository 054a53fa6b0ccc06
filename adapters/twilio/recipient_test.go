package twilio_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/ports"
)

// smsWorld is the domain's Service sending SMS through this Notifier to
// the Twilio double, on the in-memory store.
type smsWorld struct {
	double *double.Double
	store  *memory.Store
	svc    *domain.Service
	logs   *logtest.Buffer

	mu       sync.Mutex
	outcomes map[ports.Outcome]int
}

func newSMSWorld(t *testing.T) *smsWorld {
	t.Helper()
	w := &smsWorld{double: double.New(testSID, testToken), store: memory.New(nil), logs: &logtest.Buffer{}, outcomes: map[ports.Outcome]int{}}
	srv := httptest.NewServer(w.double)
	t.Cleanup(srv.Close)
	n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: srv.URL, Timeout: 5 * time.Second})
	svc, err := domain.NewService(domain.Config{
		Store:     w.store,
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: n},
		Logger:    slog.New(slog.NewJSONHandler(w.logs, nil)),
		Observer: ports.ObserverFunc(func(_ ports.Channel, o ports.Outcome) {
			w.mu.Lock()
			w.outcomes[o]++
			w.mu.Unlock()
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	w.svc = svc
	return w
}

func (w *smsWorld) handle(t *testing.T, id, phone string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	value := fmt.Sprintf(`{"event_id":%q,"type":"shipment.out_for_delivery","shipment_id":"SHP-1",`+
		`"recipient":{"name":"Ada","phone":%q},"channels":["sms"],"data":{"eta":"14:00-16:00"}}`, id, phone)
	return w.svc.Handle(ctx, ports.Record{Topic: "shipment-events", Value: []byte(value), DeliveryID: ports.NewDeliveryID()})
}

func (w *smsWorld) outcome(o ports.Outcome) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outcomes[o]
}

// TestOptedOutRecipient: Twilio's 21610 (the customer replied STOP) is an
// outcome, not a failure: the record is acknowledged (Handle returns nil,
// so the event source neither retries nor dead-letters it), the store holds
// it like a sent notification, and a replay is a duplicate that never asks
// Twilio again.
func TestOptedOutRecipient(t *testing.T) {
	const phone = "+31201234567"
	w := newSMSWorld(t)
	w.double.Fail(double.Fault{To: phone, Status: 400, Code: 21610})

	if err := w.handle(t, "evt-stop", phone); err != nil {
		t.Fatalf("Handle: %v, want nil: an opted-out recipient is not a failure to dead-letter", err)
	}
	if n := w.outcome(ports.OutcomeOptedOut); n != 1 {
		t.Fatalf("outcomes %v, want one %s", w.outcomes, ports.OutcomeOptedOut)
	}
	lines := w.logs.Events(t, "recipient_opted_out")
	if len(lines) != 1 || lines[0]["to"] != ports.MaskPhone(phone) || lines[0]["provider_id"] != "opted-out:21610" {
		t.Fatalf("recipient_opted_out lines %v, want one, masked, naming opted-out:21610", lines)
	}
	if strings.Contains(fmt.Sprint(lines), "201234567") {
		t.Fatalf("recipient_opted_out line %v holds the number in clear", lines)
	}
	c, err := w.store.Claim(context.Background(), domain.NotificationKey("evt-stop", ports.ChannelSMS), "probe", "", "", time.Second)
	if err != nil || c.State != ports.AlreadySent || c.Receipt.ProviderID != "opted-out:21610" {
		t.Fatalf("store holds %+v (%v), want a sent record naming opted-out:21610", c, err)
	}

	if err := w.handle(t, "evt-stop", phone); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if n := w.outcome(ports.OutcomeDuplicate); n != 1 {
		t.Fatalf("outcomes %v, want the replay a duplicate", w.outcomes)
	}
	if a := w.double.Attempts(); len(a) != 1 || a[0].Code != 21610 {
		t.Fatalf("the double saw %+v, want exactly one attempt, answered 21610: the replay must not ask again", a)
	}
	if m := w.double.Messages(); len(m) != 0 {
		t.Fatalf("the double accepted %+v, want nothing", m)
	}
}

// TestImpossibleNumberNeverReachesTwilio: a number that cannot exist is
// poison at decoding, before any claim or provider call, and its reason
// shows the number masked at most.
func TestImpossibleNumberNeverReachesTwilio(t *testing.T) {
	for _, tc := range []struct{ name, phone, reason string }{
		{"NoSuchAreaCode", "+15551234567", "invalid phone number"},
		{"NoSuchCountryCode", "+999123456789", "no country has this country code"},
		{"TooShortForItsCountry", "+1202555012", "too short for its country"},
		{"TooLongForItsCountry", "+442079460958123", "too long for its country"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newSMSWorld(t)
			err := w.handle(t, "evt-"+tc.name, tc.phone)
			if ports.KindOf(err) != ports.Permanent || !strings.Contains(err.Error(), "recipient.phone") || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Handle: %v, want a permanent recipient.phone error saying %q", err, tc.reason)
			}
			if digits := strings.TrimPrefix(tc.phone, "+")[3:]; strings.Contains(err.Error(), digits) {
				t.Fatalf("error %q holds the number beyond its masked form", err)
			}
			if a := w.double.Attempts(); len(a) != 0 {
				t.Fatalf("the double saw %+v, want no request", a)
			}
		})
	}
}
