package domain_test

import (
	"encoding/json"
	"encoding/json/jsontext"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

func TestDecode(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		ev, err := domain.Decode([]byte(`{"event_id":"7f1c9a52-3d4e-4b8a-9f0e-2c6d1e8b5a43","type":"shipment.out_for_delivery",
			"occurred_at":"2026-04-02T09:14:00Z","shipment_id":"SHP-100234",
			"recipient":{"name":"Ada\r\nBcc: x","phone":"+31 (20) 123-4567","email":"ada@example.com"},
			"data":{"eta":"14:00-16:00","stops":3,"fragile":true}}`))
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if ev.Recipient.Address(ports.ChannelSMS) != "+31201234567" {
			t.Errorf("phone %q, want E.164 +31201234567", ev.Recipient.Address(ports.ChannelSMS))
		}
		if ev.Recipient.Name != "Ada Bcc: x" {
			t.Errorf("name %q, want one line", ev.Recipient.Name)
		}
		if got := ev.Channels; len(got) != 2 || got[0] != ports.ChannelSMS || got[1] != ports.ChannelEmail {
			t.Errorf("channels %v, want default [sms email]", got)
		}
		if ev.Data["stops"] != "3" || ev.Data["fragile"] != "true" {
			t.Errorf("data %v, want scalars as text", ev.Data)
		}
	})

	for _, tc := range []struct {
		name, value, field string
	}{
		{"NotJSON", `nope`, ""},
		{"InvalidUTF8", "{\"event_id\":\"\xff\"}", ""},
		{"MissingEventID", `{"type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"}}`, "event_id"},
		{"WhitespaceEventID", `{"event_id":"  ","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"}}`, "event_id"},
		{"LongEventID", `{"event_id":"` + strings.Repeat("x", 10000) + `","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"}}`, "event_id"},
		{"MissingType", `{"event_id":"e","shipment_id":"s","recipient":{"phone":"+31201234567"}}`, "type"},
		{"MissingShipment", `{"event_id":"e","type":"t","recipient":{"phone":"+31201234567"}}`, "shipment_id"},
		{"BadPhone", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"555-1234"}}`, "recipient.phone"},
		{"BadEmail", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"email":"ada at example"}}`, "recipient.email"},
		{"NoAddress", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"name":"Ada"}}`, "recipient"},
		{"UnknownChannel", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"},"channels":["fax"]}`, "channels"},
		{"ChannelWithoutAddress", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"},"channels":["email"]}`, "channels"},
		{"NestedData", `{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"},"data":{"a":{"b":1}}}`, "data.a"},
		{"WrongType", `{"event_id":42,"type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"}}`, "event_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := domain.Decode([]byte(tc.value))
			var ie *domain.InvalidEventError
			if !errors.As(err, &ie) {
				t.Fatalf("Decode: %v, want *InvalidEventError", err)
			}
			if ie.Field != tc.field {
				t.Fatalf("field %q (%v), want %q", ie.Field, err, tc.field)
			}
			if strings.Contains(err.Error(), "201234567") || strings.Contains(err.Error(), strings.Repeat("x", 100)) {
				t.Fatalf("error %q repeats a phone or a huge value", err)
			}
		})
	}
}

// TestDecode_NullIsNoValue: a null member is as good as an absent one, in
// the record, its recipient and its data.
func TestDecode_NullIsNoValue(t *testing.T) {
	ev, err := domain.Decode([]byte(`{"event_id":"e","type":"t","shipment_id":"s","occurred_at":null,"channels":null,
		"recipient":{"name":null,"phone":null,"email":"ada@example.com"},"data":{"eta":null,"n":1}}`))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if ev.Recipient.Name != "" || ev.Recipient.Address(ports.ChannelSMS) != "" || !ev.OccurredAt.IsZero() {
		t.Errorf("name %q, phone %q, occurred_at %v: want none", ev.Recipient.Name, ev.Recipient.Address(ports.ChannelSMS), ev.OccurredAt)
	}
	if len(ev.Channels) != 1 || ev.Channels[0] != ports.ChannelEmail {
		t.Errorf("channels %v, want [email]", ev.Channels)
	}
	if _, ok := ev.Data["eta"]; ok || ev.Data["n"] != "1" {
		t.Errorf("data %v, want n alone", ev.Data)
	}
}

// jsonGrammarSeeds are records at the edges of the JSON grammar, valid and
// not.
var jsonGrammarSeeds = []string{
	``, ` `, `{}`, ` { } `, `[]`, `[ ]`, `""`, `"a"`, `0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-05`, `1e`, `1e+`,
	`-1.25e+10`, `true`, `false`, `null`, `nul`, `truex`, `tru`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`,
	`{"a":1 "b":2}`, `{"a":1}x`, `{"a":1}}`, `[[]]]`, `"\u00e9\ud800"`, `"\u12"`, `"\uZZZZ"`, `"\x"`, `"\/\b\f\n\r\t\"\\"`,
	"\"tab\there\"", "\"\x1f\"", "\"\x7f\"", `"unterminated`, `"ends in backslash\`, "\t\n\r 1 \t\n\r", "\u00a01", "1\u00a0",
	`{"event_id":"e","recipient":{"name":"Ada"},"channels":["sms"],"data":{"n":-1.5e3,"b":true,"z":null}}`,
	strings.Repeat("[", 32) + strings.Repeat("]", 32), strings.Repeat("[", 33) + strings.Repeat("]", 33),
	strings.Repeat(`{"a":`, 32) + "1" + strings.Repeat("}", 32), strings.Repeat(`{"a":`, 33) + "1" + strings.Repeat("}", 33),
	strings.Repeat("[", 40) + "x", `"` + strings.Repeat("[", 40) + `"`, "[1,x" + strings.Repeat("[", 40),
	`{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`,
}

// TestDecode_JSONGrammar: a record is refused as a whole (an error without
// a Field) exactly when it is not one JSON object nested at most
// MaxJSONDepth deep; the fields of one that is are judged on their own.
func TestDecode_JSONGrammar(t *testing.T) {
	for _, s := range jsonGrammarSeeds {
		_, err := domain.Decode([]byte(s))
		var ie *domain.InvalidEventError
		if !errors.As(err, &ie) {
			t.Fatalf("Decode(%.60q): %v, want *InvalidEventError", s, err)
		}
		checkReason(t, err.Error())
		depth, object := jsonShape(s)
		if wantWhole := !object || depth > domain.MaxJSONDepth; (ie.Field == "") != wantWhole {
			t.Errorf("Decode(%.60q): %v; an object %v, nested %d deep", s, err, object, depth)
		}
	}
}

// jsonShape returns how deeply the JSON text s nests, and whether it is one
// valid JSON object (or null, which decodes as an empty one).
func jsonShape(s string) (depth int, object bool) {
	dec := jsontext.NewDecoder(strings.NewReader(s), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return depth, err == io.EOF && json.Valid([]byte(s)) && (strings.HasPrefix(strings.TrimSpace(s), "{") || strings.TrimSpace(s) == "null")
		}
		if depth = max(depth, dec.StackDepth()); tok.Kind() == 0 {
			return depth, false
		}
	}
}

// TestDecode_RecipientNotInErrors: an invalid event's error goes into logs
// and dead-letter headers, so it names the field and the problem but holds
// no name, and an address only masked or not at all; a length error gives
// the length.
func TestDecode_RecipientNotInErrors(t *testing.T) {
	hopper := "Grace Brewster Murray Hopper"
	long := strings.Repeat(hopper+" ", 10<<10/(len(hopper)+1)) // about 10 kB
	rec := func(recipient string) string {
		return `{"event_id":"e","type":"t","shipment_id":"s","recipient":` + recipient + `}`
	}
	for _, tc := range []struct {
		name, value, field string
		secret             []string // what the error must not hold
		want               string   // what it must
	}{
		{"TenKilobyteName", rec(`{"name":"` + long + `","phone":"+31201234567"}`), "recipient.name",
			[]string{"Grace", "Hopper", "Brewster"}, "characters, longer than 100"},
		{"NameJustTooLong", rec(`{"name":"` + strings.Repeat("é", 101) + `","phone":"+31201234567"}`), "recipient.name",
			[]string{"éé"}, "101 characters, longer than 100"},
		{"NameInPhoneField", rec(`{"phone":"` + hopper + `"}`), "recipient.phone",
			[]string{"Grace", "race", "pper"}, "28 bytes, not shown"},
		{"TenKilobytePhone", rec(`{"phone":"+1555` + strings.Repeat("1", 10<<10) + `"}`), "recipient.phone",
			[]string{"+1555", "1111"}, "10245 bytes, not shown"},
		{"ShortPhoneMasked", rec(`{"phone":"+1 555 01"}`), "recipient.phone",
			[]string{"555", "01"}, `"+1*******"`},
		{"TenKilobyteEmail", rec(`{"email":"grace.hopper@` + strings.Repeat("navy", 10<<8) + `.mil"}`), "recipient.email",
			[]string{"grace", "navynavy"}, "longer than 254 bytes (a value of 10257 bytes, not shown)"},
		{"NameInEmailField", rec(`{"email":"Grace Hopper <grace@navy.mil>"}`), "recipient.email",
			[]string{"Grace", "Hopper", "grace"}, "not shown"},
		{"BadEmailMasked", rec(`{"email":"grace@@navy.mil"}`), "recipient.email",
			[]string{"grace"}, "not shown"},
		{"BadEmailDomainMasked", rec(`{"email":"grace@navy..mil"}`), "recipient.email",
			[]string{"grace"}, `"g***@navy..mil"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := domain.Decode([]byte(tc.value))
			var ie *domain.InvalidEventError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("Decode: %v, want an *InvalidEventError on %s", err, tc.field)
			}
			for _, s := range tc.secret {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q holds %q", err, s)
				}
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestTemplates(t *testing.T) {
	ev, err := domain.Decode([]byte(`{"event_id":"e1","type":"shipment.out_for_delivery","shipment_id":"SHP-1",
		"recipient":{"name":"<script>alert(1)</script>","phone":"+31201234567","email":"ada@example.com"},
		"data":{"eta":"14:00-16:00","tracking_url":"javascript:alert(1)"}}`))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := domain.LoadTemplates(nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("EveryTypeRendersEveryChannel", func(t *testing.T) {
		for _, typ := range tpl.Types() {
			ev := ev
			ev.Type = typ
			for _, ch := range tpl.Channels() {
				m, err := tpl.Render(ev, ch)
				if err != nil {
					t.Fatalf("%s/%s: %v", typ, ch, err)
				}
				if !strings.Contains(m.Text, "SHP-1") {
					t.Errorf("%s/%s text %q lacks the shipment id", typ, ch, m.Text)
				}
				if m.IdempotencyKey != string(ch)+":e1" {
					t.Errorf("key %q", m.IdempotencyKey)
				}
			}
		}
	})

	t.Run("HTMLEscaped", func(t *testing.T) {
		m, err := tpl.Render(ev, ports.ChannelEmail)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m.HTML, "<script>") || strings.Contains(m.HTML, `href="javascript:`) {
			t.Fatalf("HTML not escaped: %s", m.HTML)
		}
		if !strings.Contains(m.Subject, "SHP-1") || strings.ContainsAny(m.Subject, "\r\n") {
			t.Fatalf("subject %q", m.Subject)
		}
	})

	t.Run("LongSMSTruncated", func(t *testing.T) {
		ev := ev
		ev.Data = domain.Data{"tracking_url": strings.Repeat("x", 3000)}
		m, err := tpl.Render(ev, ports.ChannelSMS)
		if err != nil {
			t.Fatal(err)
		}
		if n := len([]rune(m.Text)); n != domain.MaxSMSRunes || !strings.HasSuffix(m.Text, "…") {
			t.Fatalf("SMS of %d runes ending %q, want %d ending in an ellipsis", n, m.Text[len(m.Text)-5:], domain.MaxSMSRunes)
		}
	})

	t.Run("UnknownType", func(t *testing.T) {
		ev := ev
		ev.Type = "shipment.teleported"
		if _, err := tpl.Render(ev, ports.ChannelSMS); !errors.Is(err, domain.ErrUnknownEventType) {
			t.Fatalf("Render: %v, want ErrUnknownEventType", err)
		}
	})

	t.Run("DirectoryOverrides", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name, body string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("shipment.out_for_delivery.tmpl", `{{define "sms"}}custom {{.ShipmentID}}{{end}}{{define "subject"}}s{{end}}{{define "text"}}t{{end}}`)
		write("shipment.returned.tmpl", `{{define "sms"}}returned{{end}}{{define "subject"}}s{{end}}{{define "text"}}t{{end}}`)
		write("shipment.returned.html", `<p>returned</p>`)
		tpl, err := domain.LoadTemplates(os.DirFS(dir))
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := tpl.Render(ev, ports.ChannelSMS); m.Text != "custom SHP-1" {
			t.Fatalf("overridden SMS %q", m.Text)
		}
		ev := ev
		ev.Type = "shipment.returned"
		if m, err := tpl.Render(ev, ports.ChannelSMS); err != nil || m.Text != "returned" {
			t.Fatalf("added type: %q, %v", m.Text, err)
		}
	})

	t.Run("IncompleteDirectoryFails", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "shipment.lost.tmpl"), []byte(`{{define "sms"}}x{{end}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := domain.LoadTemplates(os.DirFS(dir))
		if err == nil || !strings.Contains(err.Error(), `"subject"`) || !strings.Contains(err.Error(), "shipment.lost.html") {
			t.Fatalf("LoadTemplates: %v, want the missing block and file named", err)
		}
	})
}
