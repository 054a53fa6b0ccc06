// Package smtp is the email ports.Notifier: it sends each message to an SMTP
// relay with github.com/wneessen/go-mail, as multipart/alternative (text and
// HTML), under a Message-ID derived from the idempotency key.
//
// # Error classification
//
// Errors are classified where the SMTP reply is understood, for ports.KindOf:
//   - Permanent: a 5xx reply to RCPT TO or to the message (550 no such user,
//     552/554 rejected content), and a recipient address that does not parse:
//     the same message fails the same way again.
//   - Unavailable: an authentication failure (535 and other non-4xx replies to
//     AUTH, or a server offering neither PLAIN nor LOGIN), a 5xx to MAIL FROM
//     or a 530 "authentication required", a server without STARTTLS under the
//     mandatory policy, and a TLS certificate that does not verify. These are
//     the operator's to fix (credentials, sender, TLS), true of every message
//     alike, so dead-lettering would discard every email until the fix; as
//     Unavailable the records wait, nothing is lost, and the errors say
//     exactly what to fix.
//   - unknown (wrapping ports.ErrOutcomeUnknown): the message was written
//     whole, its terminating "." too, and no reply came (the connection
//     broke, timed out or ctx was done while waiting for it, or the reply
//     did not parse). The server may have accepted it: a resend delivers it
//     twice, under the same Message-ID (see MessageID).
//   - retryable: 4xx replies (451, 421, 454), timeouts, ctx done, connection
//     errors before the end of DATA was written.
//
// # Authentication
//
// When Config.Username is set, the client authenticates with PLAIN if the
// server offers it, else with LOGIN (auto-discovery from the EHLO AUTH list).
// Credentials are only ever sent over TLS, except under TLSPolicy "none",
// which the operator chooses for a relay on a trusted link (a sidecar, a test
// server) and which sends them in clear.
package smtp

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"

	"github.com/harborlight/notification-worker/ports"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultPort      = 587
	DefaultTLSPolicy = "mandatory"
)

// Config configures a Notifier.
type Config struct {
	// Host is the relay's host name (required); Port defaults to DefaultPort.
	Host string
	Port int
	// Username, when set, turns authentication on (see the package comment).
	Username, Password string
	// From is the sender: "Harborlight <noreply@harborlight.example>" or a
	// bare address. Its domain is the right-hand side of every Message-ID.
	From string
	// TLSPolicy is "mandatory" (the default: STARTTLS or no send),
	// "opportunistic" (STARTTLS when offered) or "none" (never).
	TLSPolicy string
	// Timeout, when positive, bounds one send, dial to QUIT. Zero: the
	// caller's context alone bounds it (the worker's domain service puts
	// SEND_TIMEOUT on every send).
	Timeout time.Duration
	// HELO is the name given in EHLO; empty means the machine's host name.
	HELO string
}

var _ ports.Notifier = (*Notifier)(nil)

// Notifier sends email through one SMTP relay, one connection per message. It
// is safe for concurrent use: every Send has its own go-mail client and
// connection, and the Notifier itself is never written after New.
type Notifier struct {
	host       string
	port       int
	user, pass string
	from       *mail.Address
	domain     string // of from, for Message-IDs
	policy     gomail.TLSPolicy
	timeout    time.Duration
	helo       string
	// tlsConfig overrides go-mail's default (ServerName Host, TLS 1.2+);
	// only tests set it, to trust their own certificate.
	tlsConfig *tls.Config
}

// New validates cfg, applies defaults and returns a Notifier. It does not
// connect. Its error names every invalid field at once, never the password.
func New(cfg Config) (*Notifier, error) {
	cfg = cfg.withDefaults()
	v, err := cfg.check()
	if err != nil {
		return nil, err
	}
	from, domain, policy := v.from, v.domain, v.policy
	return &Notifier{
		host:    cfg.Host,
		port:    cfg.Port,
		user:    cfg.Username,
		pass:    cfg.Password,
		from:    from,
		domain:  domain,
		policy:  policy,
		timeout: cfg.Timeout,
		helo:    cfg.HELO,
	}, nil
}

// MessageID returns the Message-ID, angle brackets included, that Send gives
// the message with idempotency key key: "<" + the first 32 hex digits of
// SHA-256(key) + "@" + the From domain + ">". The same key always yields the
// same id, so a duplicate that slips past the idempotency store can still be
// collapsed by the receiving side; the hash keeps the key itself (which holds
// an event id) out of the header. Send uses it for every message with a
// non-empty key, and a random id for a message without one.
func (n *Notifier) MessageID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "<" + hex.EncodeToString(sum[:16]) + "@" + n.domain + ">"
}

// Send sends m to m.To (m.ToName as display name) with subject m.Subject, a
// text/plain part m.Text and a text/html alternative m.HTML (either may be
// empty, not both), and returns the Message-ID (see MessageID) as the
// receipt's ProviderID.
//
// CR and LF in m.Subject and m.ToName are replaced by spaces (stripped, not
// rejected): they can only come from event data or a template, a line break
// in a name or subject means nothing to a reader, and losing the customer's
// notification over it would be worse than flattening it. With them gone no
// header can be injected; go-mail then RFC 2047-encodes what needs it.
//
// Send returns within the configured Timeout or ctx's deadline, or sooner when ctx is done: the
// connection is closed under the SMTP conversation, at whatever step it is.
// Errors hold an *Error (errors.As), classified as the package comment says;
// an unknown outcome wraps ports.ErrOutcomeUnknown around it. Once the server
// has accepted the message (250 after DATA), Send reports success even if the
// QUIT that follows fails: a retry would send the email twice.
func (n *Notifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	masked := ports.MaskEmail(m.To)
	fail := func(op string, code int, err error) *Error {
		return &Error{Op: op, Addr: n.addr(), To: masked, Code: code, Err: err, to: m.To}
	}

	rcpt, err := mail.ParseAddress(m.To)
	if err != nil {
		return ports.Receipt{}, ports.MarkPermanent(fail("parse recipient", 0, err))
	}
	if m.Text == "" && m.HTML == "" {
		return ports.Receipt{}, ports.MarkPermanent(fail("build message", 0, errors.New("neither text nor HTML body")))
	}

	msg, id := n.message(m, rcpt)

	ctx, cancel := context.WithCancel(ctx)
	if n.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, n.timeout)
	}
	// Runs last: closes the connection, if the dial left one open.
	defer cancel()

	var auth *plainOrLogin
	var wc *writeCheckedConn // set by the dial, read after the send
	opts := []gomail.Option{
		gomail.WithPort(n.port),
		gomail.WithTimeout(n.ioTimeout()),
		gomail.WithTLSPolicy(n.policy),
		// go-mail honours ctx only while dialling; closing the connection
		// when ctx is done bounds the whole conversation.
		gomail.WithDialContextFunc(func(dctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			context.AfterFunc(ctx, func() { _ = conn.Close() })
			wc = &writeCheckedConn{Conn: conn}
			return wc, nil
		}),
	}
	if n.helo != "" {
		opts = append(opts, gomail.WithHELO(n.helo))
	}
	if n.tlsConfig != nil {
		opts = append(opts, gomail.WithTLSConfig(n.tlsConfig))
	}
	if n.user != "" {
		auth = &plainOrLogin{user: n.user, pass: n.pass, host: n.host, allowClear: n.policy == gomail.NoTLS}
		opts = append(opts, gomail.WithSMTPAuthCustom(auth))
	}
	c, err := gomail.NewClient(n.host, opts...)
	if err != nil {
		return ports.Receipt{}, fail("configure client", 0, err)
	}

	sc, err := c.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return ports.Receipt{}, n.classifyDial(ctx, auth, fail, err)
	}
	err = c.SendWithSMTPClient(sc, msg)
	sentAt := time.Now()
	// Read before QUIT, which writes on a connection that may be closed.
	written := wc != nil && !wc.failed.Load()
	// Best effort: the outcome is already decided, and cancel closes the
	// connection if QUIT does not.
	_ = c.CloseWithSMTPClient(sc)
	if msg.IsDelivered() {
		// 250 after DATA: a failed RSET afterwards does not un-send it.
		return ports.Receipt{ProviderID: id, SentAt: sentAt}, nil
	}
	if err == nil {
		err = errors.New("server did not confirm the message")
	}
	return ports.Receipt{}, classifySend(ctx, fail, written, err)
}

// writeCheckedConn records whether any write to the connection failed.
// go-mail v0.8.1 ignores the error of writing DATA's terminating "."
// (smtp.DataCloser.Close) and reports only the reply it then fails to read:
// a connection whose every write succeeded has handed the whole message,
// terminator included, to the network.
type writeCheckedConn struct {
	net.Conn
	failed atomic.Bool
}

func (c *writeCheckedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil {
		c.failed.Store(true)
	}
	return n, err
}

func (n *Notifier) addr() string { return net.JoinHostPort(n.host, strconv.Itoa(n.port)) }

// flatten replaces every run of CR and LF with one space.
func flatten(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\r' || r == '\n' }), " ")
}

// classifyDial classifies a failure to connect, say hello, start TLS or
// authenticate.
func (n *Notifier) classifyDial(ctx context.Context, auth *plainOrLogin, fail func(string, int, error) *Error, err error) error {
	if ctx.Err() != nil {
		return timeoutError(ctx, n.timeout, fail("connect", 0, err))
	}
	var tpe *textproto.Error
	code := 0
	if errors.As(err, &tpe) {
		code = tpe.Code
	}
	if auth != nil && auth.started {
		e := fail("authenticate", code, err)
		e.Reason = "authentication failed for user " + strconv.Quote(n.user)
		if code >= 400 && code < 500 {
			return e // 454: the server's trouble, not the credentials
		}
		return ports.MarkUnavailable(e)
	}
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	switch {
	// go-mail v0.8.1 reports a missing STARTTLS as a plain error; the test
	// TLSPolicy/MandatoryAgainstPlainServer catches a change of wording.
	case n.policy == gomail.TLSMandatory && strings.Contains(err.Error(), "does not support STARTTLS"):
		e := fail("starttls", code, err)
		e.Reason = "server does not offer STARTTLS and the TLS policy is mandatory; refusing to send in clear"
		return ports.MarkUnavailable(e)
	case errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne):
		e := fail("starttls", code, err)
		e.Reason = "server's TLS certificate does not verify"
		return ports.MarkUnavailable(e)
	}
	return fail("connect", code, err)
}

// classifySend classifies a failure after the session was set up. written
// says every write to the connection succeeded.
func classifySend(ctx context.Context, fail func(string, int, error) *Error, written bool, err error) error {
	var se *gomail.SendError
	if !errors.As(err, &se) {
		if ctx.Err() != nil {
			return timeoutError(ctx, 0, fail("send", 0, err))
		}
		return fail("send", 0, err)
	}
	e := fail(sendOp(se.Reason), se.ErrorCode(), err)
	e.Enhanced = se.EnhancedStatusCode()
	if se.Reason == gomail.ErrSMTPDataClose && se.ErrorCode() == 0 && written {
		// The end of DATA went out and no SMTP reply came back.
		e.Reason = "no reply after the end of DATA"
		if ctx.Err() != nil {
			_ = timeoutError(ctx, 0, e) // joins ctx.Err() into e.Err, says which in e.Reason
			e.Reason = "no reply after the end of DATA: " + e.Reason
		}
		return fmt.Errorf("%w: %w", e, ports.ErrOutcomeUnknown)
	}
	switch code := se.ErrorCode(); {
	case se.IsTemp(), code < 500:
		// 4xx, or no reply at all (the connection broke): try again.
		if ctx.Err() != nil {
			return timeoutError(ctx, 0, e)
		}
		return e
	case code == 530 || se.Reason == gomail.ErrSMTPMailFrom:
		// The relay wants authentication, or refuses our sender: true of
		// every message until the operator fixes the configuration.
		return ports.MarkUnavailable(e)
	}
	return ports.MarkPermanent(e)
}

func sendOp(r gomail.SendErrReason) string {
	switch r {
	case gomail.ErrSMTPMailFrom:
		return "MAIL FROM"
	case gomail.ErrSMTPRcptTo:
		return "RCPT TO"
	case gomail.ErrSMTPData, gomail.ErrSMTPDataClose, gomail.ErrWriteContent:
		return "DATA"
	}
	return r.String()
}

func timeoutError(ctx context.Context, timeout time.Duration, e *Error) error {
	switch {
	case !errors.Is(ctx.Err(), context.DeadlineExceeded):
		e.Reason = "cancelled"
	case timeout > 0:
		e.Reason = fmt.Sprintf("no answer within %v", timeout)
	default:
		e.Reason = "deadline exceeded"
	}
	e.Err = errors.Join(ctx.Err(), e.Err) // errors.Is(err, context.Canceled) holds
	return e
}

// Error is a failed send. Its text names the relay, the step that failed and
// the SMTP reply; the recipient appears only masked, the password never.
type Error struct {
	Op       string // the step that failed: "connect", "authenticate", "RCPT TO", ...
	Addr     string // the relay, host:port
	To       string // the recipient, masked
	Code     int    // the SMTP reply code, 0 when there was none
	Enhanced string // the enhanced status code ("5.1.1"), when the server sent one
	// Reason, when set, says in plain words what went wrong; else Err's text
	// is shown.
	Reason string
	// Err is the error go-mail returned. Its own text may hold the full
	// recipient address: print Error's text, not Err's.
	Err error
	to  string // unmasked, to mask it out of Err's text
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "smtp: send to %s via %s: %s", e.To, e.Addr, e.Op)
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.Err != nil {
		text := e.Err.Error()
		if e.to != "" {
			text = strings.ReplaceAll(text, e.to, e.To)
		}
		b.WriteString(": " + text)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// errClearAuth and errNoMechanism are returned by plainOrLogin.Start.
var (
	errClearAuth   = errors.New("refusing to send credentials over a connection without TLS (TLS policy is not none)")
	errNoMechanism = errors.New("server offers neither PLAIN nor LOGIN authentication")
)

// plainOrLogin picks PLAIN or LOGIN from the mechanisms the server
// advertises, and records that authentication started so a failure can be
// reported as an authentication failure. One per Send: LOGIN keeps state.
type plainOrLogin struct {
	user, pass, host string
	allowClear       bool
	started          bool
	chosen           gosmtp.Auth
}

func (a *plainOrLogin) Start(s *gosmtp.ServerInfo) (string, []byte, error) {
	a.started = true
	if !s.TLS && !a.allowClear {
		return "", nil, errClearAuth
	}
	// allowUnenc is true because the check above already decided.
	switch {
	case slices.Contains(s.Auth, "PLAIN"):
		a.chosen = gosmtp.PlainAuth("", a.user, a.pass, a.host, true)
	case slices.Contains(s.Auth, "LOGIN"):
		a.chosen = gosmtp.LoginAuth(a.user, a.pass, a.host, true)
	default:
		return "", nil, errNoMechanism
	}
	return a.chosen.Start(s)
}

func (a *plainOrLogin) Next(fromServer []byte, more bool) ([]byte, error) {
	return a.chosen.Next(fromServer, more)
}

// ioTimeout is go-mail's bound on each network operation: the send's own
// Timeout when positive, else go-mail's default. The context's deadline,
// which closes the connection, bounds the whole conversation either way.
func (n *Notifier) ioTimeout() time.Duration {
	if n.timeout > 0 {
		return n.timeout
	}
	return gomail.DefaultTimeout
}

// message builds the email of m to rcpt, and returns it with its
// Message-ID: derived from m's idempotency key, so a receiver can collapse a
// duplicate, or random for a message without one.
func (n *Notifier) message(m ports.Message, rcpt *mail.Address) (*gomail.Msg, string) {
	msg := gomail.NewMsg()
	var id string
	if m.IdempotencyKey != "" {
		id = n.MessageID(m.IdempotencyKey)
		msg.SetMessageIDWithValue(strings.Trim(id, "<>"))
	} else {
		// One id for every keyless message would let a receiver collapse
		// unrelated mail: a random id collapses nothing.
		msg.SetMessageID()
		id = msg.GetMessageID()
	}
	msg.FromMailAddress(n.from)
	msg.ToMailAddress(&mail.Address{Name: flatten(m.ToName), Address: rcpt.Address})
	msg.Subject(flatten(m.Subject))
	msg.SetDate()
	switch {
	case m.Text != "" && m.HTML != "":
		msg.SetBodyString(gomail.TypeTextPlain, m.Text)
		msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	case m.Text != "":
		msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	default:
		msg.SetBodyString(gomail.TypeTextHTML, m.HTML)
	}
	return msg, id
}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	cfg.Port = cmp.Or(cfg.Port, DefaultPort)
	cfg.TLSPolicy = cmp.Or(cfg.TLSPolicy, DefaultTLSPolicy)
	return cfg
}

// checked is what check parses out of a valid Config.
type checked struct {
	from   *mail.Address
	domain string
	policy gomail.TLSPolicy
}

// check reports every invalid field of cfg at once, never the password,
// and returns what it parsed.
func (cfg Config) check() (checked, error) {
	var bad []string
	if cfg.Host == "" {
		bad = append(bad, "Host is required")
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		bad = append(bad, fmt.Sprintf("Port %d must be 1-65535", cfg.Port))
	}
	if cfg.Username == "" && cfg.Password != "" {
		bad = append(bad, "Password is set but Username is empty")
	}
	from, err := mail.ParseAddress(cfg.From)
	var domain string
	if err == nil {
		domain = from.Address[strings.LastIndexByte(from.Address, '@')+1:]
	}
	if err != nil || domain == "" {
		bad = append(bad, fmt.Sprintf("From %q must be an email address, optionally with a name", cfg.From))
	}
	policies := map[string]gomail.TLSPolicy{
		"mandatory":     gomail.TLSMandatory,
		"opportunistic": gomail.TLSOpportunistic,
		"none":          gomail.NoTLS,
	}
	policy, ok := policies[cfg.TLSPolicy]
	if !ok {
		bad = append(bad, fmt.Sprintf("TLSPolicy %q must be mandatory, opportunistic or none", cfg.TLSPolicy))
	}
	if cfg.Timeout < 0 {
		bad = append(bad, fmt.Sprintf("Timeout %v must be positive", cfg.Timeout))
	}
	if strings.ContainsAny(cfg.HELO, "\r\n ") {
		bad = append(bad, fmt.Sprintf("HELO %q must be one host name", cfg.HELO))
	}
	if len(bad) > 0 {
		return checked{}, fmt.Errorf("smtp: invalid config: %s", strings.Join(bad, "; "))
	}
	return checked{from: from, domain: domain, policy: policy}, nil
}
