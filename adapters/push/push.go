// Package push is the push channel: a notification to a device, sent
// through a push gateway's HTTPS API. It is the whole channel in one
// folder: Channel (the recipient field device_token, its rule and mask,
// its template block) and Provider (the gateway's notifier, which reads
// and checks its own settings). The worker offers it by one row in its
// channel table (cmd/notification-worker/channels.go); docs/extending.md
// walks through it.
package push

import (
	"embed"
	"errors"
	"io/fs"
	"strings"

	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// Name is the channel's name.
const Name ports.Channel = "push"

// MaxTokenBytes bounds a device token; gateways issue 64 to 200 bytes.
const MaxTokenBytes = 4096

// MaxBodyRunes is the longest body sent; a longer one is cut with an
// ellipsis.
const MaxBodyRunes = 1000

//go:embed templates
var embedded embed.FS

// templates holds a "push" block for every event type the embedded
// templates define.
var templates = func() fs.FS {
	sub, err := fs.Sub(embedded, "templates")
	if err != nil {
		panic(err)
	}
	return sub
}()

// Channel is the push channel as the domain knows it: the address is
// recipient.device_token, letters, digits and ":_-." only; it is masked to
// its last four characters; the message's Text is the "push" block.
var Channel = domain.ChannelSpec{
	Name:      Name,
	Field:     "device_token",
	Normalize: normalizeToken,
	Shaped:    func(tok string) bool { return len(tok) <= MaxTokenBytes && normalizeTokenErr(tok) == nil },
	Mask:      MaskToken,
	Blocks:    []string{"push"},
	Templates: templates,
	Render: func(r domain.Rendered, m *ports.Message) error {
		body, err := r.Text("push")
		m.Text = domain.Truncate(domain.OneLine(body), MaxBodyRunes)
		return err
	},
}

func normalizeToken(tok string) (string, error) {
	if len(tok) > MaxTokenBytes {
		return "", errors.New("device token longer than 4096 bytes")
	}
	return tok, normalizeTokenErr(tok)
}

func normalizeTokenErr(tok string) error {
	for _, r := range tok {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_-.", r)) {
			return errors.New("not a device token: want letters, digits, ':', '_', '-' or '.'")
		}
	}
	return nil
}

// MaskToken keeps the last 4 characters of a token of at least 12, and
// masks every other one ("*********wxyz"); a shorter token is masked whole.
func MaskToken(tok string) string {
	r := []rune(tok)
	switch {
	case len(r) == 0:
		return ""
	case len(r) < 12:
		return strings.Repeat("*", max(len(r), 3))
	}
	return strings.Repeat("*", len(r)-4) + string(r[len(r)-4:])
}
