package console_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/ports"
)

func TestSend(t *testing.T) {
	t.Run("SMS", func(t *testing.T) {
		var buf bytes.Buffer
		r, err := console.New(&buf).Send(context.Background(), ports.Message{
			EventID: "evt-1", Channel: ports.ChannelSMS, To: "+15551234567", ToMasked: ports.MaskPhone("+15551234567"),
			Text: "Your parcel SHP-1 arrives 14:00-16:00",
		})
		if err != nil {
			t.Fatal(err)
		}
		want := `console-1 sms to=+1********67 event=evt-1 text="Your parcel SHP-1 arrives 14:00-16:00"` + "\n"
		if got := buf.String(); got != want {
			t.Errorf("output:\n got %q\nwant %q", got, want)
		}
		if r.ProviderID != "console-1" || r.SentAt.IsZero() {
			t.Errorf("receipt = %+v, want ProviderID console-1 and a SentAt", r)
		}
	})

	t.Run("Email", func(t *testing.T) {
		var buf bytes.Buffer
		_, err := console.New(&buf).Send(context.Background(), ports.Message{
			EventID: "evt-2", Channel: ports.ChannelEmail, To: "ada@example.com", ToMasked: ports.MaskEmail("ada@example.com"), ToName: "Ada",
			Subject: "Out for delivery", Text: "body text", HTML: "<p>body</p>",
		})
		if err != nil {
			t.Fatal(err)
		}
		want := `console-1 email to=a***@example.com event=evt-2 subject="Out for delivery"` + "\n"
		if got := buf.String(); got != want {
			t.Errorf("output:\n got %q\nwant %q", got, want)
		}
	})

	t.Run("NewlineStaysOneLine", func(t *testing.T) {
		var buf bytes.Buffer
		_, err := console.New(&buf).Send(context.Background(), ports.Message{
			EventID: "evt-3", Channel: ports.ChannelSMS, To: "+15551234567", ToMasked: ports.MaskPhone("+15551234567"), Text: "line one\nline two",
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "\n"); n != 1 {
			t.Errorf("output has %d newlines, want 1: %q", n, buf.String())
		}
	})

	t.Run("NeverPrintsFullAddress", func(t *testing.T) {
		var buf bytes.Buffer
		n := console.New(&buf)
		MustSend(t, n, ports.Message{EventID: "e", Channel: ports.ChannelSMS, To: "+15551234567", ToMasked: ports.MaskPhone("+15551234567"), Text: "x"})
		MustSend(t, n, ports.Message{EventID: "e", Channel: ports.ChannelEmail, To: "ada@example.com", ToMasked: ports.MaskEmail("ada@example.com"), Subject: "x"})
		for _, addr := range []string{"+15551234567", "ada@example.com"} {
			if strings.Contains(buf.String(), addr) {
				t.Errorf("output contains %q in clear:\n%s", addr, buf.String())
			}
		}
	})

	t.Run("ErrContextDone", func(t *testing.T) {
		var buf bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := console.New(&buf).Send(ctx, ports.Message{EventID: "e", Channel: ports.ChannelSMS, To: "+15551234567", ToMasked: ports.MaskPhone("+15551234567")})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if buf.Len() != 0 {
			t.Errorf("wrote %q after ctx was done", buf.String())
		}
	})

	t.Run("ErrWriterFailedIsRetryable", func(t *testing.T) {
		boom := errors.New("disk full")
		_, err := console.New(failingWriter{boom}).Send(context.Background(), ports.Message{EventID: "e", Channel: ports.ChannelSMS})
		if !errors.Is(err, boom) || ports.KindOf(err) != ports.Retryable {
			t.Errorf("err = %v (kind %v), want %v, retryable", err, ports.KindOf(err), boom)
		}
	})
}

// TestSendConcurrent proves lines from concurrent sends do not interleave and
// every send gets its own id; run it with -race.
func TestSendConcurrent(t *testing.T) {
	const senders, each = 8, 25
	var buf bytes.Buffer // not safe for concurrent use: the Notifier must serialize
	n := console.New(&buf)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			for i := range each {
				// t.Fatal must not run outside the test goroutine: report and stop.
				m := ports.Message{EventID: fmt.Sprintf("g%d-%d", g, i), Channel: ports.ChannelSMS, To: "+15551234567", ToMasked: ports.MaskPhone("+15551234567"), Text: "hi"}
				if _, err := n.Send(context.Background(), m); err != nil {
					t.Errorf("send %s: %v", m.EventID, err)
					return
				}
			}
		})
	}
	wg.Wait()

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != senders*each {
		t.Fatalf("got %d lines, want %d", len(lines), senders*each)
	}
	ids := make(map[string]bool, len(lines))
	for _, l := range lines {
		id, rest, ok := strings.Cut(l, " ")
		if !ok || !strings.HasPrefix(id, "console-") || !strings.HasPrefix(rest, "sms to=+1********67 event=g") {
			t.Fatalf("malformed line %q", l)
		}
		if ids[id] {
			t.Fatalf("id %s printed twice", id)
		}
		ids[id] = true
	}
}

// MustSend sends m and fails the test on error.
func MustSend(tb testing.TB, n *console.Notifier, m ports.Message) ports.Receipt {
	tb.Helper()
	r, err := n.Send(context.Background(), m)
	if err != nil {
		tb.Fatalf("send %s: %v", m.EventID, err)
	}
	return r
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// TestSend_QuotesAsPercentQ holds the line to the format it has always
// had, fmt's "%s %s to=%s event=%s text=%q" (subject=%q for an email),
// for text that needs escaping: what a person or a script reads from the
// console must not change.
func TestSend_QuotesAsPercentQ(t *testing.T) {
	var buf, want bytes.Buffer
	n := console.New(&buf)
	sent := 0
	for _, text := range []string{"", `"quoted" \ back`, "tab\tbell\a nul\x00", "bad utf-8 \xff\xfe", "ünïcödé ✓ 😀", "\u2028 line separator", strings.Repeat("long ", 5000)} {
		sms := ports.Message{EventID: "evt", Channel: ports.ChannelSMS, To: "+15551234567", ToMasked: ports.MaskPhone("+15551234567"), Text: text}
		MustSend(t, n, sms)
		sent++
		fmt.Fprintf(&want, "console-%d %s to=%s event=%s text=%q\n", sent, sms.Channel, sms.ToMasked, sms.EventID, sms.Text)
		// No masked address: shown as ***.
		email := ports.Message{EventID: "evt-" + text, Channel: ports.ChannelEmail, To: "ada@example.com", Subject: text + "!", Text: "not shown"}
		MustSend(t, n, email)
		sent++
		fmt.Fprintf(&want, "console-%d %s to=%s event=%s subject=%q\n", sent, email.Channel, "***", email.EventID, email.Subject)
	}
	if got := buf.String(); got != want.String() {
		t.Errorf("output:\n got %q\nwant %q", got, want.String())
	}
}
