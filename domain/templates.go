package domain

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"maps"
	"slices"
	"strings"
	texttemplate "text/template"
	"time"
	"unicode/utf16"

	"github.com/harborlight/notification-worker/ports"
)

// Limits applied to rendered text. Twilio refuses a body over 1600
// characters; rather than lose the notification, the body is cut at that
// length with an ellipsis (a template that overflows is a template bug, and
// the customer still learns what happened). Twilio counts an emoji or any
// other character outside the Basic Multilingual Plane as two, so both
// limits count UTF-16 code units (Truncate): a body is at most MaxSMSRunes
// of them, hence at most MaxSMSRunes runes whatever its script. A subject
// is one line of at most MaxSubjectRunes.
const (
	MaxSMSRunes     = 1600
	MaxSubjectRunes = 200
)

//go:embed templates
var embedded embed.FS

// ErrUnknownEventType is returned (wrapped) by Render for an event type that
// has no template. It is permanent: the record goes to the dead letter topic.
var ErrUnknownEventType = errors.New("domain: unknown event type")

// Templates turns records into messages for a set of channels: it decodes
// an event with the channels' address rules (DecodeEvent) and renders the
// messages of each event type on each channel (Render). Each type has two
// files: "<type>.tmpl" (text/template, defining every channel's Blocks:
// "sms", "subject" and "text" for the Builtin channels) and "<type>.html"
// (html/template, the email's HTML body, escaped by context). Templates is
// immutable and safe for concurrent use.
type Templates struct {
	text  map[string]*texttemplate.Template
	html  map[string]*htmltemplate.Template
	chans []ChannelSpec
}

// LoadTemplates parses the embedded templates and then, if overrides is
// not nil, the files at its root (an operator's TEMPLATES_DIR, opened by
// the caller), which replace embedded files of the same name and may add
// event types, for chans (the Builtin channels when none is given), in the
// order a fan-out sends them. Every type must end up with both files and
// every channel's text blocks, or LoadTemplates fails naming what is
// missing. A channel whose blocks the embedded templates lack brings them
// in Channel.Templates. Two channels of one name or one recipient field
// are refused.
func LoadTemplates(overrides fs.FS, chans ...ChannelSpec) (*Templates, error) {
	if len(chans) == 0 {
		chans = Builtin
	}
	if err := checkChannels(chans); err != nil {
		return nil, err
	}
	files, err := templateFiles(overrides)
	if err != nil {
		return nil, err
	}
	t := &Templates{text: map[string]*texttemplate.Template{}, html: map[string]*htmltemplate.Template{}, chans: slices.Clone(chans)}
	problems := t.parse(files)
	for _, c := range chans {
		problems = append(problems, t.addBlocks(c)...)
	}
	problems = append(problems, t.missing()...)
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, fmt.Errorf("templates: %s", strings.Join(problems, "; "))
	}
	return t, nil
}

// templateFiles returns the embedded template files by name, replaced and
// added to by those of overrides (nil: none).
func templateFiles(overrides fs.FS) (map[string][]byte, error) {
	sub, err := fs.Sub(embedded, "templates")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, fsys := range []fs.FS{sub, overrides} {
		if fsys == nil {
			continue
		}
		if err := readTemplates(fsys, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// parse parses files into t, each "<type>.tmpl" and "<type>.html" under
// its type, and returns what did not parse.
func (t *Templates) parse(files map[string][]byte) (problems []string) {
	for name, body := range files {
		if typ, ok := strings.CutSuffix(name, ".tmpl"); ok {
			tt, err := texttemplate.New(typ).Option("missingkey=zero").Parse(string(body))
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			t.text[typ] = tt
		} else if typ, ok := strings.CutSuffix(name, ".html"); ok {
			ht, err := htmltemplate.New(typ).Option("missingkey=zero").Parse(string(body))
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			t.html[typ] = ht
		}
	}
	return problems
}

// addBlocks adds the blocks c's own Templates define to the text templates
// of the event types t has, where the type's own file does not define them:
// an operator's TEMPLATES_DIR may reword a channel's text. It returns what
// could not be read or parsed.
func (t *Templates) addBlocks(c ChannelSpec) (problems []string) {
	if c.Templates == nil {
		return nil
	}
	files := map[string][]byte{}
	if err := readTemplates(c.Templates, files); err != nil {
		return []string{fmt.Sprintf("templates of channel %s: %v", c.Name, err)}
	}
	for name, body := range files {
		typ, ok := strings.CutSuffix(name, ".tmpl")
		tt := t.text[typ]
		if !ok || tt == nil {
			continue
		}
		add, err := texttemplate.New(typ).Option("missingkey=zero").Parse(string(body))
		if err != nil {
			problems = append(problems, fmt.Sprintf("channel %s: %v", c.Name, err))
			continue
		}
		for _, b := range add.Templates() {
			if b.Name() != typ && tt.Lookup(b.Name()) == nil {
				if _, err := tt.AddParseTree(b.Name(), b.Tree); err != nil {
					problems = append(problems, fmt.Sprintf("channel %s: %s: %v", c.Name, name, err))
				}
			}
		}
	}
	return problems
}

// missing names every block a channel needs that a type's text template
// lacks, and every type with one of its two files only.
func (t *Templates) missing() (problems []string) {
	for typ, tt := range t.text {
		for _, c := range t.chans {
			for _, block := range c.Blocks {
				if tt.Lookup(block) == nil {
					problems = append(problems, fmt.Sprintf("%s.tmpl: no {{define %q}}", typ, block))
				}
			}
		}
		if t.html[typ] == nil {
			problems = append(problems, typ+": no "+typ+".html")
		}
	}
	for typ := range t.html {
		if t.text[typ] == nil {
			problems = append(problems, typ+": no "+typ+".tmpl")
		}
	}
	return problems
}

// readTemplates reads the "*.tmpl" and "*.html" files at fsys's root into
// into, by name.
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
func (t *Templates) Types() []string { return slices.Sorted(maps.Keys(t.text)) }

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

// checkChannels refuses a list that names a channel twice or reads one
// recipient field for two channels, and a channel missing what DecodeEvent
// and Render call.
func checkChannels(chans []ChannelSpec) error {
	names, fields := map[ports.Channel]bool{}, map[string]bool{"name": true}
	for _, c := range chans {
		switch {
		case c.Name == "" || c.Field == "" || c.Normalize == nil || c.Mask == nil || c.Render == nil:
			return fmt.Errorf("channel %q: Name, Field, Normalize, Mask and Render are required", c.Name)
		case names[c.Name]:
			return fmt.Errorf("channel %q is given twice", c.Name)
		case fields[c.Field]:
			return fmt.Errorf("channel %s: recipient field %q is another's", c.Name, c.Field)
		}
		names[c.Name], fields[c.Field] = true, true
	}
	return nil
}

// DecodeEvent parses and validates a record value: the event, its
// recipient's address for each of t's channels (Channel.Field), normalised,
// and its channels, defaulted to every channel the recipient has an
// address for, in t's order. A recipient field that is no channel's is
// refused. Any error is an *InvalidEventError; Decode's doc says what else
// is refused.
func (t *Templates) DecodeEvent(value []byte) (Event, error) { return decode(value, t.chans) }

// Channels returns t's channels' names, in the order a fan-out sends them.
func (t *Templates) Channels() []ports.Channel {
	names := make([]ports.Channel, len(t.chans))
	for n, c := range t.chans {
		names[n] = c.Name
	}
	return names
}

// Render returns the message for ev on channel ch, its address masked by
// the channel in ToMasked. Errors wrap ErrUnknownEventType or a template
// execution error; both are permanent for this event.
func (t *Templates) Render(ev Event, ch ports.Channel) (ports.Message, error) {
	tt, ok := t.text[ev.Type]
	if !ok {
		return ports.Message{}, fmt.Errorf("%w %q", ErrUnknownEventType, ev.Type)
	}
	i := slices.IndexFunc(t.chans, func(c ChannelSpec) bool { return c.Name == ch })
	if i < 0 {
		return ports.Message{}, fmt.Errorf("render %s: unknown channel %q", ev.Type, ch)
	}
	c := t.chans[i]
	// Decode already put the name on one line; an Event built by other
	// means gets the same treatment, since ToName goes into a mail header.
	name := OneLine(ev.Recipient.Name)
	v := view{
		EventID: ev.EventID, Type: ev.Type, ShipmentID: ev.ShipmentID,
		OccurredAt: ev.OccurredAt, Name: name, Data: ev.Data,
	}
	to := ev.Recipient.Address(ch)
	m := ports.Message{
		IdempotencyKey: NotificationKey(ev.EventID, ch),
		EventID:        ev.EventID,
		Channel:        ch,
		To:             to,
		ToMasked:       c.Mask(to),
		ToName:         name,
	}
	if err := c.Render(Rendered{text: tt, html: t.html[ev.Type], v: v}, &m); err != nil {
		return ports.Message{}, fmt.Errorf("render %s for %s: %w", ev.Type, ch, err)
	}
	return m, nil
}

// Rendered gives a Channel's Render the blocks of one event's templates.
type Rendered struct {
	text *texttemplate.Template
	html *htmltemplate.Template
	v    view
}

// Text executes the text block name ("sms", "subject", ...).
func (r Rendered) Text(name string) (string, error) {
	var b strings.Builder
	// Room for the usual block (an SMS is one or two hundred bytes), so
	// that its many small writes do not grow the buffer step by step.
	b.Grow(256)
	err := r.text.ExecuteTemplate(&b, name, r.v)
	return b.String(), err
}

// HTML executes the event type's "<type>.html".
func (r Rendered) HTML() (string, error) {
	var b bytes.Buffer
	err := r.html.Execute(&b, r.v)
	return b.String(), err
}

// Truncate cuts s to at most n UTF-16 code units, the last one an ellipsis
// when cut (the ellipsis is one unit): the length a provider that counts an
// emoji as two characters (Twilio) sees, and so at most n runes. It never
// splits a rune.
func Truncate(s string, n int) string {
	units, cut := 0, -1 // cut: where the first rune that leaves no room for "…" starts
	for i, r := range s {
		if units += utf16.RuneLen(r); units > n-1 && cut < 0 {
			cut = i
		}
		if units > n {
			return s[:cut] + "…"
		}
	}
	return s
}
