package integration

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// The credentials the double accepts. Alphanumeric, because twilio-go
// itself rejects anything else (21222 Invalid Username).
const (
	twilioAccountSID = "ACintegration"
	twilioAuthToken  = "integrationtoken"
	twilioFrom       = "+15550000000"
)

// Twilio is the Twilio double (package double), served in the test
// process on a loopback port and driven over HTTP, as the worker drives it.
type Twilio struct {
	// URL is the base URL to give the worker as TWILIO_API_URL.
	URL        string
	AccountSID string
	AuthToken  string
	From       string
}

// StartTwilioDouble serves the double until the test ends.
func StartTwilioDouble(t testing.TB) *Twilio {
	t.Helper()
	tw := &Twilio{AccountSID: twilioAccountSID, AuthToken: twilioAuthToken, From: twilioFrom}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := double.New(tw.AccountSID, tw.AuthToken)
	srv := &http.Server{Handler: d}
	go func() { _ = srv.Serve(d.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	tw.URL = "http://" + ln.Addr().String()
	return tw
}

// Env is the worker's environment for this double.
func (tw *Twilio) Env() map[string]string {
	return map[string]string{
		"TWILIO_API_URL":     tw.URL,
		"TWILIO_ACCOUNT_SID": tw.AccountSID,
		"TWILIO_AUTH_TOKEN":  tw.AuthToken,
		"TWILIO_FROM_NUMBER": tw.From,
	}
}

// Messages returns the SMS the double accepted, oldest first.
func (tw *Twilio) Messages(ctx context.Context) ([]double.Message, error) {
	var ms []double.Message
	err := callJSON(ctx, http.MethodGet, tw.URL+"/messages", nil, &ms)
	return ms, err
}

// Attempts returns every send request, accepted or failed, oldest first.
func (tw *Twilio) Attempts(ctx context.Context) ([]double.Attempt, error) {
	var as []double.Attempt
	err := callJSON(ctx, http.MethodGet, tw.URL+"/attempts", nil, &as)
	return as, err
}

// Fail scripts a provider failure; see double.Fault. For example, the next
// three sends answer 429:
//
//	tw.Fail(ctx, double.Fault{Status: 429, Count: 3})
//
// and one number is invalid, for good:
//
//	tw.Fail(ctx, double.Fault{To: "+15550001111", Status: 400, Code: 21211})
func (tw *Twilio) Fail(ctx context.Context, f double.Fault) error {
	return callJSON(ctx, http.MethodPost, tw.URL+"/faults", f, nil)
}
