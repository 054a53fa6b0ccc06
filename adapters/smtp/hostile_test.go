package smtp_test

// Hostile names and subjects through the real path an email takes: the
// domain decodes and renders the record, this adapter sends it, and the
// in-process SMTP server keeps the raw message. Whatever the event holds,
// the message must have exactly one From, To and Subject header, no header
// the data added (Bcc, Cc, ...), one envelope recipient, headers in 7-bit
// ASCII (RFC 2047 words where the text is not), and HTML that escapes data.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"

	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// hostileRecord is a shipment.delayed record for ada@example.com with the
// given name, shipment id and delay reason, JSON-quoted here.
func hostileRecord(t *testing.T, name, shipmentID, reason string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"event_id": "e1", "type": "shipment.delayed", "shipment_id": shipmentID,
		"recipient": map[string]string{"name": name, "email": "ada@example.com"},
		"data":      map[string]string{"reason": reason, "tracking_url": "https://track.example/1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sendThrough sends m with a real Notifier to a fresh test server and
// returns what the server received.
func sendThrough(t *testing.T, m ports.Message) smtptest.Delivery {
	t.Helper()
	srv := smtptest.StartServer(t, smtptest.Script{})
	n, err := smtp.New(smtp.Config{Host: srv.Host, Port: srv.Port, From: "Harborlight <noreply@harborlight.example>", TLSPolicy: "none", Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := n.Send(ctx, m); err != nil {
		t.Fatalf("Send: %v", err)
	}
	return srv.Only(t)
}

// rawHeader splits the raw message's header into its fields, unfolded, in
// order, with names as written.
func rawHeader(t *testing.T, data []byte) []string {
	t.Helper()
	head, _, ok := bytes.Cut(data, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("message without a header/body separator:\n%s", data)
	}
	var fields []string
	for i, line := range strings.Split(string(head), "\r\n") {
		if len(line) > 998 {
			t.Errorf("header line %d is %d octets, over RFC 5322's 998", i, len(line))
		}
		if strings.ContainsAny(line, "\r\n") {
			t.Errorf("header line %q holds a bare CR or LF", line)
		}
		for _, c := range []byte(line) {
			if c >= 0x80 || (c < 0x20 && c != '\t') || c == 0x7f {
				t.Errorf("header line %q holds byte %#x: not 7-bit printable", line, c)
				break
			}
		}
		if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
			if len(fields) == 0 {
				t.Fatalf("header starts with a continuation line %q", line)
			}
			fields[len(fields)-1] += line
			continue
		}
		fields = append(fields, line)
	}
	return fields
}

// assertOneHeaderEach checks the header's shape: one From, To, Subject and
// Message-ID each, and no field outside what the adapter writes.
func assertOneHeaderEach(t *testing.T, fields []string) {
	t.Helper()
	allowed := map[string]bool{
		"From": true, "To": true, "Subject": true, "Message-Id": true, "Date": true,
		"Mime-Version": true, "Content-Type": true, "Content-Transfer-Encoding": true, "User-Agent": true, "X-Mailer": true,
	}
	count := map[string]int{}
	for _, f := range fields {
		name, _, ok := strings.Cut(f, ":")
		if !ok {
			t.Errorf("header field %q has no colon", f)
			continue
		}
		name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
		count[name]++
		if !allowed[name] {
			t.Errorf("unexpected header field %q", f)
		}
	}
	for _, name := range []string{"From", "To", "Subject", "Message-Id"} {
		if count[name] != 1 {
			t.Errorf("%d %s header fields, want exactly 1", count[name], name)
		}
	}
}

func decodedHeader(t *testing.T, msg *mail.Message, name string) string {
	t.Helper()
	s, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get(name))
	if err != nil {
		t.Fatalf("decode %s %q: %v", name, msg.Header.Get(name), err)
	}
	return s
}

// bodyParts returns the decoded text/plain and text/html parts.
func bodyParts(t *testing.T, msg *mail.Message) map[string]string {
	t.Helper()
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		t.Fatalf("Content-Type %q: %v, want multipart", msg.Header.Get("Content-Type"), err)
	}
	out := map[string]string{}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for range 10 {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("multipart: %v", err)
		}
		var r io.Reader = p
		switch strings.ToLower(p.Header.Get("Content-Transfer-Encoding")) {
		case "quoted-printable":
			r = quotedprintable.NewReader(p)
		case "base64":
			r = base64.NewDecoder(base64.StdEncoding, p) // it skips the line breaks
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("part body: %v", err)
		}
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		out[ct] = string(b)
	}
	return out
}

func TestHostileHeaders(t *testing.T) {
	tpl, err := domain.LoadTemplates(nil)
	if err != nil {
		t.Fatal(err)
	}
	render := func(t *testing.T, record []byte) ports.Message {
		t.Helper()
		ev, err := domain.Decode(record)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		m, err := tpl.Render(ev, ports.ChannelEmail)
		if err != nil {
			t.Fatalf("Render: %v", err)
		}
		return m
	}

	for _, tc := range []struct {
		name, toName, shipmentID     string
		wantName, wantSubjectContain string
	}{
		{"CRLFBccInName", "Ada\r\nBcc: evil@attacker.example", "SHP-1", "Ada Bcc: evil@attacker.example", "SHP-1"},
		{"BareLFAndCRInName", "Ada\nBcc: a@attacker.example\rCc: b@attacker.example", "SHP-1", "Ada Bcc: a@attacker.example Cc: b@attacker.example", "SHP-1"},
		{"UnicodeLineBreaksInName", "Ada\u2028Bcc: evil@attacker.example\u0085x", "SHP-1", "Ada Bcc: evil@attacker.example x", "SHP-1"},
		{"HeaderBodySplitInName", "Ada\r\n\r\n<html>phish</html>", "SHP-1", "Ada <html>phish</html>", "SHP-1"},
		{"QuotesAndAddressInName", `Eve" <evil@attacker.example>, "Bob`, "SHP-1", `Eve" <evil@attacker.example>, "Bob`, "SHP-1"},
		{"NonASCIINameAndSubject", "Zoë 山田 😀", "SHP-é山1", "Zoë 山田 😀", "SHP-é山1"},
		{"LongNonASCIIName", strings.Repeat("é", domain.MaxNameRunes), "SHP-" + strings.Repeat("山", 40), strings.Repeat("é", domain.MaxNameRunes), "SHP-" + strings.Repeat("山", 40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, hostileRecord(t, tc.toName, tc.shipmentID, `"'><script>alert(1)</script>`))
			d := sendThrough(t, m)
			if len(d.To) != 1 || d.To[0] != "ada@example.com" {
				t.Fatalf("envelope recipients %v, want only ada@example.com", d.To)
			}
			assertOneHeaderEach(t, rawHeader(t, d.Data))

			msg, err := mail.ReadMessage(bufio.NewReader(bytes.NewReader(d.Data)))
			if err != nil {
				t.Fatalf("ReadMessage: %v", err)
			}
			to, err := msg.Header.AddressList("To")
			if err != nil || len(to) != 1 || to[0].Address != "ada@example.com" || to[0].Name != tc.wantName {
				t.Fatalf("To %q parsed as %v (%v), want one address, ada@example.com named %q", msg.Header.Get("To"), to, err, tc.wantName)
			}
			if subj := decodedHeader(t, msg, "Subject"); subj != m.Subject || !strings.Contains(subj, tc.wantSubjectContain) {
				t.Fatalf("Subject %q, want the rendered %q", subj, m.Subject)
			}
			parts := bodyParts(t, msg)
			if html := parts["text/html"]; strings.Contains(strings.ToLower(html), "<script") || !strings.Contains(html, "&lt;script&gt;") {
				t.Fatalf("HTML part does not escape the data:\n%s", html)
			}
			if text := parts["text/plain"]; !strings.Contains(text, `"'><script>alert(1)</script>`) {
				t.Fatalf("text part does not carry the data verbatim:\n%s", text)
			}
		})
	}

	// The adapter's own guard, for a Message that never went through the
	// domain (a future caller, a template that prints raw data).
	t.Run("AdapterFlattensWithoutTheDomain", func(t *testing.T) {
		m := render(t, hostileRecord(t, "Ada", "SHP-1", "storm"))
		m.ToName = "Ada\r\nBcc: evil@attacker.example"
		m.Subject = "Delayed\r\nBcc: evil@attacker.example\r\n\r\nbody"
		d := sendThrough(t, m)
		if len(d.To) != 1 || d.To[0] != "ada@example.com" {
			t.Fatalf("envelope recipients %v, want only ada@example.com", d.To)
		}
		assertOneHeaderEach(t, rawHeader(t, d.Data))
		// go-mail would encode the line breaks into an RFC 2047 word (no
		// injection, but a subject that shows a line break once decoded):
		// the adapter flattens them first, as Send documents.
		msg, err := mail.ReadMessage(bufio.NewReader(bytes.NewReader(d.Data)))
		if err != nil {
			t.Fatalf("ReadMessage: %v", err)
		}
		if subj := decodedHeader(t, msg, "Subject"); subj != "Delayed Bcc: evil@attacker.example body" {
			t.Fatalf("Subject decodes to %q, want the line breaks flattened", subj)
		}
		if to, err := msg.Header.AddressList("To"); err != nil || len(to) != 1 || to[0].Name != "Ada Bcc: evil@attacker.example" {
			t.Fatalf("To %q parsed as %v (%v), want one address named on one line", msg.Header.Get("To"), to, err)
		}
	})
}
