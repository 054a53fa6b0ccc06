package domain

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"os"
	"sort"
	"strings"
	texttemplate "text/template"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/harborlight/notification-worker/ports"
)

// Limits applied to rendered text. Twilio refuses a body over 1600
// characters; rather than lose the notification, the body is cut at that
// length with an ellipsis (a template that overflows is a template bug, and
// the customer still learns what happened). Twilio counts an emoji or any
// other character outside the Basic Multilingual Plane as two, so the SMS
// rule counts UTF-16 code units: a body is at most MaxSMSRunes of them,
// hence at most MaxSMSRunes runes whatever its script. A subject is one line
// of at most MaxSubjectRunes.
const (
	MaxSMSRunes     = 1600
	MaxSubjectRunes = 200
)

//go:embed templates
var embedded embed.FS

// ErrUnknownEventType is returned (wrapped) by Render for an event type that
// has no template. It is permanent: the record goes to the dead letter topic.
var ErrUnknownEventType = errors.New("domain: unknown event type")

// Templates renders the messages of each event type. Each type has two
// files: "<type>.tmpl" (text/template, defining "sms", "subject" and "text")
// and "<type>.html" (html/template, the email's HTML body, escaped by
// context). Templates is immutable and safe for concurrent use.
type Templates struct {
	text map[string]*texttemplate.Template
	html map[string]*htmltemplate.Template
}

// LoadTemplates parses the embedded templates and then, if dir is not empty,
// the files in dir, which replace embedded files of the same name and may add
// event types. Every type must end up with both files and all three text
// blocks, or LoadTemplates fails naming what is missing.
func LoadTemplates(dir string) (*Templates, error) {
	sub, err := fs.Sub(embedded, "templates")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	if err := readTemplates(sub, files); err != nil {
		return nil, err
	}
	if dir != "" {
		if err := readTemplates(os.DirFS(dir), files); err != nil {
			return nil, fmt.Errorf("templates dir %s: %w", dir, err)
		}
	}
	t := &Templates{text: map[string]*texttemplate.Template{}, html: map[string]*htmltemplate.Template{}}
	var problems []string
	for name, body := range files {
		switch {
		case strings.HasSuffix(name, ".tmpl"):
			typ := strings.TrimSuffix(name, ".tmpl")
			tt, err := texttemplate.New(typ).Option("missingkey=zero").Parse(string(body))
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			for _, block := range []string{"sms", "subject", "text"} {
				if tt.Lookup(block) == nil {
					problems = append(problems, fmt.Sprintf("%s: no {{define %q}}", name, block))
				}
			}
			t.text[typ] = tt
		case strings.HasSuffix(name, ".html"):
			typ := strings.TrimSuffix(name, ".html")
			ht, err := htmltemplate.New(typ).Option("missingkey=zero").Parse(string(body))
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			t.html[typ] = ht
		}
	}
	for typ := range t.text {
		if t.html[typ] == nil {
			problems = append(problems, typ+": no "+typ+".html")
		}
	}
	for typ := range t.html {
		if t.text[typ] == nil {
			problems = append(problems, typ+": no "+typ+".tmpl")
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("templates: %s", strings.Join(problems, "; "))
	}
	return t, nil
}

func readTemplates(fsys fs.FS, into map[string][]byte) error {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".tmpl") || strings.HasSuffix(e.Name(), ".html")) {
			continue
		}
		b, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return err
		}
		into[e.Name()] = b
	}
	return nil
}

// Types returns the event types that have templates, sorted.
func (t *Templates) Types() []string {
	types := make([]string, 0, len(t.text))
	for typ := range t.text {
		types = append(types, typ)
	}
	sort.Strings(types)
	return types
}

// view is what a template sees. It is a copy, not the Event, so templates
// cannot reach anything a customer should not read.
type view struct {
	EventID    string
	Type       string
	ShipmentID string
	OccurredAt time.Time
	Name       string
	Data       Data
}

// Render returns the message for ev on channel ch. Errors wrap
// ErrUnknownEventType or a template execution error; both are permanent for
// this event.
func (t *Templates) Render(ev Event, ch ports.Channel) (ports.Message, error) {
	tt, ok := t.text[ev.Type]
	if !ok {
		return ports.Message{}, fmt.Errorf("%w %q", ErrUnknownEventType, ev.Type)
	}
	// Decode already put the name on one line; an Event built by other
	// means gets the same treatment, since ToName goes into a mail header.
	name := oneLine(ev.Recipient.Name)
	v := view{
		EventID: ev.EventID, Type: ev.Type, ShipmentID: ev.ShipmentID,
		OccurredAt: ev.OccurredAt, Name: name, Data: ev.Data,
	}
	m := ports.Message{
		IdempotencyKey: NotificationKey(ev.EventID, ch),
		EventID:        ev.EventID,
		Channel:        ch,
		To:             ev.Recipient.Address(ch),
		ToName:         name,
	}
	var err error
	switch ch {
	case ports.ChannelSMS:
		m.Text, err = execText(tt, "sms", v)
		m.Text = truncateUTF16(strings.TrimSpace(m.Text), MaxSMSRunes)
	case ports.ChannelEmail:
		var subject string
		if subject, err = execText(tt, "subject", v); err == nil {
			m.Subject = truncate(oneLine(subject), MaxSubjectRunes)
			if m.Text, err = execText(tt, "text", v); err == nil {
				var b bytes.Buffer
				err = t.html[ev.Type].Execute(&b, v)
				m.HTML = b.String()
			}
		}
	default:
		return ports.Message{}, fmt.Errorf("render %s: unknown channel %q", ev.Type, ch)
	}
	if err != nil {
		return ports.Message{}, fmt.Errorf("render %s for %s: %w", ev.Type, ch, err)
	}
	return m, nil
}

func execText(t *texttemplate.Template, name string, v view) (string, error) {
	var b strings.Builder
	err := t.ExecuteTemplate(&b, name, v)
	return b.String(), err
}

// truncate cuts s to at most n runes, the last one an ellipsis when cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}

// truncateUTF16 cuts s to at most n UTF-16 code units, the last one an
// ellipsis when cut (the ellipsis is one unit). It never splits a rune.
func truncateUTF16(s string, n int) string {
	units := 0
	for _, r := range s {
		units += utf16.RuneLen(r)
	}
	if units <= n {
		return s
	}
	units = 0
	for i, r := range s {
		if units+utf16.RuneLen(r) > n-1 {
			return s[:i] + "…"
		}
		units += utf16.RuneLen(r)
	}
	return s // unreachable: s has more than n units
}
