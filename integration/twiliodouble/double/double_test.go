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
			// Twilio's own 503 carries its code, as every error of Twilio's does.
			if !errors.As(err, &tErr) || tErr.Status != 503 || tErr.Code != 20503 {
				t.Fatalf("send %d: err = %v, want 503 with code 20503", i, err)
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

	t.Run("FaultAcceptThenAnswerLate", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		d.Fail(double.Fault{Accept: true, Delay: double.Duration(5 * time.Second), Count: 1})

		if _, err := send(newTwilio(t, srv, sid, token), "+15551234567"); err == nil {
			t.Fatal("want a timeout")
		}
		got := d.Messages()
		if len(got) != 1 || !strings.HasPrefix(got[0].SID, "SM") {
			t.Fatalf("messages = %+v, want the one the client gave up on, accepted with a SID", got)
		}
	})

	t.Run("FaultDropWithoutAccepting", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		d.Fail(double.Fault{Drop: true, Count: 1})
		rc := newTwilio(t, srv, sid, token)

		start := time.Now()
		_, err := send(rc, "+15551234567")
		var tErr *client.TwilioRestError
		if err == nil || errors.As(err, &tErr) {
			t.Fatalf("err = %v, want a connection error, no answer", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("dropped send took %v, want an immediate close", el)
		}
		if n := len(d.Messages()); n != 0 {
			t.Fatalf("accepted %d messages, want none", n)
		}
		a := d.Attempts()
		if len(a) != 1 || a[0].Status != 0 {
			t.Fatalf("attempts = %+v, want one unanswered", a)
		}
		if _, err := send(rc, "+15551234567"); err != nil {
			t.Fatalf("send after the fault: %v", err)
		}
	})

	t.Run("FaultDropAfterAccepting", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		resp, err := http.Post(srv.URL+"/faults", "application/json", strings.NewReader(`{"drop":true,"accept":true,"count":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST /faults: %s", resp.Status)
		}
		if _, err := send(newTwilio(t, srv, sid, token), "+15551234567"); err == nil {
			t.Fatal("want a connection error")
		}
		if n := len(d.Messages()); n != 1 {
			t.Fatalf("accepted %d messages, want 1", n)
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

func TestDoubleList(t *testing.T) {
	const (
		alice = "+15550000001"
		bob   = "+15550000002"
	)
	d := double.New(sid, token)
	srv := httptest.NewServer(d)
	defer srv.Close()
	rc := newTwilio(t, srv, sid, token)
	var sent []string // SIDs to alice, oldest first
	for range 5 {
		m, err := send(rc, alice)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, *m.Sid)
		if _, err := send(rc, bob); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rc.Api.CreateMessage((&openapi.CreateMessageParams{}).SetTo(alice).SetMessagingServiceSid("MG1").SetBody("via service")); err != nil {
		t.Fatal(err)
	}

	t.Run("FilteredNewestFirstRFC2822", func(t *testing.T) {
		p := (&openapi.ListMessageParams{}).SetTo(alice).SetFrom("+15550000000").SetPageSize(50)
		page, err := rc.Api.PageMessage(p, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) != 5 || page.NextPageUri != nil {
			t.Fatalf("%d messages, next %v; want alice's 5 sent from the number, one page", len(page.Messages), page.NextPageUri)
		}
		for i, m := range page.Messages {
			if want := sent[len(sent)-1-i]; *m.Sid != want {
				t.Errorf("message %d = %s, want %s (newest first)", i, *m.Sid, want)
			}
			if *m.To != alice || *m.Body != "Your parcel is out for delivery" {
				t.Errorf("message %d: to %s body %q", i, *m.To, *m.Body)
			}
			if _, err := time.Parse(time.RFC1123Z, *m.DateCreated); err != nil {
				t.Errorf("date_created %q is not RFC 2822: %v", *m.DateCreated, err)
			}
		}
	})

	t.Run("DateSentDays", func(t *testing.T) {
		today := time.Now().UTC()
		for _, tc := range []struct {
			name string
			p    *openapi.ListMessageParams
			want int
		}{
			{"Today", (&openapi.ListMessageParams{}).SetTo(bob).SetDateSent(today), 5},
			{"Yesterday", (&openapi.ListMessageParams{}).SetTo(bob).SetDateSent(today.AddDate(0, 0, -1)), 0},
			{"OnOrAfterToday", (&openapi.ListMessageParams{}).SetTo(bob).SetDateSentAfter(today), 5},
			{"OnOrBeforeYesterday", (&openapi.ListMessageParams{}).SetTo(bob).SetDateSentBefore(today.AddDate(0, 0, -1)), 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				page, err := rc.Api.PageMessage(tc.p, "", "")
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Messages) != tc.want {
					t.Errorf("%d messages, want %d", len(page.Messages), tc.want)
				}
			})
		}
	})

	t.Run("PagesFollowNextPageURI", func(t *testing.T) {
		// twilio-go's ListMessage follows next_page_uri to the end.
		got, err := rc.Api.ListMessage((&openapi.ListMessageParams{}).SetTo(alice).SetPageSize(2))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 6 {
			t.Fatalf("%d messages over every page, want 6", len(got))
		}
		if *got[0].Body != "via service" || *got[0].MessagingServiceSid != "MG1" {
			t.Errorf("newest = %q via %v, want the messaging service's", *got[0].Body, got[0].MessagingServiceSid)
		}
		for i, m := range got[1:] {
			if want := sent[len(sent)-1-i]; *m.Sid != want {
				t.Errorf("message %d = %s, want %s", i+1, *m.Sid, want)
			}
		}
		page, err := rc.Api.PageMessage((&openapi.ListMessageParams{}).SetTo(alice).SetPageSize(2), "", "")
		if err != nil {
			t.Fatal(err)
		}
		if page.PageSize != 2 || len(page.Messages) != 2 || page.NextPageUri == nil || !strings.Contains(*page.NextPageUri, "PageToken=PA") {
			t.Fatalf("first page: size %d, %d messages, next %v", page.PageSize, len(page.Messages), page.NextPageUri)
		}
	})

	t.Run("ErrBadCredentials", func(t *testing.T) {
		_, err := newTwilio(t, srv, sid, "wrong").Api.PageMessage(&openapi.ListMessageParams{}, "", "")
		var tErr *client.TwilioRestError
		if !errors.As(err, &tErr) || tErr.Status != http.StatusUnauthorized {
			t.Fatalf("err = %v, want a 401 TwilioRestError", err)
		}
	})
}

// TestDoubleCountsListRequests: every list request is counted, a page a
// request, in all and by its To filter, over the control API too; Reset
// starts the counts afresh.
func TestDoubleCountsListRequests(t *testing.T) {
	const alice, bob = "+15550000001", "+15550000002"
	d := double.New(sid, token)
	srv := httptest.NewServer(d)
	defer srv.Close()
	rc := newTwilio(t, srv, sid, token)
	for range 3 {
		if _, err := send(rc, alice); err != nil {
			t.Fatal(err)
		}
	}
	// Two pages to alice (two messages, then one), one to bob, and a
	// request refused: four.
	if got, err := rc.Api.ListMessage((&openapi.ListMessageParams{}).SetTo(alice).SetPageSize(2)); err != nil || len(got) != 3 {
		t.Fatalf("ListMessage: %d messages, %v", len(got), err)
	}
	if _, err := rc.Api.PageMessage((&openapi.ListMessageParams{}).SetTo(bob), "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := newTwilio(t, srv, sid, "wrong").Api.PageMessage(&openapi.ListMessageParams{}, "", ""); err == nil {
		t.Fatal("a list with the wrong token: no error")
	}
	for _, c := range []struct {
		to   string
		want int64
	}{{"", 4}, {alice, 2}, {bob, 1}, {"+15550000003", 0}} {
		if got := d.ListRequests(c.to); got != c.want {
			t.Errorf("ListRequests(%q) = %d, want %d", c.to, got, c.want)
		}
		resp, err := http.Get(srv.URL + "/list-requests?" + url.Values{"to": {c.to}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Requests int64 }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || body.Requests != c.want {
			t.Errorf("GET /list-requests?to=%s = %+v, %v; want %d", c.to, body, err, c.want)
		}
	}
	d.Reset()
	if got := d.ListRequests(""); got != 0 {
		t.Fatalf("ListRequests = %d after Reset, want 0", got)
	}
}
