package smtp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/internal/testcert"
	"github.com/harborlight/notification-worker/ports"
)

const testFrom = "Harborlight <noreply@harborlight.example>"

func testMessage(key string) ports.Message {
	return ports.Message{
		IdempotencyKey: key,
		EventID:        "7f1c9a52-3d4e-4b8a-9f0e-2c6d1e8b5a43",
		Channel:        ports.ChannelEmail,
		To:             "ada@example.com",
		ToName:         `Zoë "Ada" Lovelace`,
		Subject:        "Your parcel is out for delivery — ETA 14:00-16:00",
		Text:           "Hello Ada,\nyour parcel SHP-100234 arrives between 14:00 and 16:00.\n",
		HTML:           "<p>Hello Ada,</p><p>your parcel <b>SHP-100234</b> arrives between 14:00 and 16:00.</p>",
	}
}

func TestNew(t *testing.T) {
	t.Run("ErrEveryBadFieldNamed", func(t *testing.T) {
		_, err := smtp.New(smtp.Config{Port: 70000, From: "not an address", TLSPolicy: "sometimes", Password: "hunter2"})
		if err == nil {
			t.Fatal("New = nil error")
		}
		for _, want := range []string{"Host", "Port", "From", "TLSPolicy", "Username"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error %q contains the password", err)
		}
	})
	t.Run("OKBareFrom", func(t *testing.T) {
		n := MustNew(t, smtp.Config{Host: "mail.example", From: "noreply@harborlight.example"})
		if got := n.MessageID("k"); !strings.HasSuffix(got, "@harborlight.example>") {
			t.Errorf("MessageID = %q, want the From domain", got)
		}
	})
}

func TestSend(t *testing.T) {
	t.Run("DeliveredAsReceived", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		n := MustNew(t, plainConfig(srv))
		m := testMessage("7f1c9a52:email")

		r, err := n.Send(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		d := srv.Only(t)
		if d.From != "noreply@harborlight.example" || len(d.To) != 1 || d.To[0] != "ada@example.com" {
			t.Errorf("envelope = %q -> %q", d.From, d.To)
		}

		msg := MustParse(t, d.Data)
		from, err := msg.Header.AddressList("From")
		if err != nil || len(from) != 1 || from[0].Name != "Harborlight" || from[0].Address != "noreply@harborlight.example" {
			t.Errorf("From = %v (%v)", from, err)
		}
		to, err := msg.Header.AddressList("To")
		if err != nil || len(to) != 1 || to[0].Name != m.ToName || to[0].Address != m.To {
			t.Errorf("To = %v (%v), want %q <%s>", to, err, m.ToName, m.To)
		}
		if subj := DecodedHeader(t, msg, "Subject"); subj != m.Subject {
			t.Errorf("Subject = %q, want %q", subj, m.Subject)
		}
		if raw := msg.Header.Get("Subject"); !isASCII(raw) {
			t.Errorf("raw Subject %q is not RFC 2047 encoded", raw)
		}
		if id := msg.Header.Get("Message-Id"); id != n.MessageID(m.IdempotencyKey) || r.ProviderID != id {
			t.Errorf("Message-ID = %q, ProviderID = %q, want both %q", id, r.ProviderID, n.MessageID(m.IdempotencyKey))
		}

		parts := Alternatives(t, msg)
		if parts["text/plain"] != m.Text {
			t.Errorf("text part = %q, want %q", parts["text/plain"], m.Text)
		}
		if parts["text/html"] != m.HTML {
			t.Errorf("html part = %q, want %q", parts["text/html"], m.HTML)
		}
	})

	t.Run("MessageIDDeterministic", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		n := MustNew(t, plainConfig(srv))
		for _, key := range []string{"evt-1:email", "evt-1:email", "evt-2:email"} {
			MustSend(t, n, testMessage(key))
		}
		var ids []string
		for _, d := range srv.Deliveries() {
			ids = append(ids, MustParse(t, d.Data).Header.Get("Message-Id"))
		}
		if len(ids) != 3 || ids[0] != ids[1] || ids[0] == ids[2] {
			t.Errorf("Message-IDs = %q, want the same for the same key and different for another", ids)
		}
		if strings.Contains(ids[0], "evt-1") || !strings.HasSuffix(ids[0], "@harborlight.example>") {
			t.Errorf("Message-ID %q should hide the key and carry the From domain", ids[0])
		}
		// Another Notifier, as after a restart: still the same id.
		if other := MustNew(t, plainConfig(srv)).MessageID("evt-1:email"); other != ids[0] {
			t.Errorf("MessageID after restart = %q, want %q", other, ids[0])
		}
	})

	t.Run("CRLFInSubjectAndNameCannotInjectHeaders", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		n := MustNew(t, plainConfig(srv))
		m := testMessage("k")
		m.Subject = "Out for delivery\r\nBcc: evil@attacker.example"
		m.ToName = "Ada\r\nBcc: evil2@attacker.example\n"
		MustSend(t, n, m)

		d := srv.Only(t)
		if len(d.To) != 1 || d.To[0] != "ada@example.com" {
			t.Errorf("envelope recipients = %q, want only ada", d.To)
		}
		msg := MustParse(t, d.Data)
		if bcc := msg.Header.Get("Bcc"); bcc != "" {
			t.Errorf("injected Bcc header %q", bcc)
		}
		if subj := DecodedHeader(t, msg, "Subject"); subj != "Out for delivery Bcc: evil@attacker.example" {
			t.Errorf("Subject = %q, want CRLF replaced by a space", subj)
		}
		to, err := msg.Header.AddressList("To")
		if err != nil || len(to) != 1 || to[0].Name != "Ada Bcc: evil2@attacker.example" || to[0].Address != "ada@example.com" {
			t.Errorf("To = %v (%v)", to, err)
		}
	})

	t.Run("NoKeyGetsAUniqueMessageID", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		n := MustNew(t, plainConfig(srv))
		r1 := MustSend(t, n, testMessage(""))
		r2 := MustSend(t, n, testMessage(""))
		if r1.ProviderID == "" || r1.ProviderID == r2.ProviderID {
			t.Errorf("ProviderIDs %q and %q: keyless messages must not share an id", r1.ProviderID, r2.ProviderID)
		}
	})

	t.Run("TextOnly", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		m := testMessage("k")
		m.HTML = ""
		MustSend(t, MustNew(t, plainConfig(srv)), m)
		msg := MustParse(t, srv.Only(t).Data)
		if mt, _, _ := mime.ParseMediaType(msg.Header.Get("Content-Type")); mt != "text/plain" {
			t.Errorf("Content-Type = %q, want text/plain", mt)
		}
	})

	t.Run("ErrInvalidRecipientIsPermanent", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		m := testMessage("k")
		m.To = "ada@@example"
		_, err := MustNew(t, plainConfig(srv)).Send(context.Background(), m)
		if ports.KindOf(err) != ports.Permanent {
			t.Errorf("err = %v (kind %v), want permanent", err, ports.KindOf(err))
		}
		if _, mails := srv.Counts(); mails != 0 {
			t.Errorf("server saw %d MAIL FROM for an address that does not parse", mails)
		}
	})
}

// TestSendConcurrent proves concurrent sends share nothing that races (run
// with -race) and each message arrives whole.
func TestSendConcurrent(t *testing.T) {
	srv := smtptest.StartServer(t, smtptest.Script{Users: map[string]string{"mailer": "pw"}, Mechs: []string{"LOGIN"}})
	cfg := plainConfig(srv)
	cfg.Username, cfg.Password = "mailer", "pw"
	n := MustNew(t, cfg)
	const senders = 8
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			if _, err := n.Send(context.Background(), testMessage(fmt.Sprint("evt-", i))); err != nil {
				t.Errorf("send %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	ids := map[string]bool{}
	for _, d := range srv.Deliveries() {
		ids[MustParse(t, d.Data).Header.Get("Message-Id")] = true
	}
	if len(ids) != senders {
		t.Errorf("server got %d distinct messages, want %d", len(ids), senders)
	}
}

func TestSendRejected(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   smtptest.Script
		kind     ports.Kind
		code     int
		enhanced string
	}{
		{"Rcpt550IsPermanent", smtptest.Script{RcptErr: smtpErr(550, 5, 1, 1, "No such user ada@example.com")}, ports.Permanent, 550, "5.1.1"},
		{"Rcpt451IsRetryable", smtptest.Script{RcptErr: smtpErr(451, 4, 3, 0, "Try again later")}, ports.Retryable, 451, "4.3.0"},
		{"Data554IsPermanent", smtptest.Script{DataErr: smtpErr(554, 5, 6, 0, "Message rejected")}, ports.Permanent, 554, "5.6.0"},
		{"Data451IsRetryable", smtptest.Script{DataErr: smtpErr(451, 4, 7, 1, "Greylisted")}, ports.Retryable, 451, "4.7.1"},
		{"AuthRequired530IsUnavailable", smtptest.Script{Users: map[string]string{"mailer": "pw"}}, ports.Unavailable, 530, "5.7.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := smtptest.StartServer(t, tc.script)
			_, err := MustNew(t, plainConfig(srv)).Send(context.Background(), testMessage("k"))
			if err == nil {
				t.Fatal("Send = nil error")
			}
			if got := ports.KindOf(err); got != tc.kind {
				t.Errorf("KindOf(%v) = %v, want %v", err, got, tc.kind)
			}
			var e *smtp.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Enhanced != tc.enhanced {
				t.Errorf("err = %#v, want *smtp.Error code %d %s", err, tc.code, tc.enhanced)
			}
			AssertMasked(t, err)
			if got := srv.Deliveries(); len(got) != 0 {
				t.Errorf("server kept %d messages", len(got))
			}
		})
	}
}

func TestAuth(t *testing.T) {
	users := map[string]string{"mailer": "correct-horse"}

	t.Run("PLAIN", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{Users: users, Mechs: []string{"PLAIN"}})
		cfg := plainConfig(srv)
		cfg.Username, cfg.Password = "mailer", "correct-horse"
		MustSend(t, MustNew(t, cfg), testMessage("k"))
		srv.Only(t)
	})

	t.Run("LOGINWhenNoPLAIN", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{Users: users, Mechs: []string{"CRAM-MD5", "LOGIN"}})
		cfg := plainConfig(srv)
		cfg.Username, cfg.Password = "mailer", "correct-horse"
		MustSend(t, MustNew(t, cfg), testMessage("k"))
		srv.Only(t)
	})

	t.Run("ErrWrongPasswordSaysAuthenticationFailed", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{Users: users})
		cfg := plainConfig(srv)
		cfg.Username, cfg.Password = "mailer", "wrong-password"
		_, err := MustNew(t, cfg).Send(context.Background(), testMessage("k"))
		if err == nil {
			t.Fatal("Send with a wrong password = nil error")
		}
		if !strings.Contains(err.Error(), `authentication failed for user "mailer"`) {
			t.Errorf("error %q does not say authentication failed for user mailer", err)
		}
		if ports.KindOf(err) != ports.Unavailable {
			t.Errorf("kind = %v, want unavailable: wrong credentials must not dead-letter every email", ports.KindOf(err))
		}
		if strings.Contains(err.Error(), "wrong-password") {
			t.Errorf("error %q contains the password", err)
		}
		var e *smtp.Error
		if !errors.As(err, &e) || e.Code != 535 {
			t.Errorf("err = %#v, want code 535", err)
		}
		AssertMasked(t, err)
		if len(srv.Deliveries()) != 0 {
			t.Error("server accepted a message without authentication")
		}
	})

	t.Run("ErrNoUsableMechanismIsUnavailable", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{Users: users, Mechs: []string{"CRAM-MD5"}})
		cfg := plainConfig(srv)
		cfg.Username, cfg.Password = "mailer", "correct-horse"
		_, err := MustNew(t, cfg).Send(context.Background(), testMessage("k"))
		if ports.KindOf(err) != ports.Unavailable || !strings.Contains(err.Error(), "neither PLAIN nor LOGIN") {
			t.Errorf("err = %v (kind %v), want unavailable naming PLAIN and LOGIN", err, ports.KindOf(err))
		}
	})

	t.Run("ErrNoCredentialsInClearUnlessPolicyNone", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{Users: users})
		cfg := plainConfig(srv)
		cfg.TLSPolicy = "opportunistic" // the server has no STARTTLS: the session stays in clear
		cfg.Username, cfg.Password = "mailer", "correct-horse"
		_, err := MustNew(t, cfg).Send(context.Background(), testMessage("k"))
		if ports.KindOf(err) != ports.Unavailable || !strings.Contains(err.Error(), "without TLS") {
			t.Errorf("err = %v (kind %v), want unavailable refusing clear-text credentials", err, ports.KindOf(err))
		}
		if auths, _ := srv.Counts(); auths != 0 {
			t.Errorf("server saw %d AUTH exchanges, want none: credentials were sent in clear", auths)
		}
	})
}

func TestTLSPolicy(t *testing.T) {
	t.Run("MandatoryAgainstPlainServer", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		cfg := plainConfig(srv)
		cfg.TLSPolicy = "mandatory"
		_, err := MustNew(t, cfg).Send(context.Background(), testMessage("k"))
		if err == nil {
			t.Fatal("mandatory TLS against a server without STARTTLS sent the message")
		}
		if !strings.Contains(err.Error(), "does not offer STARTTLS and the TLS policy is mandatory") {
			t.Errorf("error %q does not say STARTTLS is missing", err)
		}
		if ports.KindOf(err) != ports.Unavailable {
			t.Errorf("kind = %v, want unavailable", ports.KindOf(err))
		}
		if _, mails := srv.Counts(); mails != 0 || len(srv.Deliveries()) != 0 {
			t.Errorf("server saw %d MAIL FROM: the message went out in clear", mails)
		}
	})

	t.Run("NoneAgainstPlainServer", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		MustSend(t, MustNew(t, plainConfig(srv)), testMessage("k"))
		if srv.Only(t).TLS {
			t.Error("session used TLS under policy none")
		}
	})

	t.Run("OpportunisticAgainstPlainServer", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{})
		cfg := plainConfig(srv)
		cfg.TLSPolicy = "opportunistic"
		MustSend(t, MustNew(t, cfg), testMessage("k"))
		srv.Only(t)
	})

	t.Run("MandatoryWithSTARTTLSAndAuth", func(t *testing.T) {
		serverTLS, clientTLS := testcert.New(t)
		srv := smtptest.StartServer(t, smtptest.Script{TLS: serverTLS, Users: map[string]string{"mailer": "pw"}})
		cfg := plainConfig(srv)
		cfg.TLSPolicy = "mandatory"
		cfg.Username, cfg.Password = "mailer", "pw"
		n := MustNew(t, cfg)
		smtp.SetTLSConfig(n, clientTLS)
		MustSend(t, n, testMessage("k"))
		if !srv.Only(t).TLS {
			t.Error("message was delivered outside TLS under policy mandatory")
		}
	})

	t.Run("ErrUntrustedCertificateIsUnavailable", func(t *testing.T) {
		serverTLS, _ := testcert.New(t)
		srv := smtptest.StartServer(t, smtptest.Script{TLS: serverTLS})
		cfg := plainConfig(srv)
		cfg.TLSPolicy = "mandatory"
		_, err := MustNew(t, cfg).Send(context.Background(), testMessage("k"))
		if ports.KindOf(err) != ports.Unavailable || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("err = %v (kind %v), want unavailable about the certificate", err, ports.KindOf(err))
		}
		if len(srv.Deliveries()) != 0 {
			t.Error("message delivered over an unverified connection")
		}
	})
}

func TestSendBounded(t *testing.T) {
	t.Run("ConnectionRefusedIsRetryable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		n := MustNew(t, smtp.Config{Host: "127.0.0.1", Port: port, From: testFrom, TLSPolicy: "none"})
		_, err = n.Send(context.Background(), testMessage("k"))
		if err == nil || ports.KindOf(err) != ports.Retryable {
			t.Errorf("err = %v, want retryable", err)
		}
		if err != nil && !strings.Contains(err.Error(), "127.0.0.1:"+strconv.Itoa(port)) {
			t.Errorf("error %q does not name the relay", err)
		}
	})

	t.Run("SilentServerTimesOut", func(t *testing.T) {
		host, port := smtptest.SilentListener(t)
		const timeout = 300 * time.Millisecond
		n := MustNew(t, smtp.Config{Host: host, Port: port, From: testFrom, TLSPolicy: "none", Timeout: timeout})
		start := time.Now()
		_, err := n.Send(context.Background(), testMessage("k"))
		if elapsed := time.Since(start); elapsed > timeout+time.Second {
			t.Errorf("Send took %v, want about %v", elapsed, timeout)
		}
		if err == nil || ports.KindOf(err) != ports.Retryable {
			t.Errorf("err = %v, want retryable", err)
		}
	})

	t.Run("ContextCancelledStopsWaiting", func(t *testing.T) {
		host, port := smtptest.SilentListener(t)
		n := MustNew(t, smtp.Config{Host: host, Port: port, From: testFrom, TLSPolicy: "none", Timeout: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := n.Send(ctx, testMessage("k"))
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Errorf("Send took %v after a 200ms ctx (Timeout 1m)", elapsed)
		}
		if !errors.Is(err, context.DeadlineExceeded) || ports.KindOf(err) != ports.Retryable {
			t.Errorf("err = %v, want retryable deadline exceeded", err)
		}
	})
}

func smtpErr(code, a, b, c int, msg string) error {
	return &gosmtp.SMTPError{Code: code, EnhancedCode: gosmtp.EnhancedCode{a, b, c}, Message: msg}
}

func plainConfig(srv *smtptest.Server) smtp.Config {
	return smtp.Config{Host: srv.Host, Port: srv.Port, From: testFrom, TLSPolicy: "none", Timeout: 10 * time.Second, HELO: "worker.test"}
}

// MustNew returns a Notifier for cfg, failing the test on error.
func MustNew(tb testing.TB, cfg smtp.Config) *smtp.Notifier {
	tb.Helper()
	n, err := smtp.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// MustSend sends m, failing the test on error.
func MustSend(tb testing.TB, n *smtp.Notifier, m ports.Message) ports.Receipt {
	tb.Helper()
	r, err := n.Send(context.Background(), m)
	if err != nil {
		tb.Fatalf("send %s: %v", m.IdempotencyKey, err)
	}
	return r
}

// MustParse parses raw DATA as a message.
func MustParse(tb testing.TB, data []byte) *mail.Message {
	tb.Helper()
	msg, err := mail.ReadMessage(strings.NewReader(string(data)))
	if err != nil {
		tb.Fatalf("parse message: %v\n%s", err, data)
	}
	return msg
}

// DecodedHeader returns header name with RFC 2047 words decoded.
func DecodedHeader(tb testing.TB, msg *mail.Message, name string) string {
	tb.Helper()
	s, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get(name))
	if err != nil {
		tb.Fatalf("decode %s: %v", name, err)
	}
	return s
}

// Alternatives returns the parts of a multipart/alternative message by
// media type, transfer encoding undone.
func Alternatives(tb testing.TB, msg *mail.Message) map[string]string {
	tb.Helper()
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		tb.Fatalf("Content-Type = %q (%v), want multipart/alternative", msg.Header.Get("Content-Type"), err)
	}
	parts := map[string]string{}
	r := multipart.NewReader(msg.Body, params["boundary"])
	for range 10 { // an alternative has 2 parts; bound the loop anyway
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return parts
		}
		if err != nil {
			tb.Fatal(err)
		}
		pt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		// Mail lines end in CRLF on the wire; the parts were written with LF.
		parts[pt] = strings.ReplaceAll(bodyOf(tb, p), "\r\n", "\n")
	}
	tb.Fatal("more than 10 parts")
	return nil
}

// AssertMasked checks the error names the recipient only masked.
func AssertMasked(tb testing.TB, err error) {
	tb.Helper()
	if strings.Contains(err.Error(), "ada@example.com") {
		tb.Errorf("error %q contains the full address", err)
	}
	if !strings.Contains(err.Error(), "a***@example.com") {
		tb.Errorf("error %q does not name the masked recipient", err)
	}
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// TestSendOutcomeUnknown: once the end of DATA was written, a reply that
// never comes leaves the outcome unknown; a connection lost before that is
// retryable, as before.
func TestSendOutcomeUnknown(t *testing.T) {
	const timeout = 300 * time.Millisecond
	assertUnknown := func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, ports.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want an unknown outcome", err)
		}
		var e *smtp.Error
		if !errors.As(err, &e) || e.Op != "DATA" || e.Code != 0 {
			t.Errorf("err = %#v, want an *smtp.Error at DATA without a reply code", err)
		}
		if strings.Contains(err.Error(), "ada@example.com") {
			t.Errorf("error %q holds the full recipient", err)
		}
	}

	t.Run("ConnectionClosedAfterDataIsUnknown", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{DataFate: func(int) smtptest.Fate { return smtptest.KeepAndDrop }})
		n := MustNew(t, plainConfig(srv))
		m := testMessage("k-drop")
		_, err := n.Send(context.Background(), m)
		assertUnknown(t, err)
		// The server did take it, under the id a resend would carry too.
		got := srv.Only(t)
		if !bytes.Contains(got.Data, []byte(n.MessageID(m.IdempotencyKey))) {
			t.Errorf("kept message does not carry Message-ID %s", n.MessageID(m.IdempotencyKey))
		}
	})

	t.Run("NoReplyAfterDataTimesOutUnknown", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{DataFate: func(int) smtptest.Fate { return smtptest.KeepAndHang }})
		cfg := plainConfig(srv)
		cfg.Timeout = timeout
		n := MustNew(t, cfg)
		start := time.Now()
		_, err := n.Send(context.Background(), testMessage("k-hang"))
		if el := time.Since(start); el > timeout+time.Second {
			t.Errorf("Send took %v, want about %v", el, timeout)
		}
		assertUnknown(t, err)
		if len(srv.Deliveries()) != 1 {
			t.Errorf("server kept %d messages, want 1", len(srv.Deliveries()))
		}
	})

	t.Run("ContextDoneAfterDataIsUnknown", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{DataFate: func(int) smtptest.Fate { return smtptest.KeepAndHang }})
		n := MustNew(t, plainConfig(srv)) // Timeout 10s: ctx ends first
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := n.Send(ctx, testMessage("k-ctx"))
		assertUnknown(t, err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded reachable", err)
		}
	})

	t.Run("RejectedAfterDataIsNotUnknown", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{DataErr: smtpErr(451, 4, 3, 0, "try later")})
		n := MustNew(t, plainConfig(srv))
		_, err := n.Send(context.Background(), testMessage("k-451"))
		if err == nil || errors.Is(err, ports.ErrOutcomeUnknown) || ports.KindOf(err) != ports.Retryable {
			t.Fatalf("err = %v, want retryable: the server replied", err)
		}
	})

	t.Run("ConnectionClosedAtRcptIsRetryable", func(t *testing.T) {
		srv := smtptest.StartServer(t, smtptest.Script{DropRcpt: true})
		n := MustNew(t, plainConfig(srv))
		_, err := n.Send(context.Background(), testMessage("k-rcpt"))
		if err == nil || errors.Is(err, ports.ErrOutcomeUnknown) || ports.KindOf(err) != ports.Retryable {
			t.Fatalf("err = %v, want retryable and not unknown: no DATA was sent", err)
		}
		if len(srv.Deliveries()) != 0 {
			t.Fatal("server kept a message")
		}
	})

	t.Run("SilentServerIsRetryable", func(t *testing.T) {
		host, port := smtptest.SilentListener(t)
		n := MustNew(t, smtp.Config{Host: host, Port: port, From: testFrom, TLSPolicy: "none", Timeout: timeout})
		_, err := n.Send(context.Background(), testMessage("k"))
		if err == nil || errors.Is(err, ports.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want retryable and not unknown: no greeting, nothing sent", err)
		}
	})
}
