// Package console is a ports.Notifier that prints each notification instead
// of sending it: the embedded run and dry runs use it so a person can watch
// what the worker would have sent, without a provider account.
package console

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

var _ ports.Notifier = (*Notifier)(nil)

// Notifier writes one line per message to an io.Writer. It is safe for
// concurrent use: writes are serialized, so lines from concurrent sends never
// interleave.
type Notifier struct {
	mu  sync.Mutex
	w   io.Writer
	n   uint64
	buf []byte // the line being written; guarded by mu
}

// New returns a Notifier that writes to w. Every send calls w.Write once, under
// a lock, so w need not be safe for concurrent use.
func New(w io.Writer) *Notifier {
	return &Notifier{w: w}
}

// Send writes m as one line and returns a receipt whose ProviderID is
// "console-<n>", n counting sends from 1. The recipient shows as the
// channel masked it (Message.ToMasked), as in any log. The subject, when
// the message has one (email), or else the text (SMS), is quoted, so a
// newline in it cannot break the one-line format.
//
// Send returns ctx's error, without writing, when ctx is already done, and a
// retryable error when the writer fails; the failed line's number is not
// reused, so ids stay unique.
func (n *Notifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return ports.Receipt{}, fmt.Errorf("console: send %s: %w", m.EventID, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.n++
	id := "console-" + strconv.FormatUint(n.n, 10)
	now := time.Now()
	n.buf = appendLine(n.buf[:0], id, m)
	_, err := n.w.Write(n.buf)
	if cap(n.buf) > maxKeptLine {
		n.buf = nil
	}
	if err != nil {
		return ports.Receipt{}, fmt.Errorf("console: write %s for event %s: %w", id, m.EventID, err)
	}
	return ports.Receipt{ProviderID: id, SentAt: now}, nil
}

// maxKeptLine bounds the line buffer a Notifier keeps between sends.
const maxKeptLine = 16 << 10

// appendLine appends m's line, as Send prints it, to b:
//
//	<id> <channel> to=<masked> event=<event_id> subject=<quoted>
//
// or text=<quoted> for a message without a subject, quoted as %q quotes.
func appendLine(b []byte, id string, m ports.Message) []byte {
	to := m.ToMasked
	if to == "" && m.To != "" {
		// A message no channel rendered: show nothing of the address.
		to = "***"
	}
	b = append(b, id...)
	b = append(b, ' ')
	b = append(b, m.Channel...)
	b = append(b, " to="...)
	b = append(b, to...)
	b = append(b, " event="...)
	b = append(b, m.EventID...)
	if m.Subject != "" {
		b = append(b, " subject="...)
		b = strconv.AppendQuote(b, m.Subject)
	} else {
		b = append(b, " text="...)
		b = strconv.AppendQuote(b, m.Text)
	}
	return append(b, '\n')
}
