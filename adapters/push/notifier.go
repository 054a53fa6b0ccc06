package push

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

var _ ports.Notifier = (*Notifier)(nil)

// Config configures the gateway's notifier.
type Config struct {
	// URL is the gateway's base URL, https://; a push is a POST to
	// URL + "/v1/push".
	URL string
	// APIKey is sent as "Authorization: Bearer <APIKey>"; never logged.
	APIKey string
	// RootCAs verify the gateway's certificate; nil: the system's roots.
	RootCAs *x509.CertPool
	// Timeout bounds each send (the worker passes SEND_TIMEOUT).
	Timeout time.Duration
	// MaxConns is the most connections kept to the gateway (the worker
	// passes MAX_IN_FLIGHT).
	MaxConns int
}

// Notifier sends each message as one HTTPS request to the gateway. It is
// safe for concurrent use: one client and one pool serve every send.
type Notifier struct {
	url    string
	apiKey string
	client *http.Client
}

// New checks cfg (every problem at once) and returns a Notifier; it does
// not contact the gateway.
func New(cfg Config) (*Notifier, error) {
	var errs []error
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		errs = append(errs, errors.New("push: URL: want an absolute https:// URL"))
	}
	if cfg.APIKey == "" {
		errs = append(errs, errors.New("push: APIKey: required"))
	}
	if cfg.Timeout <= 0 {
		errs = append(errs, errors.New("push: Timeout: must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	conns := max(cfg.MaxConns, 1)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.RootCAs}
	transport.MaxConnsPerHost, transport.MaxIdleConnsPerHost, transport.MaxIdleConns = conns, conns, conns
	return &Notifier{
		url:    strings.TrimRight(cfg.URL, "/") + "/v1/push",
		apiKey: cfg.APIKey,
		client: &http.Client{Transport: transport, Timeout: cfg.Timeout},
	}, nil
}

// request is the gateway's push request.
type request struct {
	To             string `json:"to"`
	Body           string `json:"body"`
	IdempotencyKey string `json:"idempotency_key"`
}

// Send posts m to the gateway and returns its id as the receipt. The
// gateway's answer decides the error's kind: 2xx is sent (an id it does
// not give is empty); 400, 404 and 410 (a malformed push, an unknown or
// unregistered token) are Permanent; 401 and 403 Unavailable (the API key,
// until an operator acts); 502 and 504, and a request written with no
// answer, wrap ErrOutcomeUnknown (the gateway may have taken it); any
// other answer, and a connection that never opened, are retryable. Errors
// show the token masked, never the key.
func (n *Notifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	body, err := json.Marshal(request{To: m.To, Body: m.Text, IdempotencyKey: m.IdempotencyKey})
	if err != nil {
		return ports.Receipt{}, ports.MarkPermanent(fmt.Errorf("push to %s: %w", MaskToken(m.To), err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return ports.Receipt{}, ports.MarkPermanent(fmt.Errorf("push to %s: %w", MaskToken(m.To), err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+n.apiKey)
	req.Header.Set("Idempotency-Key", m.IdempotencyKey)
	resp, err := n.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return ports.Receipt{}, fmt.Errorf("push to %s: gateway unreachable: %w", MaskToken(m.To), err)
		}
		return ports.Receipt{}, fmt.Errorf("push to %s: no answer: %w: %w", MaskToken(m.To), err, ports.ErrOutcomeUnknown)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := fmt.Errorf("push to %s: gateway answered %s", MaskToken(m.To), resp.Status)
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		var ok struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(answer, &ok) // accepted: an undecodable body is still sent
		return ports.Receipt{ProviderID: ok.ID, SentAt: time.Now()}, nil
	case c == http.StatusBadRequest || c == http.StatusNotFound || c == http.StatusGone:
		return ports.Receipt{}, ports.MarkPermanent(e)
	case c == http.StatusUnauthorized || c == http.StatusForbidden:
		return ports.Receipt{}, ports.MarkUnavailable(e)
	case c == http.StatusBadGateway || c == http.StatusGatewayTimeout:
		return ports.Receipt{}, fmt.Errorf("%w: %w", e, ports.ErrOutcomeUnknown)
	}
	return ports.Receipt{}, e
}
