package domain

import (
	"io/fs"
	"strings"

	"github.com/harborlight/notification-worker/ports"
)

// ChannelSpec is what the domain knows of one way to reach a customer: the
// recipient field its address is read from, how that address is checked,
// normalised and masked, and how a message is rendered for it. A channel is
// a value, not a case in a switch: the worker is given its channels (see
// LoadTemplates), and each of them is what DecodeEvent, Render, Fingerprint and
// the logs ask about an address.
//
// Every function field must be safe for concurrent use and free of side
// effects; none may be nil but Shaped.
type ChannelSpec struct {
	// Name is the channel's name: in an event's "channels", in idempotency
	// keys and in metrics labels.
	Name ports.Channel
	// Field is the event's recipient field holding the address
	// ("recipient": {"<Field>": ...}). A blank value is no address.
	Field string
	// Normalize checks addr (trimmed of surrounding white space) and
	// returns it in the one form the notifier is given. Its error says why
	// addr is refused and never quotes addr: DecodeEvent shows the masked
	// address beside it, or only its length.
	Normalize func(addr string) (string, error)
	// Shaped reports whether a refused addr could be an address of this
	// kind, so that its masked form may be shown in the error; for any
	// other text (a name in the wrong field, a 10 kB value) a mask that
	// keeps a few characters could reveal part of it, and only its length
	// is shown. Nil: never shown.
	Shaped func(addr string) bool
	// Mask returns addr cut down to what a log or an error may show:
	// enough to tell two customers apart, too little to contact either.
	// It never returns a non-empty addr unchanged.
	Mask func(addr string) string
	// Blocks are the text/template blocks every "<type>.tmpl" must define
	// for this channel; LoadTemplates refuses templates that lack one.
	Blocks []string
	// Templates holds the channel's own "<type>.tmpl" files, defining its
	// Blocks for the event types the worker's templates define: a channel
	// brings its text with it. A block the event type's own file defines
	// (embedded, or from TEMPLATES_DIR) wins. Nil for a channel whose blocks
	// are in the worker's templates.
	Templates fs.FS
	// Render fills m's content (Subject, Text, HTML) from the rendered
	// blocks. Its errors are template errors: permanent for the event.
	Render func(r Rendered, m *ports.Message) error
}

// SMS is the text-message channel: an E.164 phone number in
// recipient.phone, masked by ports.MaskPhone, and the "sms" block cut to
// MaxSMSRunes.
var SMS = ChannelSpec{
	Name:      ports.ChannelSMS,
	Field:     "phone",
	Normalize: ports.NormalizePhone,
	Shaped:    ports.PhoneShaped,
	Mask:      ports.MaskPhone,
	Blocks:    []string{"sms"},
	Render: func(r Rendered, m *ports.Message) error {
		text, err := r.Text("sms")
		m.Text = Truncate(strings.TrimSpace(text), MaxSMSRunes)
		return err
	},
}

// Email is the email channel: a bare address in recipient.email, masked by
// ports.MaskEmail; the "subject" block (one line, cut to MaxSubjectRunes),
// the "text" block as the plain-text part and "<type>.html" as the HTML
// part.
var Email = ChannelSpec{
	Name:      ports.ChannelEmail,
	Field:     "email",
	Normalize: normalizeEmail,
	Shaped:    ports.EmailShaped,
	Mask:      ports.MaskEmail,
	Blocks:    []string{"subject", "text"},
	Render: func(r Rendered, m *ports.Message) error {
		subject, err := r.Text("subject")
		if err != nil {
			return err
		}
		m.Subject = Truncate(OneLine(subject), MaxSubjectRunes)
		if m.Text, err = r.Text("text"); err != nil {
			return err
		}
		m.HTML, err = r.HTML()
		return err
	},
}

// Builtin are SMS and Email, in that order: the channels of Decode, and of
// LoadTemplates when it is given none. The worker passes its own list.
var Builtin = []ChannelSpec{SMS, Email}
