package domain_test

// Fuzz targets for every path a record's bytes take through the domain. Each
// asserts properties, not only "no panic"; scripts/fuzz.sh runs them all for
// a bounded time (make fuzz), and plain `go test` runs their seed corpora
// plus any crasher committed under testdata/fuzz/.

import (
	"encoding/json"
	"errors"
	"html"
	"net/mail"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

// seedRecords are records the fuzzers start from: valid ones of every shape,
// and the hostile ones of the abuse tests.
var seedRecords = []string{
	`{"event_id":"7f1c9a52-3d4e-4b8a-9f0e-2c6d1e8b5a43","type":"shipment.out_for_delivery","occurred_at":"2026-04-02T09:14:00Z","shipment_id":"SHP-100234","recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"},"channels":["sms","email"],"data":{"eta":"14:00-16:00","tracking_url":"https://track.example/SHP-100234"}}`,
	`{"event_id":"e1","type":"shipment.delayed","shipment_id":"S","recipient":{"phone":"+44 (0)20 7946 0958"},"data":{"reason":"storm","n":3,"ok":true,"x":null}}`,
	`{"event_id":"e2","type":"shipment.created","shipment_id":"S","recipient":{"name":" Zoë\r\nBcc: evil@example.com ","email":" ada@example.com "},"channels":["email","email"]}`,
	`{"event_id":"e3","type":"t","shipment_id":"s","recipient":{"phone":"   ","email":"a@b.example"}}`,
	`{"event_id":"e","EVENT_ID":"f","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"}}`,
	`{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567","phone":"+31207654321"}}`,
	`{"event_id":"e","type":"t","shipment_id":"s","recipient":{"name":"\ud800","phone":"+31201234567"}}`,
	`{"event_id":"e","type":"t","shipment_id":"s","recipient":{"phone":"+31201234567"},"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"event_id":"e","type":"t","shipment_id":"s","recipient":{},"channels":[]}`,
	`{"event_id":"e\u202e","type":"t","shipment_id":"s","recipient":{"email":"\"a b\"@example.com"}}`,
	`{"event_id":"e","type":"t","shipment_id":"s","occurred_at":"not a time","recipient":{"email":"Ada <ada@example.com>"}}`,
	`{"event_id":"e","type":"t","shipment_id":"s","recipient":{"email":"ada@example.com"},"data":{"a":{"b":1}}}`,
	`[]`, `null`, `"x"`, `{`, `{"event_id":"e"}garbage`, "\xff\xfe",
	`{"event_id":"a\u0062","type":"t","occurred_at":null,"shipment_id":"s","recipient":{"name":null,"phone":"+31201234567"},"channels":null,"data":null}`,
	`{"x":1,"x":2,"event_id":"a","type":"t","shipment_id":"s","recipient":{"email":"a@b.example"}}`,
	`{"event_id":"a","type":"t","shipment_id":"s","recipient":{"email":"a@b.example"},"data":{"k":"v","k":"w"}}`,
	`{"event_id":"a","type":"t","shipment_id":"s","recipient":{"email":"a@b.example"},"channels":["email",null]}`,
	`{"event_id":1,"type":"t","shipment_id":"s","recipient":{"email":"a@b.example"}}`,
	` { "event_id" : "a" , "type" : "t" , "shipment_id" : "s" , "recipient" : { "email" : "a@b.example" } , "data" : { "n" : -1.5e3 , "b" : false } } `,
	"{\"event_id\":\"e\",\"type\":\"t\",\"shipment_id\":\"s\",\"recipient\":{\"0\x7f\":1}}",
	`{"event_id":"e","type":"t","shipment_id":"s","recipient":{"mo\u0001bile":"+31201234567"}}`,
}

// FuzzDecode: Decode either returns an *InvalidEventError with a short,
// printable reason, or an event that holds every invariant the rest of the
// worker relies on, and that decodes to itself when encoded again.
func FuzzDecode(f *testing.F) {
	for _, s := range seedRecords {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		ev, err := domain.Decode(value)
		if err != nil {
			var ie *domain.InvalidEventError
			if !errors.As(err, &ie) {
				t.Fatalf("Decode error %T %v, want *InvalidEventError", err, err)
			}
			checkReason(t, err.Error())
			return
		}
		checkEventInvariants(t, ev)

		// Normalisation is a fixed point: what Decode returns, encoded,
		// decodes to the same event. A value Decode would change twice is
		// one two readers could see differently.
		b, merr := encodeEvent(ev)
		if merr != nil {
			return // a year past 9999
		}
		again, err := domain.Decode(b)
		if err != nil {
			t.Fatalf("Decode(%s) = %v; it decoded from %q", b, err, value)
		}
		if !again.OccurredAt.Equal(ev.OccurredAt) {
			t.Fatalf("occurred_at %v became %v", ev.OccurredAt, again.OccurredAt)
		}
		again.OccurredAt, ev.OccurredAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(again, ev) {
			t.Fatalf("not a fixed point:\n first %#v\nsecond %#v", ev, again)
		}
	})
}

// encodeEvent returns ev as a record carries it, its recipient under the
// Builtin channels' fields.
func encodeEvent(ev domain.Event) ([]byte, error) {
	type recipient struct {
		Name  string `json:"name"`
		Phone string `json:"phone,omitempty"`
		Email string `json:"email,omitempty"`
	}
	rc := recipient{ev.Recipient.Name, ev.Recipient.Address(ports.ChannelSMS), ev.Recipient.Address(ports.ChannelEmail)}
	return json.Marshal(struct {
		domain.Event
		Recipient recipient `json:"recipient"`
	}{ev, rc})
}

// checkReason: a dead letter's reason is read by a person. It is short, one
// line, valid UTF-8, and never quotes a whole hostile value.
func checkReason(t *testing.T, reason string) {
	t.Helper()
	if len(reason) > 512 {
		t.Fatalf("reason of %d bytes: %.80q...", len(reason), reason)
	}
	if !utf8.ValidString(reason) {
		t.Fatalf("reason %q is not valid UTF-8", reason)
	}
	for _, r := range reason {
		if unicode.IsControl(r) {
			t.Fatalf("reason %q holds a control character", reason)
		}
	}
}

func checkEventInvariants(t *testing.T, ev domain.Event) {
	t.Helper()
	for field, id := range map[string]string{"event_id": ev.EventID, "type": ev.Type, "shipment_id": ev.ShipmentID} {
		if id == "" || len(id) > domain.MaxIDBytes || !utf8.ValidString(id) {
			t.Fatalf("%s %q: empty, too long or not UTF-8", field, id)
		}
		for _, r := range id {
			if unicode.IsSpace(r) || !unicode.IsGraphic(r) || r == utf8.RuneError {
				t.Fatalf("%s %q holds %U", field, id, r)
			}
		}
	}
	rc := ev.Recipient
	if rc.Address(ports.ChannelSMS) == "" && rc.Address(ports.ChannelEmail) == "" {
		t.Fatal("recipient without phone or email")
	}
	if rc.Address(ports.ChannelSMS) != "" {
		if !e164.MatchString(rc.Address(ports.ChannelSMS)) {
			t.Fatalf("phone %q is not E.164", rc.Address(ports.ChannelSMS))
		}
		if p, err := ports.NormalizePhone(rc.Address(ports.ChannelSMS)); err != nil || p != rc.Address(ports.ChannelSMS) {
			t.Fatalf("phone %q re-normalises to %q, %v", rc.Address(ports.ChannelSMS), p, err)
		}
	}
	if rc.Address(ports.ChannelEmail) != "" {
		a, err := mail.ParseAddress(rc.Address(ports.ChannelEmail))
		if err != nil || a.Name != "" || a.Address != rc.Address(ports.ChannelEmail) || len(rc.Address(ports.ChannelEmail)) > domain.MaxEmailLen {
			t.Fatalf("email %q is not a bare address (%v)", rc.Address(ports.ChannelEmail), err)
		}
		for _, r := range rc.Address(ports.ChannelEmail) {
			if unicode.IsSpace(r) || !unicode.IsGraphic(r) || r == utf8.RuneError {
				t.Fatalf("email %q holds %U", rc.Address(ports.ChannelEmail), r)
			}
		}
	}
	checkOneLine(t, "name", rc.Name, domain.MaxNameRunes)
	if len(ev.Channels) == 0 {
		t.Fatal("no channels")
	}
	seen := map[ports.Channel]bool{}
	for _, ch := range ev.Channels {
		if (ch != ports.ChannelSMS && ch != ports.ChannelEmail) || seen[ch] || rc.Address(ch) == "" {
			t.Fatalf("channels %v: %q unknown, repeated or without an address", ev.Channels, ch)
		}
		seen[ch] = true
	}
	for k, v := range ev.Data {
		if !utf8.ValidString(k) || !utf8.ValidString(v) || strings.ContainsRune(k+v, utf8.RuneError) {
			t.Fatalf("data %q: %q is not clean UTF-8", k, v)
		}
	}
}

// checkOneLine: s can go into a mail header or an SMS as is.
func checkOneLine(t *testing.T, what, s string, maxRunes int) {
	t.Helper()
	if !utf8.ValidString(s) || strings.ContainsRune(s, utf8.RuneError) {
		t.Fatalf("%s %q is not clean UTF-8", what, s)
	}
	if n := utf8.RuneCountInString(s); n > maxRunes {
		t.Fatalf("%s of %d runes, over %d", what, n, maxRunes)
	}
	if s != strings.TrimSpace(s) || strings.Contains(s, "  ") {
		t.Fatalf("%s %q has white space at an end or doubled", what, s)
	}
	for _, r := range s {
		if r != ' ' && (unicode.IsSpace(r) || unicode.IsControl(r)) {
			t.Fatalf("%s %q holds %U", what, s, r)
		}
	}
}

// dataKeys are every data key the embedded templates print. URL-like keys
// get the url argument, the others the text one.
var (
	urlKeys  = []string{"tracking_url", "reschedule_url"}
	textKeys = []string{"eta", "reason", "new_eta", "delivered_to"}
)

var hrefRe = regexp.MustCompile(`(?i)href\s*=\s*"([^"]*)"`)

// schemeRe is a URL scheme's grammar (RFC 3986), lower-cased.
var schemeRe = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// linkScheme returns the scheme a browser reads in href, an attribute's
// escaped value: unescaped, without the surrounding spaces and the tabs
// and line breaks a URL parser drops, lower-cased; "" for a relative URL
// (such as "/x:y", which names a path, not a scheme).
func linkScheme(href string) string {
	u := strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, strings.TrimFunc(html.UnescapeString(href), func(r rune) bool { return r <= ' ' }))
	i := strings.IndexByte(u, ':')
	if i <= 0 || !schemeRe.MatchString(strings.ToLower(u[:i])) {
		return ""
	}
	return strings.ToLower(u[:i])
}

// FuzzRender: whatever the event holds (built directly, so Decode's checks
// do not shield Render), every embedded type renders on every channel; the
// SMS is within the provider's limit; the subject and recipient name are one
// line; data never adds a tag or a script URL to the HTML.
func FuzzRender(f *testing.F) {
	tpl, err := domain.LoadTemplates(nil)
	if err != nil {
		f.Fatal(err)
	}
	types := tpl.Types()
	f.Add(uint8(0), "e1", "SHP-1", "Ada", "14:00-16:00", "https://track.example/SHP-1")
	f.Add(uint8(1), "e2", "SHP-<b>", `<script>alert("x")</script>`, `"'><script>alert(1)</script>`, "javascript:alert(1)")
	f.Add(uint8(2), "e3", "S\r\nBcc: evil@example.com", "Ada\r\nBcc: evil@example.com", "a\nb", " JaVaScRiPt:alert(1)")
	f.Add(uint8(3), "e4", "S", strings.Repeat("😀", 700), strings.Repeat("😀", 1000), strings.Repeat("x", 2000))
	f.Add(uint8(4), "e5", strings.Repeat("S", 300), "Zoë 山田", "\u2028\u0085\x00", "data:text/html,<script>")
	f.Add(uint8(0), "", "", "", "", "")
	f.Fuzz(func(t *testing.T, typ uint8, eventID, shipmentID, name, text, url string) {
		ev := domain.Event{
			EventID: eventID, Type: types[int(typ)%len(types)], ShipmentID: shipmentID,
			Recipient: domain.Recipient{Name: name, Addresses: map[ports.Channel]string{ports.ChannelSMS: "+31201234567", ports.ChannelEmail: "ada@example.com"}},
			Data:      domain.Data{},
		}
		// The same event with every fuzzed value replaced by an inert one
		// of the same emptiness: it takes the same template branches, so
		// any extra '<' in the real render came from the data.
		inert := ev
		inert.ShipmentID, inert.Recipient.Name = placeholder(shipmentID), placeholder(name)
		inert.Data = domain.Data{}
		for _, k := range textKeys {
			ev.Data[k], inert.Data[k] = text, placeholder(text)
		}
		for _, k := range urlKeys {
			ev.Data[k], inert.Data[k] = url, placeholder(url)
		}

		for _, ch := range tpl.Channels() {
			m, err := tpl.Render(ev, ch)
			if err != nil {
				t.Fatalf("Render %s/%s: %v", ev.Type, ch, err)
			}
			if m.IdempotencyKey != domain.NotificationKey(eventID, ch) || m.Channel != ch {
				t.Fatalf("message key %q channel %q", m.IdempotencyKey, m.Channel)
			}
			if strings.ContainsAny(m.ToName, "\r\n") {
				t.Fatalf("ToName %q holds a line break", m.ToName)
			}
			switch ch {
			case ports.ChannelSMS:
				if n := len(utf16.Encode([]rune(m.Text))); n > domain.MaxSMSRunes {
					t.Fatalf("SMS of %d UTF-16 units, over %d", n, domain.MaxSMSRunes)
				}
				if n := utf8.RuneCountInString(m.Text); n > domain.MaxSMSRunes {
					t.Fatalf("SMS of %d runes, over %d", n, domain.MaxSMSRunes)
				}
				if m.Text == "" {
					t.Fatal("empty SMS")
				}
			case ports.ChannelEmail:
				if strings.ContainsAny(m.Subject, "\r\n") {
					t.Fatalf("subject %q holds a line break", m.Subject)
				}
				if n := utf8.RuneCountInString(m.Subject); n > domain.MaxSubjectRunes {
					t.Fatalf("subject of %d runes, over %d", n, domain.MaxSubjectRunes)
				}
				if strings.Contains(strings.ToLower(m.HTML), "<script") {
					t.Fatalf("HTML holds a script tag: %s", m.HTML)
				}
				want, err := tpl.Render(inert, ch)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := strings.Count(m.HTML, "<"), strings.Count(want.HTML, "<"); got != want {
					t.Fatalf("data added %d '<' to the HTML: %s", got-want, m.HTML)
				}
				for _, h := range hrefRe.FindAllStringSubmatch(m.HTML, -1) {
					if s := linkScheme(h[1]); s != "" && s != "http" && s != "https" && s != "mailto" {
						t.Fatalf("HTML links to %q, scheme %q", h[1], s)
					}
				}
			}
		}
	})
}

func placeholder(s string) string {
	if s == "" {
		return ""
	}
	return "x"
}

// FuzzNormalizePhone: an accepted number is E.164, a valid number of its
// country, and re-normalises to itself; its digits are the input's, in
// order, but for a trunk prefix written after the country code ("+44 (0)20")
// that dialing from abroad drops. A refused number's reason holds no digit
// at all (the error is logged beside the number, masked), and no digit of
// the input reaches it.
func FuzzNormalizePhone(f *testing.F) {
	for _, s := range []string{
		"+31201234567", "+31 (20) 123-4567", " +44 20 7946 0958 ", "+44.20.7946.0958", "+44 (0)20 7946 0958",
		"+4402079460958", "+1 202-555-0123", "+12025550123", "+390612345678", "+4930123456", "+6834002",
		"0044 20 7946 0958", "555-1234", "+0123456789", "+1234567", "+1234567890123456", "++31201234567",
		"+1555123456７", "+15551234567", "+999123456789", "+1 555 01", "+44 20 7946 09581234",
		"+١٥٥٥١٢٣٤٥٦٧", "+1\u00a0555 123 4567", "+1555\n1234567", "", "+", "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		out, err := ports.NormalizePhone(p)
		if err != nil {
			reason := err.Error()
			checkReason(t, reason)
			if strings.ContainsFunc(strings.ReplaceAll(reason, "E.164", ""), unicode.IsDigit) {
				t.Fatalf("NormalizePhone(%q): reason %q holds a digit", p, reason)
			}
			return
		}
		if !e164.MatchString(out) {
			t.Fatalf("NormalizePhone(%q) = %q, not E.164", p, out)
		}
		if again, err := ports.NormalizePhone(out); err != nil || again != out {
			t.Fatalf("NormalizePhone(%q) = %q, %v; want the fixed point %q", out, again, err, out)
		}
		if in := digits(p); !trunkDropped(in, digits(out)) {
			t.Fatalf("NormalizePhone(%q) = %q: digits changed beyond a trunk prefix", p, out)
		}
	})
}

// trunkDropped reports whether out is in, or in with a run of at most two
// digits removed right after a country code of one to three digits.
func trunkDropped(in, out string) bool {
	if in == out {
		return true
	}
	n := len(in) - len(out)
	if n < 1 || n > 2 {
		return false
	}
	for cc := 1; cc <= 3 && cc <= len(out); cc++ {
		if in[:cc] == out[:cc] && in[cc+n:] == out[cc:] {
			return true
		}
	}
	return false
}

func digits(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// FuzzNotificationKey: no two different (event_id, channel) pairs share a
// key, whatever bytes either holds: the key parses back to its pair. For an
// event_id Decode accepts, the key on every known channel is at most
// MaxKeyBytes and header-safe.
func FuzzNotificationKey(f *testing.F) {
	f.Add("e1", "sms", "e1", "email")
	f.Add("x:e1", "sms", "e1", "sms:x")
	f.Add("sms:e1", "email", "e1", "email:sms")
	f.Add("", "sms", "", "sms:")
	f.Add("%3Ae", "a", "e", "a:")
	f.Add("\xff\x00:\r\n", "sms", strings.Repeat("k", 10000), "email")
	f.Fuzz(func(t *testing.T, id1, ch1, id2, ch2 string) {
		k1 := domain.NotificationKey(id1, ports.Channel(ch1))
		k2 := domain.NotificationKey(id2, ports.Channel(ch2))
		if (id1 != id2 || ch1 != ch2) && k1 == k2 {
			t.Fatalf("(%q, %q) and (%q, %q) share the key %q", id1, ch1, id2, ch2, k1)
		}
		if gotID, gotCh := parseKey(t, k1); gotID != id1 || gotCh != ch1 {
			t.Fatalf("key %q parses back to (%q, %q), want (%q, %q)", k1, gotID, gotCh, id1, ch1)
		}

		rec, _ := json.Marshal(map[string]any{
			"event_id": id1, "type": "shipment.created", "shipment_id": "S",
			"recipient": map[string]string{"phone": "+31201234567", "email": "ada@example.com"},
		})
		ev, err := domain.Decode(rec)
		if err != nil {
			return
		}
		for _, ch := range ev.Channels {
			k := domain.NotificationKey(ev.EventID, ch)
			if len(k) > domain.MaxKeyBytes || !utf8.ValidString(k) {
				t.Fatalf("key %q: %d bytes (max %d) or not UTF-8", k, len(k), domain.MaxKeyBytes)
			}
			for _, r := range k {
				if unicode.IsSpace(r) || !unicode.IsGraphic(r) {
					t.Fatalf("key %q holds %U: unsafe in a header", k, r)
				}
			}
		}
	})
}

// parseKey inverts NotificationKey: the first colon ends the channel, whose
// '%' and ':' were percent-encoded.
func parseKey(t *testing.T, key string) (eventID, ch string) {
	t.Helper()
	c, id, ok := strings.Cut(key, ":")
	if !ok {
		t.Fatalf("key %q has no colon", key)
	}
	return id, strings.NewReplacer("%3A", ":", "%25", "%").Replace(c)
}

// FuzzFingerprint checks the fingerprint's two promises: the same deciding
// fields give the same fingerprint, whatever else differs (the name,
// occurred_at, the order data was written in); and a change to any one
// deciding field (type, shipment, the channel's address, a data key or
// value) gives another.
func FuzzFingerprint(f *testing.F) {
	f.Add("shipment.out_for_delivery", "SHP-1", "+31201234567", "eta", "14:00", "url", "https://t.example/1", uint8(0), "x")
	f.Add("shipment.delivered", "", "", "", "", "", "", uint8(3), "")
	f.Add("t", "S:1", "a@b.example", "k", "v", "kv", "", uint8(5), "k")
	f.Fuzz(func(t *testing.T, typ, shipment, addr, k1, v1, k2, v2 string, which uint8, change string) {
		if k1 == k2 {
			v1 = v2 // one key: the map holds one value
		}
		ev := domain.Event{Type: typ, ShipmentID: shipment, Recipient: domain.Recipient{Name: "Ada", Addresses: map[ports.Channel]string{ports.ChannelSMS: addr, ports.ChannelEmail: addr}}, Data: domain.Data{k1: v1, k2: v2}}
		fp := domain.Fingerprint(ev, ports.ChannelSMS)
		if len(fp) != domain.FingerprintLen {
			t.Fatalf("fingerprint %q: length %d, want %d", fp, len(fp), domain.FingerprintLen)
		}

		same := ev
		same.Recipient.Name, same.OccurredAt, same.EventID = change, time.Unix(int64(which), 0), change
		same.Recipient.Addresses = map[ports.Channel]string{ports.ChannelSMS: addr, ports.ChannelEmail: addr + change} // not the SMS channel's address
		same.Data = domain.Data{k2: v2, k1: v1}
		if got := domain.Fingerprint(same, ports.ChannelSMS); got != fp {
			t.Fatalf("same deciding fields, fingerprints %q and %q", fp, got)
		}

		other := ev
		other.Data = domain.Data{k1: v1, k2: v2}
		switch which % 6 {
		case 0:
			other.Type = typ + change + "!"
		case 1:
			other.ShipmentID = shipment + change + "!"
		case 2:
			other.Recipient.Addresses = map[ports.Channel]string{ports.ChannelSMS: addr + change + "!", ports.ChannelEmail: addr}
		case 3:
			other.Data[k1] = v1 + change + "!"
		case 4:
			delete(other.Data, k1)
			other.Data[k1+change+"!"] = v1
		case 5:
			// Moving bytes between two fields must change it too.
			if k1 == k2 || change == "" {
				return
			}
			other.Type, other.ShipmentID = typ+change, strings.TrimPrefix(shipment, change)
			if other.ShipmentID == shipment {
				other.ShipmentID = change + shipment
			}
		}
		if k1 == k2 && which%6 == 4 {
			return // the rename also dropped k2
		}
		if got := domain.Fingerprint(other, ports.ChannelSMS); got == fp {
			t.Fatalf("change %d (%q) left the fingerprint %q unchanged", which%6, change, fp)
		}
	})
}

// TestLinkScheme holds FuzzRender's link check to what a browser reads.
func TestLinkScheme(t *testing.T) {
	for href, want := range map[string]string{
		"javascript:alert(1)":         "javascript",
		" JaVa\tScript:alert(1)":      "javascript",
		"&#106;avascript:alert(1)":    "javascript",
		"data:text/html,x":            "data",
		"https://track.example/SHP-1": "https",
		"/SCRiPt:":                    "",
		"#ZgotmplZ":                   "",
		"track/x:y":                   "",
	} {
		if got := linkScheme(href); got != want {
			t.Errorf("linkScheme(%q) = %q, want %q", href, got, want)
		}
	}
}
