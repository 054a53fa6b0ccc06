package double_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twilio/twilio-go"
	"github.com/twilio/twilio-go/client"
	openapi "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

const (
	sid   = "ACtest"
	token = "secret"
)

// rewrite sends every request to base, as the worker's Twilio adapter does:
// twilio-go has no base-URL option.
type rewrite struct{ base *url.URL }

func (r rewrite) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = r.base.Scheme, r.base.Host
	return http.DefaultTransport.RoundTrip(req)
}

// newTwilio returns the real twilio-go client pointed at srv, so these tests
// prove the double speaks the wire format the worker's client expects.
func newTwilio(t *testing.T, srv *httptest.Server, user, pass string) *twilio.RestClient {
	t.Helper()
	base, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{
		Credentials: client.NewCredentials(user, pass),
		HTTPClient:  &http.Client{Transport: rewrite{base}, Timeout: 2 * time.Second},
	}
	c.SetAccountSid(user)
	return twilio.NewRestClientWithParams(twilio.ClientParams{Client: c})
}

func send(rc *twilio.RestClient, to string) (*openapi.ApiV2010Message, error) {
	p := &openapi.CreateMessageParams{}
	p.SetTo(to).SetFrom("+15550000000").SetBody("Your parcel is out for delivery")
	return rc.Api.CreateMessage(p)
}

func TestDouble(t *testing.T) {
	t.Run("AcceptsAndRecords", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()

		m, err := send(newTwilio(t, srv, sid, token), "+15551234567")
		if err != nil {
			t.Fatal(err)
		}
		if m.Sid == nil || !strings.HasPrefix(*m.Sid, "SM") || len(*m.Sid) != 34 {
			t.Fatalf("sid = %v, want SM and 32 hex digits", m.Sid)
		}
		got := d.Messages()
		if len(got) != 1 || got[0].SID != *m.Sid || got[0].To != "+15551234567" || got[0].Body != "Your parcel is out for delivery" {
			t.Fatalf("messages = %+v", got)
		}
	})

	t.Run("ErrBadCredentials", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()

		_, err := send(newTwilio(t, srv, sid, "wrong"), "+15551234567")
		var tErr *client.TwilioRestError
		if !errors.As(err, &tErr) || tErr.Status != http.StatusUnauthorized {
			t.Fatalf("err = %v, want a 401 TwilioRestError", err)
		}
		if len(d.Messages()) != 0 {
			t.Fatal("an unauthenticated send was recorded as accepted")
		}
	})

	t.Run("FaultInvalidNumber", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		d.Fail(double.Fault{To: "+15550001111", Status: 400, Code: 21211})
		rc := newTwilio(t, srv, sid, token)

		_, err := send(rc, "+15550001111")
		var tErr *client.TwilioRestError
		if !errors.As(err, &tErr) || tErr.Status != 400 || tErr.Code != 21211 {
			t.Fatalf("err = %v, want 400 code 21211", err)
		}
		// Other numbers are unaffected.
		if _, err := send(rc, "+15551234567"); err != nil {
			t.Fatal(err)
		}
		if n := len(d.Messages()); n != 1 {
			t.Fatalf("accepted %d messages, want 1", n)
		}
	})

	t.Run("FaultNextN", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		// Through the HTTP control API, as a test drives the container.
		resp, err := http.Post(srv.URL+"/faults", "application/json", strings.NewReader(`{"status":503,"count":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST /faults: %s", resp.Status)
		}
		rc := newTwilio(t, srv, sid, token)

		for i := range 2 {
			_, err := send(rc, "+15551234567")
			var tErr *client.TwilioRestError
			if !errors.As(err, &tErr) || tErr.Status != 503 {
				t.Fatalf("send %d: err = %v, want 503", i, err)
			}
		}
		if _, err := send(rc, "+15551234567"); err != nil {
			t.Fatalf("third send: %v, want the fault used up", err)
		}
		a := d.Attempts()
		if len(a) != 3 || a[0].Status != 503 || a[1].Status != 503 || a[2].Status != 201 {
			t.Fatalf("attempts = %+v", a)
		}
	})

	t.Run("FaultDelay", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		d.Fail(double.Fault{Delay: double.Duration(5 * time.Second), Count: 1})

		// The client's 2 s timeout fires first: the worker's send timeout path.
		start := time.Now()
		if _, err := send(newTwilio(t, srv, sid, token), "+15551234567"); err == nil {
			t.Fatal("want a timeout")
		}
		if el := time.Since(start); el > 4*time.Second {
			t.Fatalf("send took %v, want the client timeout", el)
		}
		if len(d.Messages()) != 0 {
			t.Fatal("a timed-out send was recorded as accepted")
		}
	})

	t.Run("CountsConnections", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewUnstartedServer(d)
		srv.Listener = d.Listener(srv.Listener)
		srv.Start()
		defer srv.Close()

		// One keep-alive client: three sends, one connection.
		rc := newTwilio(t, srv, sid, token)
		for range 3 {
			if _, err := send(rc, "+15551234567"); err != nil {
				t.Fatal(err)
			}
		}
		if got := d.Connections(); got != 1 {
			t.Errorf("after 3 sends on one kept-alive connection: %d connections, want 1", got)
		}

		// Without keep-alive, each request is a connection of its own; the
		// control API reads the count over HTTP.
		noKeepAlive := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}
		var got struct{ Accepted int64 }
		for range 2 {
			resp, err := noKeepAlive.Get(srv.URL + "/connections")
			if err != nil {
				t.Fatal(err)
			}
			got.Accepted = -1
			err = json.NewDecoder(resp.Body).Decode(&got)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		if got.Accepted != 3 {
			t.Errorf("GET /connections = %d on the third connection, want 3", got.Accepted)
		}
	})
}
