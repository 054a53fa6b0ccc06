package domain_test

// Abuse cases: hostile records and data, each a named test that fails if the
// guard it names is removed. A rejected record must be a permanent
// *InvalidEventError with a reason a person understands (the consumer puts
// it in the dead letter's dlq.reason header), and nothing may be sent for it.

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// rec builds a record of type shipment.out_for_delivery from raw JSON
// members; recipient defaults to one with a phone and an email.
func rec(members string) string {
	if !strings.Contains(members, `"recipient"`) {
		members += `,"recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"}`
	}
	return `{"event_id":"e1","type":"shipment.out_for_delivery","shipment_id":"SHP-1"` + members + `}`
}

// mustDecode decodes value or fails the test.
func mustDecode(t *testing.T, value string) domain.Event {
	t.Helper()
	ev, err := domain.Decode([]byte(value))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return ev
}

// mustReject asserts that value is refused as the guard says: by Decode,
// with an *InvalidEventError on field whose reason contains reason, and by
// the service, permanently, with nothing sent.
func mustReject(t *testing.T, value, field, reason string) {
	t.Helper()
	_, err := domain.Decode([]byte(value))
	var ie *domain.InvalidEventError
	if !errors.As(err, &ie) {
		t.Fatalf("Decode: %v, want *InvalidEventError", err)
	}
	if ie.Field != field || !strings.Contains(ie.Reason, reason) {
		t.Fatalf("Decode: field %q reason %q, want field %q and a reason containing %q", ie.Field, ie.Reason, field, reason)
	}
	checkReason(t, err.Error())

	w := newWorld(t, domain.FailOpen)
	err = w.handle(t, value)
	if ports.KindOf(err) != ports.Permanent || !errors.As(err, &ie) {
		t.Fatalf("Handle: %v (%v), want a permanent *InvalidEventError", err, ports.KindOf(err))
	}
	if n := len(w.sms.Sent()) + len(w.email.Sent()); n != 0 {
		t.Fatalf("%d messages sent for a rejected record", n)
	}
}

func mustLoadTemplates(t *testing.T, overrides fs.FS) *domain.Templates {
	t.Helper()
	tpl, err := domain.LoadTemplates(overrides)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func mustRender(t *testing.T, tpl *domain.Templates, ev domain.Event, ch ports.Channel) ports.Message {
	t.Helper()
	m, err := tpl.Render(ev, ch)
	if err != nil {
		t.Fatalf("Render %s: %v", ch, err)
	}
	return m
}

func TestAbuseHeaderInjection(t *testing.T) {
	tpl := mustLoadTemplates(t, nil)

	t.Run("NameCRLFFoldedByDecode", func(t *testing.T) {
		for _, name := range []string{
			"Ada\r\nBcc: evil@example.com", "Ada\nBcc: evil@example.com", "Ada\rBcc: evil@example.com",
			"Ada\u2028Bcc: evil@example.com", "Ada\u0085Bcc: evil@example.com", "Ada\x00Bcc: evil@example.com",
		} {
			ev := mustDecode(t, rec(`,"recipient":{"name":`+jsonString(name)+`,"email":"ada@example.com"}`))
			if ev.Recipient.Name != "Ada Bcc: evil@example.com" {
				t.Fatalf("name %q decoded to %q, want one line", name, ev.Recipient.Name)
			}
			m := mustRender(t, tpl, ev, ports.ChannelEmail)
			if strings.ContainsAny(m.ToName+m.Subject, "\r\n") {
				t.Fatalf("ToName %q subject %q hold a line break", m.ToName, m.Subject)
			}
		}
	})

	t.Run("ToNameOfEventBuiltInCode", func(t *testing.T) {
		// Render is public: an Event that never went through Decode must
		// not carry a line break into the To header either.
		ev := domain.Event{EventID: "e1", Type: "shipment.created", ShipmentID: "S",
			Recipient: domain.Recipient{Name: "Ada\r\nBcc: evil@example.com", Addresses: map[ports.Channel]string{ports.ChannelEmail: "ada@example.com"}}}
		m := mustRender(t, tpl, ev, ports.ChannelEmail)
		if m.ToName != "Ada Bcc: evil@example.com" {
			t.Fatalf("ToName %q, want one line", m.ToName)
		}
	})

	t.Run("SubjectFromDataWithCRLF", func(t *testing.T) {
		// An operator's template may print data in the subject.
		dir := t.TempDir()
		writeFile(t, dir, "shipment.custom.tmpl", `{{define "sms"}}s{{end}}{{define "subject"}}Ref {{.Data.ref}}{{end}}{{define "text"}}t{{end}}`)
		writeFile(t, dir, "shipment.custom.html", `<p>h</p>`)
		ev := mustDecode(t, `{"event_id":"e1","type":"shipment.custom","shipment_id":"S","recipient":{"email":"ada@example.com"},
			"data":{"ref":"42\r\nBcc: evil@example.com\r\n\r\nbody"}}`)
		m := mustRender(t, mustLoadTemplates(t, os.DirFS(dir)), ev, ports.ChannelEmail)
		if m.Subject != "Ref 42 Bcc: evil@example.com body" {
			t.Fatalf("subject %q, want one line", m.Subject)
		}
	})

	t.Run("NonASCIIKeptIntact", func(t *testing.T) {
		// Encoding a non-ASCII header (RFC 2047) is the SMTP adapter's job;
		// the domain must hand it the name unmangled.
		ev := mustDecode(t, rec(`,"recipient":{"name":"Zoë 山田 😀","phone":"+31201234567","email":"ada@example.com"}`))
		m := mustRender(t, tpl, ev, ports.ChannelEmail)
		if m.ToName != "Zoë 山田 😀" || !strings.Contains(m.Text, "Hi Zoë 山田 😀,") {
			t.Fatalf("ToName %q text %q, want the name intact", m.ToName, m.Text)
		}
		if sms := mustRender(t, tpl, ev, ports.ChannelSMS); !strings.Contains(sms.Text, "Hi Zoë 山田 😀,") {
			t.Fatalf("SMS %q, want the name intact", sms.Text)
		}
	})
}

func TestAbuseScriptInData(t *testing.T) {
	tpl := mustLoadTemplates(t, nil)
	const (
		name   = `O'Brien <script>alert("name")</script>`
		reason = `"'><script>alert(1)</script><img src=x onerror=alert(2)>`
	)
	ev := mustDecode(t, `{"event_id":"e1","type":"shipment.delayed","shipment_id":"SHP-1",
		"recipient":{"name":`+jsonString(name)+`,"phone":"+31201234567","email":"ada@example.com"},
		"data":{"reason":`+jsonString(reason)+`,"tracking_url":"JaVaScRiPt:alert(3)"}}`)

	t.Run("EscapedInHTML", func(t *testing.T) {
		m := mustRender(t, tpl, ev, ports.ChannelEmail)
		lower := strings.ToLower(m.HTML)
		for _, bad := range []string{"<script", "<img", "javascript:"} {
			if strings.Contains(lower, bad) {
				t.Fatalf("HTML holds %q from data:\n%s", bad, m.HTML)
			}
		}
		if !strings.Contains(m.HTML, "&lt;script&gt;") || !strings.Contains(m.HTML, "#ZgotmplZ") {
			t.Fatalf("HTML lacks the escaped data or the neutralised URL:\n%s", m.HTML)
		}
	})

	t.Run("VerbatimInTextAndSMS", func(t *testing.T) {
		// Plain text is not HTML: escaping it would show the customer
		// "O&#39;Brien". Harmless there means printed as written.
		email := mustRender(t, tpl, ev, ports.ChannelEmail)
		sms := mustRender(t, tpl, ev, ports.ChannelSMS)
		for what, text := range map[string]string{"text part": email.Text, "SMS": sms.Text} {
			if !strings.Contains(text, name) || !strings.Contains(text, reason) {
				t.Fatalf("%s %q does not hold the data verbatim", what, text)
			}
		}
		if strings.Contains(email.Subject, "<") {
			t.Fatalf("subject %q holds data it should not", email.Subject)
		}
	})
}

func TestAbuseLongSMS(t *testing.T) {
	for _, tc := range []struct {
		name, eta string
	}{
		{"ASCII", strings.Repeat("x", 3000)},
		// Twilio counts each of these as two characters: 1600 of them is
		// 3200 to Twilio, and a rune-count cut would be refused.
		{"Emoji", strings.Repeat("😀", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, domain.FailOpen)
			if err := w.handle(t, rec(`,"channels":["sms"],"data":{"eta":`+jsonString(tc.eta)+`}`)); err != nil {
				t.Fatalf("Handle: %v; a long SMS must be cut, not refused", err)
			}
			sent := w.sms.Sent()
			if len(sent) != 1 {
				t.Fatalf("%d SMS sent, want 1", len(sent))
			}
			text := sent[0].Text
			if n := len(utf16.Encode([]rune(text))); n != domain.MaxSMSRunes && n != domain.MaxSMSRunes-1 {
				// MaxSMSRunes-1 when the next character needed two units.
				t.Fatalf("SMS of %d UTF-16 units, want %d", n, domain.MaxSMSRunes)
			}
			if !utf8.ValidString(text) || !strings.HasPrefix(text, "Harborlight: Hi Ada, your shipment SHP-1") || !strings.HasSuffix(text, "…") {
				t.Fatalf("SMS %.60q...%q: want the start kept, the end cut with an ellipsis", text, text[len(text)-8:])
			}
		})
	}
}

func TestAbuseRecordLimits(t *testing.T) {
	padded := func(size int) string {
		base := rec(`,"data":{"eta":""}`)
		return strings.Replace(base, `"eta":""`, `"eta":"`+strings.Repeat("x", size-len(base))+`"`, 1)
	}
	nested := func(depth int) string { // depth counts the record's own object
		return rec(`,"extra":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1))
	}

	t.Run("LargeRecordHandledWithSMSCut", func(t *testing.T) {
		// The size limit is the consumer's (MAX_RECORD_BYTES, default
		// 1 MiB; see adapters/kafka): a record it lets through is handled,
		// however long, and its SMS cut to the provider's limit.
		w := newWorld(t, domain.FailOpen)
		if err := w.handle(t, padded(900<<10)); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		sms, email := w.sms.Sent(), w.email.Sent()
		if len(sms) != 1 || len(email) != 1 {
			t.Fatalf("%d SMS, %d emails sent, want 1 each", len(sms), len(email))
		}
		if n := utf8.RuneCountInString(sms[0].Text); n != domain.MaxSMSRunes {
			t.Fatalf("SMS of %d runes, want it cut to %d", n, domain.MaxSMSRunes)
		}
	})
	t.Run("NestedTooDeep", func(t *testing.T) {
		mustReject(t, nested(domain.MaxJSONDepth+1), "", "nested deeper than 32 levels")
	})
	t.Run("NestedAtLimitAccepted", func(t *testing.T) {
		mustDecode(t, nested(domain.MaxJSONDepth))
	})
	t.Run("NestedHugely", func(t *testing.T) {
		mustReject(t, `{"x":`+strings.Repeat("[", 30000)+strings.Repeat("]", 30000)+`}`, "", "nested deeper")
	})
	t.Run("BracketsInStringsDoNotNest", func(t *testing.T) {
		ev := mustDecode(t, rec(`,"data":{"eta":"`+strings.Repeat("[{\\\"", 100)+`"}`))
		if !strings.HasPrefix(ev.Data["eta"], `[{"[{"`) {
			t.Fatalf("eta %q", ev.Data["eta"])
		}
	})
	t.Run("HugeDataWithinLimitRenders", func(t *testing.T) {
		var b strings.Builder
		for i := range 3000 {
			b.WriteString(`,"k` + strings.Repeat("0", 4) + string(rune('a'+i%26)) + strconv.Itoa(i) + `":1`)
		}
		ev := mustDecode(t, rec(`,"data":{"eta":"soon"`+b.String()+`}`))
		if len(ev.Data) != 3001 {
			t.Fatalf("%d data keys, want 3001", len(ev.Data))
		}
	})
}

func TestAbuseDuplicateKeys(t *testing.T) {
	const r = `"recipient":{"phone":"+31201234567","email":"ada@example.com"}`
	for _, tc := range []struct{ name, value, field, reason string }{
		{"TopLevel", `{"event_id":"e1","event_id":"e2","type":"shipment.created","shipment_id":"S",` + r + `}`, "event_id", "more than once"},
		{"Recipient", `{"event_id":"e1","type":"shipment.created","shipment_id":"S",` + r + `,"recipient":{"phone":"+31207654321"}}`, "recipient", "more than once"},
		{"RecipientPhone", `{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"phone":"+31201234567","phone":"+31207654321"}}`, "recipient.phone", "more than once"},
		{"RecipientEmail", `{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"email":"ada@example.com","email":"eve@example.com"}}`, "recipient.email", "more than once"},
		{"Data", `{"event_id":"e1","type":"shipment.created","shipment_id":"S",` + r + `,"data":{"eta":"1","eta":"2"}}`, "data.eta", "more than once"},
		{"CaseVariantBesideField", `{"event_id":"e1","EVENT_ID":"e2","type":"shipment.created","shipment_id":"S",` + r + `}`, "EVENT_ID", `case-sensitive: want "event_id"`},
		{"CaseVariantAlone", `{"Event_Id":"e1","type":"shipment.created","shipment_id":"S",` + r + `}`, "Event_Id", `want "event_id"`},
		{"UnicodeFoldVariant", `{"event_id":"e1","type":"shipment.created","ſhipment_id":"S",` + r + `}`, "ſhipment_id", `want "shipment_id"`},
		{"RecipientCaseVariant", `{"event_id":"e1","type":"shipment.created","shipment_id":"S","recipient":{"phone":"+31201234567","Phone":"+31207654321"}}`, "recipient.Phone", `want "phone"`},
	} {
		t.Run(tc.name, func(t *testing.T) { mustReject(t, tc.value, tc.field, tc.reason) })
	}

	t.Run("DataKeysDifferingInCaseAllowed", func(t *testing.T) {
		// data is a map: every reader keeps "eta" and "ETA" apart.
		ev := mustDecode(t, rec(`,"data":{"eta":"1","ETA":"2"}`))
		if ev.Data["eta"] != "1" || ev.Data["ETA"] != "2" {
			t.Fatalf("data %v", ev.Data)
		}
	})
	t.Run("RepeatInsideUnknownFieldRefused", func(t *testing.T) {
		// No object of the record may repeat a name (RFC 7493): a reader
		// of the producer's own fields could disagree with another too.
		mustReject(t, rec(`,"trace":{"a":1,"a":2}`), "trace.a", "more than once")
	})
}

func TestAbuseInvalidUTF8(t *testing.T) {
	for _, tc := range []struct{ name, value, field string }{
		{"RawByteInName", rec(`,"recipient":{"name":"Ada` + "\xff" + `","phone":"+31201234567"}`), ""},
		{"OverlongEncoding", rec(`,"data":{"eta":"` + "\xc0\xaf" + `"}`), ""},
		{"RawSurrogate", rec(`,"data":{"eta":"` + "\xed\xa0\x80" + `"}`), ""},
		{"LoneSurrogateEscapeInName", rec(`,"recipient":{"name":"Ada\ud800","phone":"+31201234567"}`), "recipient.name"},
		{"LoneSurrogateEscapeInData", rec(`,"data":{"eta":"\udfff"}`), "data.eta"},
		{"LoneSurrogateEscapeInDataKey", rec(`,"data":{"\ud800":"x"}`), "data.\ufffd"},
		{"LoneSurrogateEscapeInEventID", `{"event_id":"e\ud800","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"}}`, "event_id"},
		{"LoneSurrogateEscapeInEmail", rec(`,"recipient":{"email":"ad\ud800a@example.com"}`), "recipient.email"},
	} {
		t.Run(tc.name, func(t *testing.T) { mustReject(t, tc.value, tc.field, "UTF-8") })
	}

	t.Run("SurrogatePairEscapeAccepted", func(t *testing.T) {
		ev := mustDecode(t, rec(`,"recipient":{"name":"Ada \ud83d\ude00","phone":"+31201234567"}`))
		if ev.Recipient.Name != "Ada 😀" {
			t.Fatalf("name %q", ev.Recipient.Name)
		}
	})
}

func TestAbuseHugeEventID(t *testing.T) {
	huge := strings.Repeat("x", 10<<10)
	value := `{"event_id":"` + huge + `","type":"shipment.created","shipment_id":"S","recipient":{"phone":"+31201234567"}}`
	mustReject(t, value, "event_id", "longer than 128 bytes")
	_, err := domain.Decode([]byte(value))
	if strings.Contains(err.Error(), strings.Repeat("x", 100)) {
		t.Fatalf("reason %q quotes the huge id", err)
	}
}

func TestAbuseEmptyAndWhitespace(t *testing.T) {
	const r = `"recipient":{"phone":"+31201234567"}`
	for _, tc := range []struct{ name, value, field, reason string }{
		{"EmptyEventID", `{"event_id":"","type":"t","shipment_id":"s",` + r + `}`, "event_id", "required"},
		{"BlankEventID", `{"event_id":" \t\n ","type":"t","shipment_id":"s",` + r + `}`, "event_id", "required"},
		{"BlankType", `{"event_id":"e","type":"  ","shipment_id":"s",` + r + `}`, "type", "required"},
		{"EmptyShipmentID", `{"event_id":"e","type":"t","shipment_id":"",` + r + `}`, "shipment_id", "required"},
		{"PaddedEventID", `{"event_id":" e1","type":"t","shipment_id":"s",` + r + `}`, "event_id", "spaces"},
		{"BidiOverrideInShipmentID", `{"event_id":"e","type":"t","shipment_id":"SHP-\u202e1",` + r + `}`, "shipment_id", "format characters"},
		{"ZeroWidthSpaceInEventID", `{"event_id":"e\u200b1","type":"t","shipment_id":"s",` + r + `}`, "event_id", "format characters"},
		{"BlankPhoneAndEmail", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"  ","email":"\t"}}`, "recipient", "neither phone nor email"},
		{"EmptyChannelName", `{"event_id":"e","type":"t","shipment_id":"s",` + r + `,"channels":[""]}`, "channels", "unknown channel"},
		{"BlankPhoneButSMSAsked", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":" ","email":"ada@example.com"},"channels":["sms"]}`, "channels", "no address for this channel"},
	} {
		t.Run(tc.name, func(t *testing.T) { mustReject(t, tc.value, tc.field, tc.reason) })
	}

	t.Run("BlankPhoneIsNoPhone", func(t *testing.T) {
		ev := mustDecode(t, rec(`,"recipient":{"phone":"   ","email":" ada@example.com "}`))
		if ev.Recipient.Address(ports.ChannelSMS) != "" || ev.Recipient.Address(ports.ChannelEmail) != "ada@example.com" || len(ev.Channels) != 1 || ev.Channels[0] != ports.ChannelEmail {
			t.Fatalf("recipient %+v channels %v, want the email alone", ev.Recipient, ev.Channels)
		}
	})
	t.Run("PaddedPhoneNormalised", func(t *testing.T) {
		ev := mustDecode(t, rec(`,"recipient":{"phone":" +31 20 123 4567 "}`))
		if ev.Recipient.Address(ports.ChannelSMS) != "+31201234567" {
			t.Fatalf("phone %q", ev.Recipient.Address(ports.ChannelSMS))
		}
	})
	t.Run("BlankNameGreetsWithoutIt", func(t *testing.T) {
		ev := mustDecode(t, rec(`,"recipient":{"name":" \t\r\n ","phone":"+31201234567"}`))
		m := mustRender(t, mustLoadTemplates(t, nil), ev, ports.ChannelSMS)
		if ev.Recipient.Name != "" || !strings.HasPrefix(m.Text, "Harborlight: Your shipment") {
			t.Fatalf("name %q SMS %q", ev.Recipient.Name, m.Text)
		}
	})
	t.Run("EmptyChannelsDefault", func(t *testing.T) {
		for _, channels := range []string{`[]`, `null`} {
			ev := mustDecode(t, rec(`,"channels":`+channels))
			if len(ev.Channels) != 2 {
				t.Fatalf("channels %s decoded to %v, want every channel with an address", channels, ev.Channels)
			}
		}
	})
	t.Run("EmptyDataValueSkipsItsSentence", func(t *testing.T) {
		ev := mustDecode(t, rec(`,"data":{"eta":"","tracking_url":null}`))
		m := mustRender(t, mustLoadTemplates(t, nil), ev, ports.ChannelSMS)
		if m.Text != "Harborlight: Hi Ada, your shipment SHP-1 is out for delivery." {
			t.Fatalf("SMS %q", m.Text)
		}
	})
}

func TestAbuseUnknownEventType(t *testing.T) {
	w := newWorld(t, domain.FailOpen)
	err := w.handle(t, `{"event_id":"e1","type":"shipment.teleported","shipment_id":"S","recipient":{"phone":"+31201234567","email":"ada@example.com"}}`)
	if ports.KindOf(err) != ports.Permanent || !errors.Is(err, domain.ErrUnknownEventType) {
		t.Fatalf("Handle: %v, want permanent ErrUnknownEventType", err)
	}
	if !strings.Contains(err.Error(), `"shipment.teleported"`) {
		t.Fatalf("reason %q does not name the type", err)
	}
	checkReason(t, err.Error())
	if n := len(w.sms.Sent()) + len(w.email.Sent()); n != 0 {
		t.Fatalf("%d messages sent for an unknown type", n)
	}
}

func TestAbuseNoAddress(t *testing.T) {
	for _, tc := range []struct{ name, recipient string }{
		{"NameOnly", `,"recipient":{"name":"Ada"}`},
		{"Empty", `,"recipient":{}`},
		{"Null", `,"recipient":null`},
		{"Missing", ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			value := `{"event_id":"e1","type":"shipment.created","shipment_id":"S"` + tc.recipient + `}`
			mustReject(t, value, "recipient", "neither phone nor email: nothing can be sent")
		})
	}
}

func writeFile(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// jsonString quotes s as a JSON string (control characters escaped).
func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a string always marshals
	}
	return string(b)
}

func TestAbusePanickingNotifier(t *testing.T) {
	w := newWorld(t, domain.FailOpen)
	w.sms.FailFunc = func(ports.Message) error { panic("provider SDK bug") }

	t.Run("PanicReachesTheEventSource", func(t *testing.T) {
		// The consumer recovers it, counts it and dead-letters the record;
		// swallowing it here would hide a bug as an ordinary failure.
		var got any
		func() {
			defer func() { got = recover() }()
			_ = w.handle(t, event("e1", "sms"))
		}()
		if got != "provider SDK bug" {
			t.Fatalf("recovered %v, want the notifier's panic", got)
		}
	})
	t.Run("ClaimReleased", func(t *testing.T) {
		// A claim left pending would hold off a replay for the claim TTL.
		if st := w.claimState(t, domain.NotificationKey("e1", ports.ChannelSMS)); st != ports.Claimed {
			t.Fatalf("key after the panic: %v, want free", st)
		}
	})
	t.Run("ReplaySends", func(t *testing.T) {
		w.sms.FailFunc = nil
		if err := w.handle(t, event("e1", "sms")); err != nil {
			t.Fatalf("Handle: %v", err)
		}
		if n := len(w.sms.Sent()); n != 1 {
			t.Fatalf("%d SMS sent on replay, want 1", n)
		}
	})
}

// A recipient field the worker does not know is refused, naming it: it may
// be an address ("mobile" for "phone") that would otherwise be dropped
// silently, its channel never notified. Fields beside the recipient stay
// open for producers.
func TestDecode_UnknownRecipientField(t *testing.T) {
	t.Run("Refused", func(t *testing.T) {
		mustReject(t, rec(`,"recipient":{"name":"Ada","mobile":"+31201234567","email":"ada@example.com"}`),
			"recipient.mobile", "unknown field: want one of name, phone, email")
	})
	t.Run("TopLevelOpen", func(t *testing.T) {
		mustDecode(t, rec(`,"producer":"billing"`))
	})
}
