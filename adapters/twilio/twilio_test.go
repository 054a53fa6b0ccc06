package twilio_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/ports"
)

const (
	testSID   = "AC0123456789abcdef0123456789abcdef"
	testToken = "s3cr3tT0kenNeverPrinted"
	testTo    = "+15551234567"
	testFrom  = "+15557654321"
)

func TestNew(t *testing.T) {
	t.Run("ErrEveryMissingFieldNamed", func(t *testing.T) {
		_, err := twilio.New(twilio.Config{})
		if err == nil {
			t.Fatal("New(empty config) = nil error")
		}
		for _, field := range []string{"AccountSID", "AuthToken", "From or MessagingServiceSID"} {
			if !strings.Contains(err.Error(), field) {
				t.Errorf("error %q does not name %s", err, field)
			}
		}
	})
	t.Run("ErrNotAlphanumeric", func(t *testing.T) {
		_, err := twilio.New(twilio.Config{AccountSID: "AC-1", AuthToken: "tok/en", From: testFrom})
		if err == nil || !strings.Contains(err.Error(), "AccountSID must be alphanumeric") || !strings.Contains(err.Error(), "AuthToken must be alphanumeric") {
			t.Errorf("err = %v, want both fields named", err)
		}
		if err != nil && strings.Contains(err.Error(), "tok/en") {
			t.Errorf("error %q contains the auth token", err)
		}
	})
	t.Run("ErrAPIURL", func(t *testing.T) {
		_, err := twilio.New(twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: "ftp://example"})
		if err == nil || !strings.Contains(err.Error(), "APIURL") {
			t.Errorf("err = %v, want APIURL named", err)
		}
	})
	t.Run("OK", func(t *testing.T) {
		if _, err := twilio.New(twilio.Config{AccountSID: testSID, AuthToken: testToken, MessagingServiceSID: "MG123"}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSend(t *testing.T) {
	msg := ports.Message{IdempotencyKey: "k", EventID: "evt-1", Channel: ports.ChannelSMS, To: testTo, Text: "Parcel SHP-1: out for delivery, 14:00-16:00"}

	t.Run("Created", func(t *testing.T) {
		fake := NewFakeTwilio(t, reply(http.StatusCreated, `{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued"}`))
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})

		before := time.Now()
		r, err := n.Send(context.Background(), msg)
		if err != nil {
			t.Fatal(err)
		}
		if r.ProviderID != "SM0123456789abcdef0123456789abcdef" {
			t.Errorf("ProviderID = %q, want the SID", r.ProviderID)
		}
		if r.SentAt.Before(before) {
			t.Errorf("SentAt %v is before the send started", r.SentAt)
		}

		got := fake.Only(t)
		if got.Method != http.MethodPost || got.Path != "/2010-04-01/Accounts/"+testSID+"/Messages.json" {
			t.Errorf("request = %s %s", got.Method, got.Path)
		}
		if got.User != testSID || got.Pass != testToken {
			t.Errorf("basic auth = %q/%q, want the account SID and token", got.User, got.Pass)
		}
		want := url.Values{"To": {testTo}, "From": {testFrom}, "Body": {msg.Text}}
		if got.Form.Encode() != want.Encode() {
			t.Errorf("form = %v, want %v", got.Form, want)
		}
	})

	t.Run("MessagingServiceSidInsteadOfFrom", func(t *testing.T) {
		fake := NewFakeTwilio(t, reply(http.StatusCreated, `{"sid":"SM1"}`))
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, MessagingServiceSID: "MG0123456789abcdef", APIURL: fake.URL})
		if _, err := n.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		got := fake.Only(t)
		if got.Form.Get("MessagingServiceSid") != "MG0123456789abcdef" || got.Form.Has("From") {
			t.Errorf("form = %v, want MessagingServiceSid and no From", got.Form)
		}
	})

	t.Run("APIURLPathPrefix", func(t *testing.T) {
		fake := NewFakeTwilio(t, reply(http.StatusCreated, `{"sid":"SM1"}`))
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL + "/twilio/"})
		if _, err := n.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		if got := fake.Only(t).Path; got != "/twilio/2010-04-01/Accounts/"+testSID+"/Messages.json" {
			t.Errorf("path = %s, want the prefix kept", got)
		}
	})

	t.Run("AcceptedButUnreadableAnswerCountsAsSent", func(t *testing.T) {
		fake := NewFakeTwilio(t, reply(http.StatusCreated, `<html>`))
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
		r, err := n.Send(context.Background(), msg)
		if err != nil {
			t.Fatalf("err = %v; a 201 means Twilio took the message, a retry would send it twice", err)
		}
		if r.ProviderID != "" {
			t.Errorf("ProviderID = %q, want empty", r.ProviderID)
		}
	})

	for _, tc := range []struct {
		name   string
		status int
		body   string
		kind   ports.Kind
		code   int
		// unknown: Twilio may have accepted the message.
		unknown bool
	}{
		{"InvalidNumber21211IsPermanent", 400, twilioError(400, 21211, "The 'To' number "+testTo+" is not a valid phone number."), ports.Permanent, 21211, false},
		{"Unsubscribed21610IsPermanent", 400, twilioError(400, 21610, "Attempt to send to unsubscribed recipient"), ports.Permanent, 21610, false},
		{"NotMobile21614IsPermanent", 400, twilioError(400, 21614, "'To' number is not a valid mobile number"), ports.Permanent, 21614, false},
		{"BadCredentialsIsUnavailable", 401, twilioError(401, 20003, "Authenticate"), ports.Unavailable, 20003, false},
		{"TooManyRequestsIsRetryable", 429, twilioError(429, 20429, "Too Many Requests"), ports.Retryable, 20429, false},
		{"ProxyServiceUnavailableIsUnknown", 503, `<html>503 Service Unavailable</html>`, ports.Retryable, 0, true},
		{"TwilioServiceUnavailableIsUnknown", 503, twilioError(503, 20503, "Service Unavailable"), ports.Retryable, 20503, true},
		{"BadGatewayIsUnknown", 502, `<html>502 Bad Gateway</html>`, ports.Retryable, 0, true},
		{"GatewayTimeoutIsUnknown", 504, `upstream request timeout`, ports.Retryable, 0, true},
		{"GatewayTimeoutJSONIsUnknown", 504, twilioError(504, 20504, "Gateway Timeout"), ports.Retryable, 20504, true},
		{"InternalErrorJSONIsUnknown", 500, twilioError(500, 20500, "Internal Server Error"), ports.Retryable, 20500, true},
		{"ProxyInternalErrorIsUnknown", 500, `<html>500 Internal Server Error</html>`, ports.Retryable, 0, true},
		{"OtherServerErrorIsUnknown", 507, `Insufficient Storage`, ports.Retryable, 0, true},
		{"TooManyRequestsPlainIsRetryable", 429, `rate limited`, ports.Retryable, 0, false},
		{"RequestTimeoutIsRetryable", 408, `request timeout`, ports.Retryable, 0, false},
		{"ProxyNotFoundPageIsRetryable", 404, `<html>not found</html>`, ports.Retryable, 0, false},
		{"RedirectIsUnavailableNotSent", 301, `{"message":"moved"}`, ports.Unavailable, 0, false},
		{"InvalidFrom21212IsUnavailable", 400, twilioError(400, 21212, "The 'From' number is not a valid phone number"), ports.Unavailable, 21212, false},
		{"FromCannotSMS21606IsUnavailable", 400, twilioError(400, 21606, "The 'From' phone number provided is not a valid message-capable Twilio phone number"), ports.Unavailable, 21606, false},
		{"QueueFull21611IsRetryable", 400, twilioError(400, 21611, "This 'From' number has exceeded the maximum number of queued messages"), ports.Retryable, 21611, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := NewFakeTwilio(t, reply(tc.status, tc.body))
			n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
			_, err := n.Send(context.Background(), msg)
			if err == nil {
				t.Fatal("Send = nil error")
			}
			if got := ports.KindOf(err); got != tc.kind {
				t.Errorf("KindOf(%v) = %v, want %v", err, got, tc.kind)
			}
			if got := errors.Is(err, ports.ErrOutcomeUnknown); got != tc.unknown {
				t.Errorf("errors.Is(%v, ErrOutcomeUnknown) = %v, want %v", err, got, tc.unknown)
			}
			var te *twilio.Error
			if !errors.As(err, &te) || te.Status != tc.status || te.Code != tc.code {
				t.Errorf("err = %#v, want *twilio.Error with status %d, code %d", err, tc.status, tc.code)
			}
			AssertSafeErrorText(t, err, fake.URL)
			if tc.code != 0 && !strings.Contains(err.Error(), fmt.Sprint(tc.code)) {
				t.Errorf("error %q does not carry Twilio's code %d", err, tc.code)
			}
		})
	}

	t.Run("HangingServerTimesOutUnknown", func(t *testing.T) {
		arrived := make(chan struct{}, 1)
		fake := NewFakeTwilio(t, hang(t, arrived))
		const timeout = 300 * time.Millisecond
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL, Timeout: timeout})

		start := time.Now()
		_, err := n.Send(context.Background(), msg)
		elapsed := time.Since(start)
		if err == nil {
			t.Fatal("Send against a hanging server = nil error")
		}
		if elapsed > timeout+time.Second {
			t.Errorf("Send took %v, want about %v", elapsed, timeout)
		}
		if !errors.Is(err, ports.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want an unknown outcome, deadline exceeded", err)
		}
		var te *twilio.Error
		if !errors.As(err, &te) || te.Status != 0 {
			t.Errorf("err = %#v, want a *twilio.Error without status", err)
		}
		AssertSafeErrorText(t, err, fake.URL)
	})

	t.Run("ConnectionClosedAfterRequestIsUnknown", func(t *testing.T) {
		fake := NewFakeTwilio(t, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		})
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
		_, err := n.Send(context.Background(), msg)
		if !errors.Is(err, ports.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want an unknown outcome: the request was taken", err)
		}
		if len(fake.Requests()) != 1 {
			t.Errorf("server saw %d requests, want 1: a send is never repeated by the transport", len(fake.Requests()))
		}
		AssertSafeErrorText(t, err, fake.URL)
	})

	t.Run("HTTP2HangingServerIsUnknown", func(t *testing.T) {
		// The real API speaks HTTP/2: the written request is seen there too.
		arrived := make(chan struct{}, 1)
		srv := httptest.NewUnstartedServer(hang(t, arrived))
		srv.EnableHTTP2 = true
		srv.StartTLS()
		t.Cleanup(srv.Close)
		var proto atomic.Value
		base := srv.Client().Transport
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: srv.URL, Timeout: 300 * time.Millisecond,
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := base.RoundTrip(r)
				if resp != nil {
					proto.Store(resp.Proto)
				}
				return resp, err
			})})
		_, err := n.Send(context.Background(), msg)
		if !errors.Is(err, ports.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want an unknown outcome", err)
		}
		select {
		case <-arrived:
		default:
			t.Fatal("the request never reached the server")
		}
		// And a send that is answered is sent, over HTTP/2.
		ok := httptest.NewUnstartedServer(reply(http.StatusCreated, `{"sid":"SM1"}`))
		ok.EnableHTTP2 = true
		ok.StartTLS()
		t.Cleanup(ok.Close)
		base = ok.Client().Transport
		n = MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: ok.URL,
			Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := base.RoundTrip(r)
				if resp != nil {
					proto.Store(resp.Proto)
				}
				return resp, err
			})})
		if _, err := n.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		if p, _ := proto.Load().(string); p != "HTTP/2.0" {
			t.Errorf("protocol %q, want HTTP/2.0", p)
		}
	})

	t.Run("TLSHandshakeFailureIsRetryable", func(t *testing.T) {
		var reached atomic.Int64
		srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Add(1) }))
		t.Cleanup(srv.Close)
		// The default transport does not trust the test certificate.
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: srv.URL})
		_, err := n.Send(context.Background(), msg)
		if err == nil || errors.Is(err, ports.ErrOutcomeUnknown) || ports.KindOf(err) != ports.Retryable {
			t.Fatalf("err = %v, want retryable and not unknown: nothing was written", err)
		}
		if reached.Load() != 0 {
			t.Fatal("a request passed an untrusted handshake")
		}
	})

	t.Run("ContextCancelledStopsWaiting", func(t *testing.T) {
		arrived := make(chan struct{}, 1)
		fake := NewFakeTwilio(t, hang(t, arrived))
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL, Timeout: time.Minute})

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			_, err := n.Send(ctx, msg)
			errc <- err
		}()
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("request never reached the server")
		}
		cancel()
		select {
		case err := <-errc:
			// Cancelled after the request was written: Twilio may have it.
			if !errors.Is(err, context.Canceled) || !errors.Is(err, ports.ErrOutcomeUnknown) {
				t.Errorf("err = %v, want context.Canceled, outcome unknown", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Send still waiting 5s after ctx was cancelled (Timeout is 1m)")
		}
	})

	t.Run("ConnectionRefusedIsRetryableAndNamesConfiguredURL", func(t *testing.T) {
		apiURL := ClosedURL(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL})
		_, err := n.Send(context.Background(), msg)
		if err == nil || ports.KindOf(err) != ports.Retryable || errors.Is(err, ports.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want retryable, not unknown: nothing was written", err)
		}
		AssertSafeErrorText(t, err, apiURL)
		if strings.Contains(err.Error(), "api.twilio.com") {
			t.Errorf("error %q names api.twilio.com, where nothing was sent", err)
		}
	})
}

// TestSendConcurrent proves sends share nothing that races; run with -race.
func TestSendConcurrent(t *testing.T) {
	fake := NewFakeTwilio(t, reply(http.StatusCreated, `{"sid":"SM1"}`))
	n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL})
	const senders = 16
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			m := ports.Message{EventID: fmt.Sprint(i), Channel: ports.ChannelSMS, To: testTo, Text: fmt.Sprint("msg ", i)}
			if _, err := n.Send(context.Background(), m); err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	bodies := map[string]bool{}
	for _, r := range fake.Requests() {
		bodies[r.Form.Get("Body")] = true
	}
	if len(bodies) != senders {
		t.Errorf("server saw %d distinct bodies, want %d", len(bodies), senders)
	}
}

// TestSendReusesConnections sends through one Notifier to the Twilio
// double, which counts the connections its listener accepts and the
// requests it serves at once.
//
// The pool's bound is checked on the requests served at once: over HTTP/1
// a connection carries one request at a time, and a handler returns before
// its answer reaches the client, so no more requests than open
// connections are ever in a handler together, whatever the scheduling.
//
// Reuse is checked on the connections accepted over the whole run, which
// include legitimate replacements: net/http closes a connection instead of
// returning it to the pool when the goroutine that wrote the request has
// not reported the write within 50 ms of the answer being read (its
// maxWriteWaitBeforeConnReuse), and the pool then dials another in its
// place. Only a loaded machine delays a goroutine that long: on 2 cores
// at load 12 under the race detector, 1 or 2 sends in 2000 did. Allowing
// one replacement per 100 sends still fails a pool that keeps too few idle
// connections, where Go's default of 2 per host opens one for nearly every
// send.
func TestSendReusesConnections(t *testing.T) {
	for _, tc := range []struct {
		name               string
		sends, inFlight    int
		maxConns, wantMost int
	}{
		{"PoolSizedToSendsInFlight", 2000, 64, 64, 64},
		// Sends beyond the pool wait for a free connection instead of
		// opening one.
		{"PoolSmallerThanSendsInFlight", 500, 64, 8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var served concurrency
			d, apiURL := startDouble(t, served.measure)
			n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, MaxConns: tc.maxConns, Timeout: 30 * time.Second})

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			next := make(chan int)
			go func() {
				defer close(next)
				for i := range tc.sends {
					select {
					case next <- i:
					case <-ctx.Done():
						return
					}
				}
			}()
			var wg sync.WaitGroup
			var failed atomic.Int64
			for range tc.inFlight {
				wg.Go(func() {
					for i := range next {
						m := ports.Message{EventID: fmt.Sprint(i), Channel: ports.ChannelSMS, To: testTo, Text: fmt.Sprint("msg ", i)}
						if _, err := n.Send(ctx, m); err != nil && failed.Add(1) <= 3 {
							t.Errorf("send %d: %v", i, err)
						}
					}
				})
			}
			wg.Wait()

			bodies := map[string]bool{}
			for _, m := range d.Messages() {
				bodies[m.Body] = true
			}
			if len(bodies) != tc.sends {
				t.Errorf("double accepted %d distinct messages, want %d (%d sends failed)", len(bodies), tc.sends, failed.Load())
			}
			if got := served.peak.Load(); got > int64(tc.wantMost) {
				t.Errorf("%d sends at %d in flight: the double served %d requests at once, want at most %d (the pool)", tc.sends, tc.inFlight, got, tc.wantMost)
			}
			replacements := tc.sends / 100
			if got := d.Connections(); got > int64(tc.wantMost+replacements) || got == 0 {
				t.Errorf("%d sends at %d in flight opened %d connections, want 1 to %d (the pool, and %d replacements)", tc.sends, tc.inFlight, got, tc.wantMost+replacements, replacements)
			}
		})
	}
}

// StartDouble serves the Twilio double (integration/twiliodouble/double)
// for testSID and testToken on 127.0.0.1, on a listener that counts
// connections, until the test ends. It returns the double and its URL.
func StartDouble(tb testing.TB) (*double.Double, string) {
	tb.Helper()
	return startDouble(tb, func(h http.Handler) http.Handler { return h })
}

// startDouble is StartDouble with the double's handler wrapped by wrap.
func startDouble(tb testing.TB, wrap func(http.Handler) http.Handler) (*double.Double, string) {
	tb.Helper()
	d := double.New(testSID, testToken)
	srv := httptest.NewUnstartedServer(wrap(d))
	srv.Listener = d.Listener(srv.Listener)
	srv.Start()
	tb.Cleanup(srv.Close)
	return d, srv.URL
}

// concurrency counts the requests a handler serves at once, and the most
// it ever served at once.
type concurrency struct {
	now, peak atomic.Int64
}

// serviceTime is how long measure holds each request, as a real API
// takes a while to answer: without it the double answers in microseconds
// and requests seldom overlap, so a pool that opened too many connections
// would still show few requests at once.
const serviceTime = 2 * time.Millisecond

// measure wraps h to count its requests into c.
func (c *concurrency) measure(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := c.now.Add(1)
		defer c.now.Add(-1)
		for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
		}
		time.Sleep(serviceTime)
		h.ServeHTTP(w, r)
	})
}

// FakeTwilio is an httptest double of Twilio's Messages endpoint that records
// what it received.
type FakeTwilio struct {
	URL  string
	mu   sync.Mutex
	reqs []Received
}

// Received is one request as the double saw it.
type Received struct {
	Method, Path, User, Pass string
	Form                     url.Values
}

// NewFakeTwilio starts a double on 127.0.0.1 that records each request, then
// answers it with respond. It is closed when the test ends.
func NewFakeTwilio(tb testing.TB, respond http.HandlerFunc) *FakeTwilio {
	tb.Helper()
	f := &FakeTwilio{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		_ = r.ParseForm()
		f.mu.Lock()
		f.reqs = append(f.reqs, Received{r.Method, r.URL.Path, user, pass, r.PostForm})
		f.mu.Unlock()
		respond(w, r)
	}))
	tb.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Requests returns what the double received so far.
func (f *FakeTwilio) Requests() []Received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Received(nil), f.reqs...)
}

// Only returns the one request the double received, failing otherwise.
func (f *FakeTwilio) Only(tb testing.TB) Received {
	tb.Helper()
	reqs := f.Requests()
	if len(reqs) != 1 {
		tb.Fatalf("double received %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

func reply(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

// hang answers nothing until the client goes away or the test ends, and
// signals arrived when a request is in.
func hang(tb testing.TB, arrived chan<- struct{}) http.HandlerFunc {
	release := make(chan struct{})
	// Registered after NewFakeTwilio's srv.Close, so it runs first and
	// srv.Close does not wait on a handler that never returns.
	tb.Cleanup(func() { close(release) })
	return func(_ http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
}

func twilioError(status, code int, message string) string {
	return fmt.Sprintf(`{"code":%d,"message":%q,"more_info":"https://www.twilio.com/docs/errors/%d","status":%d}`, code, message, code, status)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// MustNew returns a Notifier for cfg, failing the test on error.
func MustNew(tb testing.TB, cfg twilio.Config) *twilio.Notifier {
	tb.Helper()
	n, err := twilio.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// ClosedURL returns an http URL on 127.0.0.1 where nothing listens.
func ClosedURL(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return "http://" + addr
}

// AssertSafeErrorText checks an error's text names the configured API URL
// and holds neither the auth token nor the full phone number.
func AssertSafeErrorText(tb testing.TB, err error, apiURL string) {
	tb.Helper()
	text := err.Error()
	if !strings.Contains(text, apiURL) {
		tb.Errorf("error %q does not name the configured API URL %s", text, apiURL)
	}
	if strings.Contains(text, testToken) {
		tb.Errorf("error %q contains the auth token", text)
	}
	if strings.Contains(text, testTo) {
		tb.Errorf("error %q contains the full phone number", text)
	}
	if !strings.Contains(text, ports.MaskPhone(testTo)) {
		tb.Errorf("error %q does not name the masked recipient", text)
	}
}
