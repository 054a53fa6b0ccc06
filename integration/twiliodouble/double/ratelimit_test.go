package double_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twilio/twilio-go/client"

	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/testclock"
)

// post sends one message from from to to, as a raw form POST, so the
// test sees the answer's headers (twilio-go does not expose them).
func post(t *testing.T, srv *httptest.Server, from, to string) *http.Response {
	t.Helper()
	form := url.Values{"From": {from}, "To": {to}, "Body": {"Your parcel is out for delivery"}}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/2010-04-01/Accounts/"+sid+"/Messages.json", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(sid, token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func getRateLimit(t *testing.T, srv *httptest.Server) map[string]float64 {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/rate-limit")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]float64
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestDoubleRateLimit(t *testing.T) {
	const from, other = "+15550000000", "+15550000099"

	t.Run("OffByDefault", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		for i := range 20 {
			if resp := post(t, srv, from, "+15551234567"); resp.StatusCode != http.StatusCreated {
				t.Fatalf("send %d = %d, want 201: no limit unless one is set", i, resp.StatusCode)
			}
		}
		if n := d.RateLimited(); n != 0 {
			t.Errorf("RateLimited = %d, want 0", n)
		}
	})

	t.Run("BeyondThePaceIs429WithRetryAfter", func(t *testing.T) {
		d := double.New(sid, token)
		c := testclock.New(time.Unix(1775121240, 0))
		double.SetClock(d, c.Now)
		d.LimitRate(double.RateLimit{PerSecond: 0.5, Burst: 2}) // 2s apart
		srv := httptest.NewServer(d)
		defer srv.Close()

		var statuses []int
		for range 3 {
			statuses = append(statuses, post(t, srv, from, "+15551234567").StatusCode)
		}
		if want := []int{201, 201, 429}; !slices.Equal(statuses, want) {
			t.Fatalf("statuses = %v, want %v: a burst of 2, then refused", statuses, want)
		}
		resp := post(t, srv, from, "+15551234567")
		var body struct {
			Code   int `json:"code"`
			Status int `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 429 || body.Code != 20429 || body.Status != 429 || resp.Header.Get("Retry-After") != "2" {
			t.Errorf("answer = %d, code %d, Retry-After %q; want 429, code 20429, Retry-After 2", resp.StatusCode, body.Code, resp.Header.Get("Retry-After"))
		}
		// Another sender has its own pace.
		if got := post(t, srv, other, "+15551234567").StatusCode; got != http.StatusCreated {
			t.Errorf("another sender's send = %d, want 201", got)
		}
		// Half a second on: still 2s - 0.5s early, rounded up.
		c.Add(500 * time.Millisecond)
		if resp := post(t, srv, from, "+15551234567"); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
			t.Errorf("send 0.5s on = %d, Retry-After %q; want 429, 2 (1.5s rounded up)", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		// The refused sends did not use the pace: 2s after the burst, one
		// more goes.
		c.Add(1500 * time.Millisecond)
		if got := post(t, srv, from, "+15551234567").StatusCode; got != http.StatusCreated {
			t.Errorf("send at the sender's next turn = %d, want 201", got)
		}

		if n := d.RateLimited(); n != 3 {
			t.Errorf("RateLimited = %d, want the 3 sends answered 429", n)
		}
		if got := getRateLimit(t, srv); got["limited"] != 3 || got["per_second"] != 0.5 || got["burst"] != 2 {
			t.Errorf("GET /rate-limit = %v, want limited 3, per_second 0.5, burst 2", got)
		}
		if n := len(d.Messages()); n != 4 {
			t.Errorf("%d messages accepted, want 4 (the refused ones are not)", n)
		}
		var refused int
		for _, a := range d.Attempts() {
			if a.Status == 429 && a.Code == 20429 {
				refused++
			}
		}
		if refused != 3 {
			t.Errorf("%d attempts recorded 429/20429, want 3", refused)
		}
	})

	t.Run("TwilioGoSeesTooManyRequests", func(t *testing.T) {
		d := double.New(sid, token)
		d.LimitRate(double.RateLimit{PerSecond: 0.001, Burst: 1})
		srv := httptest.NewServer(d)
		defer srv.Close()
		rc := newTwilio(t, srv, sid, token)
		if _, err := send(rc, "+15551234567"); err != nil {
			t.Fatal(err)
		}
		_, err := send(rc, "+15551234567")
		var tre *client.TwilioRestError
		if !errors.As(err, &tre) || tre.Status != 429 || tre.Code != 20429 {
			t.Errorf("err = %v, want twilio-go's 429 with code 20429", err)
		}
	})

	t.Run("ControlAPI", func(t *testing.T) {
		d := double.New(sid, token)
		srv := httptest.NewServer(d)
		defer srv.Close()
		put := func(body string) int {
			req, _ := http.NewRequest(http.MethodPut, srv.URL+"/rate-limit", strings.NewReader(body))
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := put(`{"per_second":0.001,"burst":1}`); got != http.StatusNoContent {
			t.Fatalf("PUT /rate-limit = %d, want 204", got)
		}
		post(t, srv, from, "+15551234567")
		if got := post(t, srv, from, "+15551234567").StatusCode; got != 429 {
			t.Errorf("second send = %d, want 429 under the limit set over HTTP", got)
		}
		if got := put(`{"per_second":0}`); got != http.StatusNoContent {
			t.Fatalf("PUT /rate-limit off = %d, want 204", got)
		}
		if got := post(t, srv, from, "+15551234567").StatusCode; got != 201 {
			t.Errorf("send with the limit off = %d, want 201", got)
		}
		for _, bad := range []string{`{"per_second":-1}`, `{"burst":-2}`, `not json`} {
			if got := put(bad); got != http.StatusBadRequest {
				t.Errorf("PUT /rate-limit %s = %d, want 400", bad, got)
			}
		}
		d.Reset()
		if n := d.RateLimited(); n != 0 {
			t.Errorf("RateLimited after Reset = %d, want 0", n)
		}
	})
}
