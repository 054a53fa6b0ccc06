package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// Mailpit is an SMTP server that keeps what it receives and serves it back
// over an HTTP API.
type Mailpit struct {
	SMTPHost string // 127.0.0.1
	SMTPPort int
	// APIURL is the base of mailpit's web UI and API, "http://127.0.0.1:port".
	APIURL string
	// Image is the image it runs, as chosen by MAILPIT_IMAGE.
	Image string
}

// Email is one received message, as mailpit parsed it.
type Email struct {
	ID string // mailpit's id, for its API
	// MessageID is the Message-ID header without angle brackets.
	MessageID string
	From      string   // address only
	To        []string // addresses only
	Subject   string
	Text      string
	HTML      string
}

// StartMailpit starts mailpit (MAILPIT_IMAGE, default axllent/mailpit,
// falling back to the local notification-worker/mailpit:v1.33.1) and waits
// until its SMTP and HTTP ports accept connections. It accepts any SMTP
// AUTH credentials, over plain text, so the worker's SMTP_USERNAME and
// SMTP_PASSWORD can be anything.
func StartMailpit(t testing.TB) *Mailpit {
	t.Helper()
	img := mustPickImage(t, "MAILPIT_IMAGE", "axllent/mailpit", "notification-worker/mailpit:v1.33.1")
	smtpPort, httpPort := FreePort(t), FreePort(t)
	m := &Mailpit{
		SMTPHost: "127.0.0.1",
		SMTPPort: smtpPort,
		APIURL:   "http://127.0.0.1:" + strconv.Itoa(httpPort),
		Image:    img,
	}
	smtpAddr := "127.0.0.1:" + strconv.Itoa(smtpPort)
	httpAddr := "127.0.0.1:" + strconv.Itoa(httpPort)
	c := startContainer(t, testcontainers.ContainerRequest{
		Image: img,
		Cmd: []string{
			"--smtp", smtpAddr,
			"--listen", httpAddr,
			"--smtp-auth-accept-any",
			"--smtp-auth-allow-insecure",
			"--disable-version-check",
			"--database", "/tmp/mailpit.db",
		},
		ExposedPorts: []string{strconv.Itoa(smtpPort) + "/tcp", strconv.Itoa(httpPort) + "/tcp"},
	})
	err := waitUntil(context.Background(), c, startTimeout, func(ctx context.Context) error {
		if err := dialCheck(smtpAddr)(ctx); err != nil {
			return err
		}
		_, err := m.list(ctx, 0, 1)
		return err
	})
	if err != nil {
		t.Fatalf("mailpit %s: %v", img, err)
	}
	return m
}

// Env is the worker's environment for this server: plain SMTP (no TLS on
// loopback) with throwaway credentials.
func (m *Mailpit) Env() map[string]string {
	return map[string]string{
		"SMTP_HOST":       m.SMTPHost,
		"SMTP_PORT":       strconv.Itoa(m.SMTPPort),
		"SMTP_USERNAME":   "worker",
		"SMTP_PASSWORD":   "secret",
		"SMTP_FROM":       "Harborlight <notifications@harborlight.test>",
		"SMTP_TLS_POLICY": "none",
	}
}

// Messages returns every received message, oldest first, with its bodies.
func (m *Mailpit) Messages(ctx context.Context) ([]Email, error) {
	var ids []string
	for start := 0; ; {
		page, err := m.list(ctx, start, 500)
		if err != nil {
			return nil, err
		}
		for _, s := range page.Messages {
			ids = append(ids, s.ID)
		}
		start += len(page.Messages)
		if len(page.Messages) == 0 || start >= page.Total {
			break
		}
	}
	// The API lists newest first; tests read more naturally oldest first.
	slices.Reverse(ids)
	out := make([]Email, 0, len(ids))
	for _, id := range ids {
		e, err := m.message(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// WaitMessages polls until at least n messages arrived, then returns them
// all (oldest first). It fails with what did arrive when timeout passes.
func (m *Mailpit) WaitMessages(ctx context.Context, n int, timeout time.Duration) ([]Email, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		got, err := m.Messages(ctx)
		if err == nil && len(got) >= n {
			return got, nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return nil, fmt.Errorf("waiting for %d messages: %w", n, err)
			}
			return got, fmt.Errorf("waited %v for %d messages, got %d", timeout, n, len(got))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type mailpitAddress struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

type mailpitList struct {
	Total    int `json:"total"`
	Messages []struct {
		ID string `json:"ID"`
	} `json:"messages"`
}

func (m *Mailpit) list(ctx context.Context, start, limit int) (mailpitList, error) {
	var l mailpitList
	q := url.Values{"start": {strconv.Itoa(start)}, "limit": {strconv.Itoa(limit)}}
	err := callJSON(ctx, http.MethodGet, m.APIURL+"/api/v1/messages?"+q.Encode(), nil, &l)
	return l, err
}

func (m *Mailpit) message(ctx context.Context, id string) (Email, error) {
	var msg struct {
		ID        string           `json:"ID"`
		MessageID string           `json:"MessageID"`
		From      mailpitAddress   `json:"From"`
		To        []mailpitAddress `json:"To"`
		Subject   string           `json:"Subject"`
		Text      string           `json:"Text"`
		HTML      string           `json:"HTML"`
	}
	if err := callJSON(ctx, http.MethodGet, m.APIURL+"/api/v1/message/"+url.PathEscape(id), nil, &msg); err != nil {
		return Email{}, err
	}
	e := Email{ID: msg.ID, MessageID: msg.MessageID, From: msg.From.Address, Subject: msg.Subject, Text: msg.Text, HTML: msg.HTML}
	for _, a := range msg.To {
		e.To = append(e.To, a.Address)
	}
	return e, nil
}
