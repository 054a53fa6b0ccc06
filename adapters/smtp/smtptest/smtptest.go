// Package smtptest runs a real SMTP server for tests: emersion/go-smtp, in
// process, on 127.0.0.1, scripted to accept, reject, delay or drop, or to
// require authentication, and keeping every message exactly as DATA
// delivered it. It is the one SMTP server of this module's tests.
package smtptest

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/mail"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	gosmtp "github.com/emersion/go-smtp"
)

// Script says how the test server behaves. The zero Script accepts every
// message without authentication and without TLS. StartServer reads it once;
// its funcs are then called from the server's sessions, several at a time,
// so each must be safe for concurrent use and must not call tb.Fatal.
type Script struct {
	// Users, when non-nil, makes the server offer AUTH with Mechs (default
	// PLAIN) and refuse MAIL FROM with 530 until a user in it authenticated.
	Users map[string]string
	Mechs []string
	// RcptErr and DataErr, when set, are the replies to RCPT TO and to the
	// end of DATA.
	RcptErr, DataErr error
	// DataReply, when set, is asked for the reply to the end of DATA of the
	// n-th message the server was given (from 1): nil accepts it.
	DataReply func(n int) error
	// TLS, when set, makes the server offer STARTTLS with this config.
	TLS *tls.Config
	// DataFate, when set, is asked what becomes of the n-th message the
	// server was given (from 1) once DATA ended, before any reply; nil, or
	// Reply, answers as DataErr and DataReply say.
	DataFate func(n int) Fate
	// DropRcpt closes the connection at RCPT TO, without a reply.
	DropRcpt bool
	// RcptReply, when set, is asked for the reply to the n-th RCPT TO for
	// rcpt the server saw (from 1), unless DropRcpt or RcptErr answered
	// first: nil accepts rcpt.
	RcptReply func(rcpt string, n int) error
	// ReplyDelay, when set, is how long the server waits before it says it
	// accepted the n-th message it was given: the message is kept the
	// moment DATA ends, so a client that hangs up in the meantime never
	// learns the message went out. Rejections are not delayed.
	ReplyDelay func(n int) time.Duration
}

// Fate is what the server does with a message once its DATA ended.
type Fate int

const (
	// Reply answers as Script.DataErr and Script.DataReply say.
	Reply Fate = iota
	// KeepAndHang keeps the message, then says nothing until the client
	// hangs up (its timeout): the server took it, the reply never comes.
	KeepAndHang
	// KeepAndDrop keeps the message and closes the connection without a
	// reply: the server took it, the reply was lost.
	KeepAndDrop
	// Drop closes the connection without a reply and keeps nothing.
	Drop
)

// Delivery is one message the server accepted.
type Delivery struct {
	From string
	To   []string // the recipients the server accepted, in order
	Data []byte
	TLS  bool // the session had switched to TLS
}

// MessageID returns the Message-ID header of the message, "" when Data has
// none or is not a message.
func (d Delivery) MessageID() string {
	msg, err := mail.ReadMessage(bytes.NewReader(d.Data))
	if err != nil {
		return ""
	}
	return msg.Header.Get("Message-Id")
}

// Server is a running test SMTP server. Host and Port are set once
// StartServer returns and never change; its methods are safe for
// concurrent use, also while the server is handling sessions.
type Server struct {
	Host string
	Port int

	script Script
	mu     sync.Mutex
	got    []Delivery
	auths  int            // AUTH exchanges started, successful or not
	mails  int            // MAIL FROM commands seen
	datas  int            // DATA commands that ended
	rcpts  map[string]int // RCPT TO commands seen, by recipient
}

// StartServer starts a server following script on 127.0.0.1 and stops it when
// the test ends.
func StartServer(tb testing.TB, script Script) *Server {
	tb.Helper()
	if script.Users != nil && script.Mechs == nil {
		script.Mechs = []string{sasl.Plain}
	}
	s := &Server{script: script, rcpts: map[string]int{}}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(c *gosmtp.Conn) (gosmtp.Session, error) {
		return &session{s: s, conn: c}, nil
	}))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true // loopback only; lets the tests exercise TLS policy "none"
	srv.TLSConfig = script.TLS
	srv.ReadTimeout = 10 * time.Second
	srv.WriteTimeout = 10 * time.Second
	// The faults scripted here (hang-ups, dropped connections) make go-smtp
	// log on purpose; what a test checks is what the client saw.
	srv.ErrorLog = log.New(io.Discard, "", 0)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	tb.Cleanup(func() {
		_ = srv.Close()
		// Serve may not have registered l yet when the test made no
		// connection; then only closing it ourselves ends Serve.
		_ = l.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			tb.Error("SMTP test server did not stop within 5s")
		}
	})
	addr := l.Addr().(*net.TCPAddr)
	s.Host, s.Port = addr.IP.String(), addr.Port
	return s
}

// Deliveries returns the messages accepted so far.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.got...)
}

// Only returns the one message the server accepted, failing otherwise.
func (s *Server) Only(tb testing.TB) Delivery {
	tb.Helper()
	got := s.Deliveries()
	if len(got) != 1 {
		tb.Fatalf("server accepted %d messages, want 1", len(got))
	}
	return got[0]
}

// Counts returns how many AUTH exchanges and MAIL FROM commands the server saw.
func (s *Server) Counts() (auths, mails int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.auths, s.mails
}

// Attempts returns how many RCPT TO commands for rcpt the server saw,
// whatever it answered.
func (s *Server) Attempts(rcpt string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rcpts[rcpt]
}

// Delivered returns how many of the messages accepted so far went to rcpt.
func (s *Server) Delivered(rcpt string) int {
	return len(s.MessageIDs(rcpt))
}

// MessageIDs returns the Message-ID of every message accepted so far for
// rcpt, in the order the server accepted them ("" for one without).
func (s *Server) MessageIDs(rcpt string) []string {
	var ids []string
	for _, d := range s.Deliveries() {
		if slices.Contains(d.To, rcpt) {
			ids = append(ids, d.MessageID())
		}
	}
	return ids
}

type session struct {
	s      *Server
	conn   *gosmtp.Conn
	authed bool
	from   string
	to     []string
}

func (ss *session) AuthMechanisms() []string {
	if ss.s.script.Users == nil {
		return nil
	}
	return ss.s.script.Mechs
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	ss.s.mu.Lock()
	ss.s.auths++
	ss.s.mu.Unlock()
	check := func(user, pass string) error {
		if want, ok := ss.s.script.Users[user]; ok && want == pass {
			ss.authed = true
			return nil
		}
		return gosmtp.ErrAuthFailed
	}
	switch mech {
	case sasl.Plain:
		return sasl.NewPlainServer(func(_, user, pass string) error { return check(user, pass) }), nil
	case sasl.Login:
		return &loginServer{check: check}, nil
	}
	return nil, gosmtp.ErrAuthUnknownMechanism
}

func (ss *session) Mail(from string, _ *gosmtp.MailOptions) error {
	ss.s.mu.Lock()
	ss.s.mails++
	ss.s.mu.Unlock()
	if ss.s.script.Users != nil && !ss.authed {
		return &gosmtp.SMTPError{Code: 530, EnhancedCode: gosmtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	ss.s.mu.Lock()
	ss.s.rcpts[to]++
	n := ss.s.rcpts[to]
	ss.s.mu.Unlock()
	if ss.s.script.DropRcpt {
		_ = ss.conn.Conn().Close()
		return errors.New("dropped")
	}
	if ss.s.script.RcptErr != nil {
		return ss.s.script.RcptErr
	}
	if reply := ss.s.script.RcptReply; reply != nil {
		if err := reply(to, n); err != nil {
			return err
		}
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if ss.s.script.DataErr != nil {
		return ss.s.script.DataErr
	}
	ss.s.mu.Lock()
	ss.s.datas++
	n := ss.s.datas
	ss.s.mu.Unlock()
	fate := Reply
	if f := ss.s.script.DataFate; f != nil {
		fate = f(n)
	}
	switch fate {
	case KeepAndHang, KeepAndDrop:
		ss.keep(data)
		if fate == KeepAndHang {
			// Nothing else reads the connection while Data runs: this
			// read ends when the client hangs up (or after a minute).
			c := ss.conn.Conn()
			_ = c.SetReadDeadline(time.Now().Add(time.Minute))
			_, _ = c.Read(make([]byte, 1))
		}
		_ = ss.conn.Conn().Close()
		return errors.New("dropped")
	case Drop:
		_ = ss.conn.Conn().Close()
		return errors.New("dropped")
	}
	if reply := ss.s.script.DataReply; reply != nil {
		if err := reply(n); err != nil {
			return err
		}
	}
	ss.keep(data)
	if delay := ss.s.script.ReplyDelay; delay != nil {
		time.Sleep(delay(n))
	}
	return nil
}

// keep stores data as a message the server accepted.
func (ss *session) keep(data []byte) {
	_, isTLS := ss.conn.TLSConnectionState()
	ss.s.mu.Lock()
	ss.s.got = append(ss.s.got, Delivery{From: ss.from, To: ss.to, Data: data, TLS: isTLS})
	ss.s.mu.Unlock()
}

func (ss *session) Reset()        { ss.from, ss.to = "", nil }
func (ss *session) Logout() error { return nil }

// loginServer is the server side of AUTH LOGIN, which go-sasl only has a
// client for.
type loginServer struct {
	check      func(user, pass string) error
	step       int
	user, pass string
}

func (l *loginServer) Next(resp []byte) ([]byte, bool, error) {
	l.step++
	switch l.step {
	case 1:
		if resp != nil { // initial response carries the user name
			l.user = string(resp)
			l.step++
			return []byte("Password:"), false, nil
		}
		return []byte("Username:"), false, nil
	case 2:
		l.user = string(resp)
		return []byte("Password:"), false, nil
	case 3:
		l.pass = string(resp)
		return nil, true, l.check(l.user, l.pass)
	}
	return nil, false, errors.New("unexpected LOGIN step " + strconv.Itoa(l.step))
}

// SilentListener accepts connections on 127.0.0.1 and never says a word, like
// a relay that hangs before its greeting. Connections close when the test ends.
func SilentListener(tb testing.TB) (host string, port int) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		_ = l.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			tb.Error("silent listener did not stop within 5s")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	a := l.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}
