package smtptest_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
)

// send delivers one message with the given Message-ID from a plain client
// and returns the first error: the reply to RCPT TO, or to the end of DATA.
// It may run on any goroutine.
func send(s *smtptest.Server, to, messageID string) error {
	c, err := gosmtp.Dial(net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Mail("from@example.com", nil); err != nil {
		return err
	}
	if err := c.Rcpt(to, nil); err != nil {
		return err
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	msg := "Message-ID: " + messageID + "\r\nSubject: test\r\n\r\nbody\r\n"
	if _, err := w.Write([]byte(msg)); err != nil {
		return err
	}
	return w.Close()
}

func TestRcptReply(t *testing.T) {
	tryLater := &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "Try again later"}
	s := smtptest.StartServer(t, smtptest.Script{
		RcptReply: func(rcpt string, n int) error {
			if rcpt == "busy@example.com" && n <= 2 {
				return tryLater
			}
			return nil
		},
	})
	for i, want := range []int{451, 451, 0} {
		err := send(s, "busy@example.com", "<busy-"+strconv.Itoa(i)+"@example.com>")
		var se *gosmtp.SMTPError
		switch {
		case want == 0 && err != nil:
			t.Fatalf("attempt %d: %v, want it accepted", i+1, err)
		case want != 0 && (!errors.As(err, &se) || se.Code != want):
			t.Fatalf("attempt %d: %v, want %d", i+1, err, want)
		}
	}
	if err := send(s, "other@example.com", "<other@example.com>"); err != nil {
		t.Fatal(err)
	}
	if n := s.Attempts("busy@example.com"); n != 3 {
		t.Errorf("Attempts = %d, want 3", n)
	}
	if ids := s.MessageIDs("busy@example.com"); len(ids) != 1 || ids[0] != "<busy-2@example.com>" {
		t.Errorf("MessageIDs = %q, want the third message's only", ids)
	}
	if n := s.Delivered("other@example.com"); n != 1 {
		t.Errorf("Delivered(other) = %d, want 1", n)
	}
}

// A message is kept as its DATA ends, before the delayed reply: a client
// that hangs up while it waits has still delivered it.
func TestReplyDelay_KeepsBeforeReplying(t *testing.T) {
	var srv atomic.Pointer[smtptest.Server]
	keptAtDelay := make(chan int, 1)
	s := smtptest.StartServer(t, smtptest.Script{
		ReplyDelay: func(int) time.Duration {
			keptAtDelay <- srv.Load().Delivered("late@example.com")
			return 0
		},
	})
	srv.Store(s)
	if err := send(s, "late@example.com", "<late@example.com>"); err != nil {
		t.Fatal(err)
	}
	if n := <-keptAtDelay; n != 1 {
		t.Errorf("%d messages kept while the reply was held back, want 1", n)
	}
	if got := s.Only(t); !strings.Contains(string(got.Data), "body") || got.MessageID() != "<late@example.com>" {
		t.Errorf("kept %q, Message-ID %q", got.Data, got.MessageID())
	}
}
