package twilio_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/ports"
)

// replyWith answers status and body with the given headers.
func replyWith(status int, body string, header map[string]string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func TestSendRateLimited(t *testing.T) {
	msg := ports.Message{IdempotencyKey: "k", EventID: "evt-1", Channel: ports.ChannelSMS, To: testTo, Text: "Parcel SHP-1: out for delivery"}
	tooMany := twilioError(429, 20429, "Too Many Requests")
	queueFull := twilioError(400, 21611, "This 'From' number has exceeded the maximum number of queued messages")
	// Twilio's clock, as its Date header says; the Retry-After date is
	// counted from it, not from this host's clock.
	twilioNow := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name   string
		status int
		body   string
		header map[string]string
		code   int
		after  time.Duration
	}{
		{"TooManyRequestsRetryAfterSeconds", 429, tooMany, map[string]string{"Retry-After": "7"}, 20429, 7 * time.Second},
		{"TooManyRequestsRetryAfterDate", 429, tooMany, map[string]string{
			"Date":        twilioNow.Format(http.TimeFormat),
			"Retry-After": twilioNow.Add(12 * time.Second).Format(http.TimeFormat),
		}, 20429, 12 * time.Second},
		{"TooManyRequestsRetryAfterDatePassed", 429, tooMany, map[string]string{
			"Date":        twilioNow.Format(http.TimeFormat),
			"Retry-After": twilioNow.Add(-time.Minute).Format(http.TimeFormat),
		}, 20429, 0},
		{"TooManyRequestsNoRetryAfter", 429, tooMany, nil, 20429, twilio.DefaultRetryAfter},
		{"TooManyRequestsUnreadableRetryAfter", 429, tooMany, map[string]string{"Retry-After": "soon"}, 20429, twilio.DefaultRetryAfter},
		{"TooManyRequestsNegativeRetryAfter", 429, tooMany, map[string]string{"Retry-After": "-3"}, 20429, twilio.DefaultRetryAfter},
		{"TooManyRequestsHugeRetryAfterCapped", 429, tooMany, map[string]string{"Retry-After": "99999999999999999"}, 20429, twilio.MaxRetryAfter},
		{"TooManyRequestsFromAProxy", 429, `rate limited`, map[string]string{"Retry-After": "3"}, 0, 3 * time.Second},
		{"QueueFull21611", 400, queueFull, nil, 21611, twilio.DefaultQueueFullRetryAfter},
		{"QueueFull21611RetryAfter", 400, queueFull, map[string]string{"Retry-After": "5"}, 21611, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := NewFakeTwilio(t, replyWith(tc.status, tc.body, tc.header))
			n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
			r, err := n.Send(context.Background(), msg)
			if err == nil {
				t.Fatal("Send = nil error")
			}
			if !errors.Is(err, ports.ErrRateLimited) {
				t.Errorf("err = %v, want it to wrap ports.ErrRateLimited: backpressure, not a failure", err)
			}
			if got, ok := ports.RetryAfter(err); !ok || got != tc.after {
				t.Errorf("RetryAfter = %v, %v, want %v, true", got, ok, tc.after)
			}
			// Not sent, and not for good: retried, never reconciled.
			if k := ports.KindOf(err); k != ports.Retryable {
				t.Errorf("KindOf = %v, want retryable", k)
			}
			if errors.Is(err, ports.ErrOutcomeUnknown) {
				t.Errorf("err = %v is an unknown outcome; Twilio did not process the request", err)
			}
			var te *twilio.Error
			if !errors.As(err, &te) || te.Status != tc.status || te.Code != tc.code {
				t.Errorf("err = %#v, want *twilio.Error with status %d, code %d", err, tc.status, tc.code)
			}
			if r != (ports.Receipt{}) {
				t.Errorf("receipt = %+v, want none", r)
			}
			AssertSafeErrorText(t, err, fake.URL)
		})
	}

	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"InvalidNumberIsARefusal", 400, twilioError(400, 21211, "The 'To' number is not a valid phone number.")},
		{"OptedOutIsARefusal", 400, twilioError(400, 21610, "Attempt to send to unsubscribed recipient")},
		{"ServiceUnavailableIsUnknown", 503, twilioError(503, 20503, "Service Unavailable")},
		{"RequestTimeoutIsRetryable", 408, `request timeout`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := NewFakeTwilio(t, replyWith(tc.status, tc.body, map[string]string{"Retry-After": "9"}))
			n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
			_, err := n.Send(context.Background(), msg)
			if err == nil {
				t.Fatal("Send = nil error")
			}
			if errors.Is(err, ports.ErrRateLimited) {
				t.Errorf("err = %v wraps ports.ErrRateLimited; only 429, 20429 and 21611 do", err)
			}
			if _, ok := ports.RetryAfter(err); ok {
				t.Errorf("err = %v carries a Retry-After", err)
			}
		})
	}
}

// TestSendRetryAfterDateWithoutDate: without a Date header, a
// Retry-After date is counted from this host's clock.
func TestSendRetryAfterDateWithoutDate(t *testing.T) {
	msg := ports.Message{IdempotencyKey: "k", EventID: "evt-1", Channel: ports.ChannelSMS, To: testTo, Text: "Parcel SHP-1: out for delivery"}
	at := time.Now().Add(time.Minute).Truncate(time.Second)
	fake := NewFakeTwilio(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Date"] = nil // net/http adds none then
		w.Header().Set("Retry-After", at.UTC().Format(http.TimeFormat))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(twilioError(429, 20429, "Too Many Requests")))
	})
	n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
	_, err := n.Send(context.Background(), msg)
	want := time.Until(at)
	if got, ok := ports.RetryAfter(err); !ok || got < want || got > want+10*time.Second {
		t.Errorf("RetryAfter = %v, %v, want about %v, counted from this host's clock", got, ok, want)
	}
}

// TestSendRateLimitedByTheDouble sends past the double's pace: the
// second send is refused with the wait the double's Retry-After names,
// and nothing past the first reached a customer.
func TestSendRateLimitedByTheDouble(t *testing.T) {
	d, apiURL := StartDouble(t)
	d.LimitRate(double.RateLimit{PerSecond: 0.002, Burst: 1}) // 500s apart
	n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL})
	msg := ports.Message{IdempotencyKey: "k", EventID: "evt-1", Channel: ports.ChannelSMS, To: testTo, Text: "Parcel SHP-1: out for delivery"}

	start := time.Now()
	if _, err := n.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	_, err := n.Send(context.Background(), msg)
	slack := time.Since(start).Truncate(time.Second) + time.Second // whole seconds, rounded up
	if !errors.Is(err, ports.ErrRateLimited) {
		t.Fatalf("second send = %v, want it rate limited", err)
	}
	if after, _ := ports.RetryAfter(err); after > 500*time.Second || after < 500*time.Second-slack {
		t.Errorf("RetryAfter = %v, want the double's 500s (less at most %v)", after, slack)
	}
	if got := len(d.Messages()); got != 1 || d.RateLimited() != 1 {
		t.Errorf("double accepted %d messages and refused %d, want 1 and 1", got, d.RateLimited())
	}
}
