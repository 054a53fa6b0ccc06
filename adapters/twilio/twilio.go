// Package twilio is the SMS ports.Notifier: it sends each message through
// Twilio's Messages API with github.com/twilio/twilio-go, and classifies
// Twilio's answers into the ports error kinds (see Send). Only a 2xx
// counts as sent.
//
// # Refusals and backpressure
//
// Of Twilio's answers that say the message was not created, some are
// definite refusals of it, and some only ask to send later:
//
//   - Refusals of the message: a 4xx with Twilio's JSON error about the
//     message (21211, 21614, 21610, ...). The same message fails the same
//     way whenever it is sent: Permanent.
//   - Refusals of our configuration: 401, 403 and the sender codes. Every
//     message fails alike until the operator acts: Unavailable.
//   - Backpressure: HTTP 429 with error 20429, which Twilio documents as
//     the account exceeding its concurrency on the REST API, and says a
//     request answered 429 is not processed and is safe to retry after
//     backing off; and 400 with error 21611, which Twilio documents as the
//     sender's queue being full: Twilio queues a sender's messages at its
//     rate (a US long code sends one segment a second) up to ten hours'
//     worth, and refuses to create more on that sender until the queue
//     drains. Neither says anything about the message: it will be accepted
//     once the sender is slower. The error wraps ports.ErrRateLimited and
//     carries, for ports.RetryAfter, the wait the answer's Retry-After
//     header asks (seconds or an HTTP date; at most MaxRetryAfter), or
//     DefaultRetryAfter (429) or DefaultQueueFullRetryAfter (21611) when it
//     names none. Its kind stays Retryable: the caller slows the sender for
//     every message and tries again; it is neither a failure of the message
//     nor an unknown outcome. A 429 without Twilio's JSON (a proxy's) is
//     backpressure too.
//
// A Messaging Service's queue overflow (30001) is not among them: Twilio
// creates the message and fails it later, so Send counts it as sent.
//
// The Notifier is also a ports.Reconciler: it asks Twilio's Messages list
// whether a message whose outcome was unknown was accepted (see Reconcile
// and docs/reconciliation.md).
package twilio

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twilio/twilio-go/client"
	api "github.com/twilio/twilio-go/rest/api/v2010"

	"github.com/harborlight/notification-worker/ports"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultAPIURL   = "https://api.twilio.com"
	DefaultTimeout  = 10 * time.Second
	DefaultMaxConns = 64
	// DefaultListLag: Twilio publishes no bound on how soon an accepted
	// message shows in its Messages list. The Message resource exists once
	// the create answered with its SID, and the list reads the same
	// resources; a minute covers replication between Twilio's stores with a
	// wide margin, while keeping a record whose send was unknown waiting no
	// longer than that before it may be resent. See docs/reconciliation.md.
	DefaultListLag = time.Minute
	// DefaultClockSkew is the difference tolerated between this host's clock
	// and Twilio's date_created (itself in whole seconds).
	DefaultClockSkew = 30 * time.Second
)

// Config configures a Notifier.
type Config struct {
	// AccountSID and AuthToken authenticate with HTTP basic auth. Both are
	// required and must be alphanumeric (twilio-go rejects anything else with
	// 21222 at send time; New rejects it at start instead).
	AccountSID, AuthToken string
	// From is the E.164 sender number. MessagingServiceSID, when set, is sent
	// instead of From (Twilio then picks the sender). One of them is required.
	From                string
	MessagingServiceSID string
	// APIURL is the base URL of the API, default DefaultAPIURL: a proxy or a
	// test double. twilio-go has no base-URL option, so requests are sent to
	// it by a transport that rewrites their scheme and host (and prefixes a
	// path, if APIURL has one).
	APIURL string
	// Timeout bounds one send, from the first byte out to the last byte of the
	// answer, default DefaultTimeout.
	Timeout time.Duration
	// MaxConns is the most connections the Notifier opens to the API at
	// once, and the most it keeps idle for the next sends, default
	// DefaultMaxConns. Give it the most sends that run at once (the worker's
	// MAX_IN_FLIGHT): then every send finds a kept connection once the pool
	// is warm, and none waits for one. A send beyond it waits for a free
	// connection, within its Timeout. It applies only when Transport is nil.
	MaxConns int
	// Transport is the base transport, for its own connection pool, proxy
	// and TLS settings; nil means one built by New: a clone of
	// http.DefaultTransport (proxy from the environment, keep-alive,
	// HTTP/2 where the API offers it) sized by MaxConns.
	Transport http.RoundTripper
	// ListLag is how long after a send's window ended Reconcile still
	// answers "cannot tell" rather than "not delivered" when Twilio's list
	// does not show the message: the list may lag the messages Twilio
	// accepted. Default DefaultListLag.
	ListLag time.Duration
	// ClockSkew widens Reconcile's window on both sides, for this host's
	// clock against Twilio's. Default DefaultClockSkew.
	ClockSkew time.Duration
}

var (
	_ ports.Notifier   = (*Notifier)(nil)
	_ ports.Reconciler = (*Notifier)(nil)
)

// Notifier sends SMS through Twilio. It is safe for concurrent use.
//
// New builds one twilio-go client and one HTTP client and transport, shared
// by every send, so sends reuse kept-alive connections instead of paying a
// TCP and TLS handshake each. Sharing is safe: read in twilio-go v1.31.0,
// client.Client.SendRequest, RequestHandler and ApiService.CreateMessage
// only read their fields once built (SendRequest writes the client only
// when OAuth is set, which the Notifier never does), and http.Client and
// http.Transport are safe for concurrent use. The client's setters
// (SetAccountSid, SetTimeout, SetOauth) write its fields: New calls
// SetAccountSid, before the client is shared, and nothing calls them after.
type Notifier struct {
	sid, from string
	token     string
	msSID     string
	sender    string // Sender's answer
	apiURL    *url.URL
	timeout   time.Duration
	listLag   time.Duration
	skew      time.Duration
	api       *api.ApiService
	// lister sends Reconcile's list requests: the base transport (the same
	// connection pool as sends), the same Timeout, no redirects.
	lister *http.Client
	// sends holds each Send in progress (*sendInProgress) by its
	// placeholder; see sendInProgress.
	sends sync.Map
	seq   atomic.Uint64
}

// sendInProgress is one Send, as its request's transport sees it.
// twilio-go's CreateMessage takes no context and reports an HTTP status
// only when the body carries it; so Send registers its context under a
// placeholder that it passes as the account SID of the request path, and
// the transport looks the placeholder up, puts the real account SID in its
// place, sends the request under the send's context and records the status.
type sendInProgress struct {
	ctx    context.Context
	status atomic.Int32 // written by RoundTrip, read by Send after CreateMessage returned
	// wrote is set once a request of the send was written whole to the
	// connection (httptrace's WroteRequest without error): from then on
	// Twilio may have accepted the message, whether or not an answer comes.
	wrote atomic.Bool
	// header is the answer's header, stored by RoundTrip with status: a
	// refusal's Retry-After is in it.
	header atomic.Pointer[http.Header]
}

// alphanumeric is what Twilio accepts as an account SID, auth token or
// messaging service SID; it answers anything else with error 21222 (invalid
// credentials) at the first send. It is the one statement of that rule:
// New checks Config with it, and LoadSettings the variables.
var alphanumeric = regexp.MustCompile(`^[a-zA-Z0-9]+$`)

// New validates cfg, applies defaults and returns a Notifier with its
// clients built. It does not contact Twilio. Its error names every missing
// or invalid field at once, and never contains the auth token.
func New(cfg Config) (*Notifier, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}

	base := cfg.Transport
	if base == nil {
		base = pooledTransport(cfg.MaxConns)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	n := &Notifier{
		sid:     cfg.AccountSID,
		from:    cfg.From,
		token:   cfg.AuthToken,
		msSID:   cfg.MessagingServiceSID,
		sender:  senderOf(cfg.From, cfg.MessagingServiceSID),
		apiURL:  u,
		timeout: cfg.Timeout,
		listLag: cfg.ListLag,
		skew:    cfg.ClockSkew,
		lister:  &http.Client{Transport: base, Timeout: cfg.Timeout, CheckRedirect: noRedirect},
	}
	c := &client.Client{
		Credentials: client.NewCredentials(cfg.AccountSID, cfg.AuthToken),
		HTTPClient: &http.Client{
			Transport: &apiTransport{base: base, target: u, sid: cfg.AccountSID, sends: &n.sends},
			Timeout:   cfg.Timeout,
			// twilio-go's own default: a redirect is an answer, not a hop.
			CheckRedirect: noRedirect,
		},
	}
	c.SetAccountSid(cfg.AccountSID)
	// Not NewRequestHandler: it reads TWILIO_EDGE and TWILIO_REGION from the
	// environment, and configuration is read once, by the config package.
	n.api = api.NewApiService(&client.RequestHandler{Client: c})
	return n, nil
}

// pooledTransport is http.DefaultTransport's configuration (proxy from the
// environment, 30 s dial timeout and TCP keep-alive, 10 s TLS handshake
// timeout, 90 s idle timeout, HTTP/2 attempted over TLS) with a pool of
// maxConns connections to the API host, all of which may stay idle between
// sends. Go's default keeps 2 idle connections per host, so a burst of
// concurrent sends opened a new connection for most of them.
func pooledTransport(maxConns int) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxConnsPerHost = maxConns
	t.MaxIdleConnsPerHost = maxConns
	t.MaxIdleConns = maxConns
	t.ForceAttemptHTTP2 = true
	return t
}

// Send sends m.Text to m.To and returns Twilio's message SID as the
// receipt's ProviderID.
//
// It returns within the configured Timeout, or sooner when ctx is done (the
// request is cancelled, not abandoned, even though twilio-go takes no
// context). Errors hold an *Error (errors.As), classified for ports.KindOf
// and ports.ErrOutcomeUnknown:
//   - Permanent: Twilio's JSON error with a 4xx status, about the message
//     itself (invalid or unsubscribed number, body too long): the same
//     message fails the same way again. An unsubscribed number (21610)
//     also wraps ports.ErrRecipientOptedOut, with a receipt whose
//     ProviderID is "opted-out:21610".
//   - Unavailable: 401, 403, a 3xx, or a 4xx code about our sender
//     (senderCodes): the operator must fix them, and they must not
//     dead-letter every SMS meanwhile.
//   - unknown (errors.Is(err, ports.ErrOutcomeUnknown)): the request was
//     written whole and no answer came (a timeout, ctx done, the connection
//     reset or closed); or any 5xx, JSON or not: Twilio's own 500 and 503
//     come after it may have created the message (its 20500 says a retried
//     POST may send it twice), and a 502, 503 or 504 from a gateway says
//     nothing of what happened behind it. Twilio may have accepted the
//     message: ask Reconcile before sending it again.
//   - rate limited (errors.Is(err, ports.ErrRateLimited), kind
//     retryable): 429 or 20429 (Twilio: a request answered 429 was not
//     processed) and 21611 (the sender's queue is full), with the wait to
//     honour (ports.RetryAfter): see the package comment.
//   - retryable: 408, any failure before the request was written (dial
//     refused, DNS, TLS handshake: Twilio never saw it), a 4xx that is not
//     Twilio's JSON (a proxy's page, not Twilio's verdict).
//
// A 2xx whose body cannot be decoded counts as sent, with an empty
// ProviderID: Twilio has accepted the message, and a retry would send the
// customer a second SMS.
func (n *Notifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	// Cancelled on return, which also closes a connection whose answer
	// twilio-go left unread (it does not close an error's body), so the
	// pool never loses one to a failed send.
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()

	s := &sendInProgress{ctx: ctx}
	placeholder := sendPrefix + strconv.FormatUint(n.seq.Add(1), 10)
	n.sends.Store(placeholder, s)
	defer n.sends.Delete(placeholder)

	params := (&api.CreateMessageParams{}).SetPathAccountSid(placeholder).SetTo(m.To).SetBody(m.Text)
	if n.msSID != "" {
		params.SetMessagingServiceSid(n.msSID)
	} else {
		params.SetFrom(n.from)
	}

	msg, err := n.api.CreateMessage(params)
	sentAt := time.Now()
	status := int(s.status.Load())
	// Only a 2xx means Twilio took the message. twilio-go also returns
	// without error for a 3xx whose body is JSON (a proxy, an http:// API
	// URL): counting that as sent would record it and suppress every replay.
	if status >= 200 && status < 300 {
		var sid string
		if msg != nil && msg.Sid != nil {
			sid = *msg.Sid
		}
		return ports.Receipt{ProviderID: sid, SentAt: sentAt}, nil
	}
	if err == nil {
		err = fmt.Errorf("unexpected HTTP status %d", status)
	}
	var header http.Header
	if h := s.header.Load(); h != nil {
		header = *h
	}
	err = n.classify(ctx, m, status, header, s.wrote.Load(), err)
	if errors.Is(err, ports.ErrRecipientOptedOut) {
		// Nothing went out; this receipt is what the sent record keeps.
		return ports.Receipt{ProviderID: optedOutID, SentAt: sentAt}, err
	}
	return ports.Receipt{}, err
}

// sendPrefix starts every placeholder; no account SID starts with it
// (they start with "AC").
const sendPrefix = "send-"

// accountsSegment precedes the account SID in every path of Twilio's
// 2010-04-01 API.
const accountsSegment = "/Accounts/"

// errNoSend is returned, before anything is sent, for a request whose path
// holds no placeholder of a Send in progress.
var errNoSend = errors.New("twilio: request outside a send")

// apiTransport is the transport every send shares: it sends twilio-go's
// requests to the configured API URL with the account SID in place of the
// send's placeholder, under the send's context, and records the HTTP
// status for the send.
type apiTransport struct {
	base   http.RoundTripper
	target *url.URL
	sid    string
	sends  *sync.Map // placeholder -> *sendInProgress
}

func (t *apiTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	before, after, ok := strings.Cut(req.URL.Path, accountsSegment)
	placeholder, rest, _ := strings.Cut(after, "/")
	v, found := t.sends.Load(placeholder)
	if !ok || !found {
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, errNoSend
	}
	s := v.(*sendInProgress)
	// twilio-go builds every request on context.Background(); s.ctx
	// carries the send's deadline (the same as http.Client.Timeout) and the
	// caller's cancellation, so replacing the context loses nothing. The
	// trace tells Send whether the request left whole: net/http (HTTP/1
	// and HTTP/2) reports WroteRequest once headers and body are written
	// and flushed, with the write's error if it failed.
	ctx := httptrace.WithClientTrace(s.ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				s.wrote.Store(true)
			}
		},
	})
	r := req.Clone(ctx)
	r.URL.Scheme = t.target.Scheme
	r.URL.Host = t.target.Host
	r.URL.Path = t.target.Path + before + accountsSegment + t.sid + "/" + rest
	r.URL.RawPath = ""
	r.Host = ""
	resp, err := t.base.RoundTrip(r)
	if resp != nil {
		s.header.Store(&resp.Header)
		s.status.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// Error is a failed send. Its text names the configured API URL, the HTTP
// status and Twilio's error code; it never holds the auth token, and the
// recipient's number appears only masked.
type Error struct {
	APIURL string // the configured base URL the request went to
	To     string // the recipient, masked
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Code is Twilio's error code (21211: invalid number), 0 when none.
	Code int
	// Reason is Twilio's message, or the transport's error, with the
	// recipient masked.
	Reason   string
	MoreInfo string
	// Err is the error twilio-go returned (a *client.TwilioRestError, a
	// *url.Error, ...). Its own text may hold the full number and the
	// default host: print Error's text, not Err's.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "twilio: send to %s via %s: ", e.To, e.APIURL)
	if e.Status != 0 {
		fmt.Fprintf(&b, "status %d: ", e.Status)
	}
	if e.Code != 0 {
		fmt.Fprintf(&b, "code %d: ", e.Code)
	}
	b.WriteString(e.Reason)
	if e.MoreInfo != "" {
		fmt.Fprintf(&b, " (%s)", e.MoreInfo)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// classify turns a failed send into its error. status is the HTTP status
// the transport saw (0: no answer) and header its answer's header (nil:
// none), wrote whether the request was written whole.
func (n *Notifier) classify(ctx context.Context, m ports.Message, status int, header http.Header, wrote bool, err error) error {
	masked := ports.MaskPhone(m.To)
	mask := func(s string) string {
		if m.To == "" {
			return s
		}
		return strings.ReplaceAll(s, m.To, masked)
	}
	e := &Error{APIURL: n.apiURL.String(), To: masked, Status: status, Err: err}

	var tre *client.TwilioRestError
	var ue *url.Error
	switch {
	case errors.As(err, &tre):
		e.Code, e.Reason, e.MoreInfo = tre.Code, mask(tre.Message), tre.MoreInfo
		if e.Status == 0 {
			// No response seen: twilio-go's own check (e.g. 21222) or a body
			// without our transport; trust the status it carries.
			e.Status = tre.Status
		}
	case ctx.Err() != nil:
		// Timeout or caller cancellation: say so plainly. errors.Is(err,
		// context.DeadlineExceeded) still holds through Err.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			e.Reason = fmt.Sprintf("no answer within %v", n.timeout)
		} else {
			e.Reason = "cancelled: " + ctx.Err().Error()
		}
	case errors.As(err, &ue):
		// url.Error names the default host twilio-go built the request for,
		// not where it went: report the operation and the cause only.
		e.Reason = mask(fmt.Sprintf("%s %s: %v", ue.Op, n.redirected(ue.URL), ue.Err))
	default:
		e.Reason = mask(err.Error())
	}

	// Only the transport's status and trace say whether Twilio may have the
	// message; twilio-go's own checks (status 0, nothing written) never do.
	// A 5xx, Twilio's own JSON or anyone else's page, is no refusal: the
	// request reached a server, and Twilio documents that retrying a POST
	// after its 500 may send the message twice (docs/reconciliation.md).
	if (status == 0 && wrote) || status >= 500 {
		return fmt.Errorf("%w: %w", e, ports.ErrOutcomeUnknown)
	}

	switch s := e.Status; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return ports.MarkUnavailable(e)
	case s >= 300 && s < 400:
		// A redirect: TWILIO_API_URL points somewhere else than the API.
		// Every send would fail alike until the operator fixes it.
		return ports.MarkUnavailable(e)
	case senderCodes[e.Code]:
		return ports.MarkUnavailable(e)
	case e.Code == codeQueueFull:
		return ports.RateLimited(e, retryAfter(header, DefaultQueueFullRetryAfter))
	case s == http.StatusTooManyRequests || e.Code == codeTooManyRequests:
		return ports.RateLimited(e, retryAfter(header, DefaultRetryAfter))
	case e.Code == codeOptedOut && tre != nil:
		return ports.MarkPermanent(fmt.Errorf("%w: %w", ports.ErrRecipientOptedOut, e))
	case s == http.StatusRequestTimeout:
		return e
	case s >= 400 && s < 500 && tre != nil:
		// Only Twilio's own JSON error speaks about the message. A 4xx page
		// from a proxy in between (a wrong APIURL) would otherwise
		// dead-letter every SMS.
		return ports.MarkPermanent(e)
	}
	return e
}

// Twilio error codes that a 4xx carries but that say nothing about the
// message: they are about our sender or account, so every SMS would fail
// alike and dead-lettering them all would be wrong. They wait as
// Unavailable until the operator fixes the configuration.
var senderCodes = map[int]bool{
	20404: true, // the account, messaging service or resource is not found
	21212: true, // the From number is invalid
	21606: true, // the From number cannot send SMS
	21659: true, // the From number is not a Twilio number of this account
	21703: true, // the messaging service has no sender for this destination
	21704: true, // the messaging service has no phone number
}

// codeOptedOut: the recipient replied STOP to this sender (21610). It is
// the customer's choice, not a failure: Send wraps ports.ErrRecipientOptedOut
// and returns a receipt whose ProviderID is optedOutID.
const codeOptedOut = 21610

// optedOutID is the ProviderID of an opted-out recipient's receipt:
// ports.ProviderIDOptedOut and Twilio's code, "opted-out:21610".
var optedOutID = ports.ProviderIDOptedOut + ":" + strconv.Itoa(codeOptedOut)

// codeQueueFull: the sender's queue is full (21611). It drains at the
// sender's rate limit, so it is worth retrying, not dead-lettering.
// codeTooManyRequests: the account is over its concurrency on the REST
// API (20429, with HTTP 429). Both are backpressure: see the package
// comment.
const (
	codeQueueFull       = 21611
	codeTooManyRequests = 20429
)

// The waits a rate-limited send's error carries (ports.RetryAfter) when
// Twilio's answer names none in a Retry-After header, and the most it
// carries whatever the header says.
const (
	// DefaultRetryAfter follows a 429: Twilio asks to back off and retry,
	// and its limit is on requests in progress, each of which takes well
	// under a second.
	DefaultRetryAfter = time.Second
	// DefaultQueueFullRetryAfter follows a 21611: the sender's queue holds
	// ten hours of its sends and drains at its rate (one a second for a
	// long code); a retry sooner mostly meets 21611 again.
	DefaultQueueFullRetryAfter = 30 * time.Second
	// MaxRetryAfter bounds what a Retry-After header can ask: a wrong one
	// (from a proxy, say) must not stop a sender for days.
	MaxRetryAfter = 15 * time.Minute
)

// retryAfter reads header's Retry-After, in seconds or as an HTTP date,
// the date counted from the answer's Date (Twilio's clock) or, without
// one, from this host's clock; a date already passed is 0. It returns def
// when the header is absent or unreadable (negative, say), and never more
// than MaxRetryAfter.
func retryAfter(header http.Header, def time.Duration) time.Duration {
	v := strings.TrimSpace(header.Get("Retry-After"))
	if v == "" {
		return def
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return def
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return def
	}
	from := time.Now()
	if date, err := http.ParseTime(header.Get("Date")); err == nil {
		from = date
	}
	return min(max(at.Sub(from), 0), MaxRetryAfter)
}

// redirected returns raw (a URL twilio-go built) as the transport sent it:
// to the configured API URL, with the account SID in place of the
// placeholder.
func (n *Notifier) redirected(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	path := u.Path
	if before, after, ok := strings.Cut(path, accountsSegment); ok {
		_, rest, _ := strings.Cut(after, "/")
		path = before + accountsSegment + n.sid + "/" + rest
	}
	u.Scheme, u.Host, u.Path, u.RawPath = n.apiURL.Scheme, n.apiURL.Host, n.apiURL.Path+path, ""
	return u.String()
}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	cfg.APIURL = cmp.Or(cfg.APIURL, DefaultAPIURL)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	cfg.MaxConns = cmp.Or(cfg.MaxConns, DefaultMaxConns)
	cfg.ListLag = cmp.Or(cfg.ListLag, DefaultListLag)
	cfg.ClockSkew = cmp.Or(cfg.ClockSkew, DefaultClockSkew)
	return cfg
}

// validate reports every missing or invalid field of cfg at once, never
// the auth token, and returns the parsed APIURL.
func (cfg Config) validate() (*url.URL, error) {
	var bad []string
	switch {
	case cfg.AccountSID == "":
		bad = append(bad, "AccountSID is required")
	case !alphanumeric.MatchString(cfg.AccountSID):
		bad = append(bad, "AccountSID must be alphanumeric")
	}
	switch {
	case cfg.AuthToken == "":
		bad = append(bad, "AuthToken is required")
	case !alphanumeric.MatchString(cfg.AuthToken):
		bad = append(bad, "AuthToken must be alphanumeric")
	}
	if cfg.From == "" && cfg.MessagingServiceSID == "" {
		bad = append(bad, "From or MessagingServiceSID is required")
	}
	u, err := url.Parse(cfg.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		bad = append(bad, fmt.Sprintf("APIURL %q must be an http or https URL without query", cfg.APIURL))
	}
	if cfg.Timeout < 0 {
		bad = append(bad, fmt.Sprintf("Timeout %v must be positive", cfg.Timeout))
	}
	if cfg.MaxConns < 0 {
		bad = append(bad, fmt.Sprintf("MaxConns %d must be positive", cfg.MaxConns))
	}
	if cfg.ListLag < 0 {
		bad = append(bad, fmt.Sprintf("ListLag %v must be positive", cfg.ListLag))
	}
	if cfg.ClockSkew < 0 {
		bad = append(bad, fmt.Sprintf("ClockSkew %v must be positive", cfg.ClockSkew))
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("twilio: invalid config: %s", strings.Join(bad, "; "))
	}
	return u, nil
}
