package twilio

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Listing bounds. A recipient gets a few messages a day from us; a window of
// one send attempt holds one or two of them. listPageSize keeps each page
// cheap; listMaxPages bounds a call that would page through a long history
// (a recipient messaged by other senders of the account), after which
// Reconcile answers "cannot tell" rather than guess.
const (
	listPageSize = 20
	listMaxPages = 10
	// listMaxBody bounds the bytes read of one page (20 messages of at
	// most 1600 characters each, with their fields, fit many times over).
	listMaxBody = 4 << 20
)

// ErrListLag is wrapped by Reconcile's error when the message was not found
// but the window ended less than Config.ListLag ago: Twilio's list may not
// show it yet. Asking again after the lag tells.
var ErrListLag = errors.New("twilio: the message list may not show the window yet")

// ErrListIncomplete is wrapped by Reconcile's error when it paged
// listMaxPages pages without reaching messages older than the window.
var ErrListIncomplete = errors.New("twilio: the message list was not read to the window's start")

// Sender names the sender this Notifier's sends go out from, as a
// ports.Window names it: "service:<MessagingServiceSID>" when sends name a
// messaging service, else "from:<From>".
func (n *Notifier) Sender() string { return n.sender }

// senderOf is Sender's answer for a Notifier sending from the number from,
// or through the messaging service msSID when it is set.
func senderOf(from, msSID string) string {
	if msSID != "" {
		return senderService + msSID
	}
	return senderFrom + from
}

// The prefixes of Sender's two forms.
const (
	senderService = "service:"
	senderFrom    = "from:"
)

// Lag is the configured ListLag: how long after a window ends Reconcile
// answers a message it does not find with ErrListLag rather than "not
// delivered".
func (n *Notifier) Lag() time.Duration { return n.listLag }

// Reconcile asks Twilio's Messages list whether it accepted, in the window
// w, the message of a send attempt to m.To whose outcome was unknown.
//
// It asks about w.Sender, the sender the send used (this Notifier's own
// when empty), whatever this Notifier sends from now: it lists the
// messages to m.To from that From number (for a messaging service, to m.To
// only, Twilio's list having no service filter), newest first, PageSize
// 20, and looks for one whose body w.Sent recognises (what was sent, which
// m.Text need no longer be), whose messaging service is that service (for
// one), and whose date_created lies in [w.Since - ClockSkew, w.Until +
// ClockSkew]. Found: it is Delivered, with its SID as ProviderID and its
// date_created as SentAt.
//
// It does not filter by DateSent: date_sent is when Twilio handed the
// message on, empty while it is queued, so that filter could hide a message
// Twilio accepted and has not sent yet. It pages instead until the list
// reaches messages created and sent before the window, or its end.
//
// "Not delivered" (Delivered false, nil error) is answered only when that
// listing is complete and the window ended at least ListLag before the
// listing began. Otherwise the error says the provider cannot tell now:
// ErrListLag (too recent), ErrListIncomplete (too many pages), an HTTP or
// transport error of the list API. Each call is bounded by the configured
// Timeout, and by ctx. Safe for concurrent use.
func (n *Notifier) Reconcile(ctx context.Context, m ports.Message, w ports.Window) (ports.Reconciliation, error) {
	listed := time.Now()
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()

	fail := func(err error) (ports.Reconciliation, error) {
		return ports.Reconciliation{}, &ReconcileError{APIURL: n.apiURL.String(), To: ports.MaskPhone(m.To), Err: err, to: m.To}
	}
	sender := cmp.Or(w.Sender, n.Sender())
	service, byService := strings.CutPrefix(sender, senderService)
	from, byFrom := strings.CutPrefix(sender, senderFrom)
	if !byService && !byFrom {
		return fail(fmt.Errorf("sender %q is neither %q nor %q followed by its id", sender, senderFrom, senderService))
	}
	lo, hi := w.Since.Add(-n.skew), w.Until.Add(n.skew)
	q := url.Values{"To": {m.To}, "PageSize": {strconv.Itoa(listPageSize)}}
	if byFrom {
		q.Set("From", from)
	}
	first := accountsSegment[1:] + n.sid + "/Messages.json"
	uri := "/2010-04-01/" + first + "?" + q.Encode()

	for range listMaxPages {
		page, err := n.listPage(ctx, uri)
		if err != nil {
			return fail(err)
		}
		past := false
		for _, msg := range page.Messages {
			created, err := time.Parse(time.RFC1123Z, msg.DateCreated)
			if err != nil {
				return fail(fmt.Errorf("message %s: date_created %q: %w", msg.SID, msg.DateCreated, err))
			}
			if msg.To == m.To && w.Sent(msg.Body) && !created.Before(lo) && !created.After(hi) &&
				(byFrom || msg.MessagingServiceSID == service) {
				return ports.Reconciliation{Delivered: true, Receipt: ports.Receipt{ProviderID: msg.SID, SentAt: created}}, nil
			}
			// Newest first: once a message was created and sent before
			// the window, every one after it was too, whichever of the two
			// dates the list is ordered by.
			if created.Before(lo) && msg.DateSent != "" {
				if sent, err := time.Parse(time.RFC1123Z, msg.DateSent); err == nil && sent.Before(lo) {
					past = true
				}
			}
		}
		if past || page.NextPageURI == "" {
			if lag := listed.Sub(w.Until); lag < n.listLag {
				return fail(fmt.Errorf("%w: the window ended %v ago, the list may lag %v", ErrListLag, lag.Round(time.Millisecond), n.listLag))
			}
			return ports.Reconciliation{}, nil
		}
		if !strings.HasPrefix(page.NextPageURI, "/2010-04-01/"+first+"?") {
			return fail(fmt.Errorf("next_page_uri %q is not a page of this account's messages", page.NextPageURI))
		}
		uri = page.NextPageURI
	}
	return fail(fmt.Errorf("%w after %d pages of %d", ErrListIncomplete, listMaxPages, listPageSize))
}

// messagePage is the part of a Messages list page Reconcile reads.
type messagePage struct {
	Messages []struct {
		SID                 string `json:"sid"`
		To                  string `json:"to"`
		Body                string `json:"body"`
		MessagingServiceSID string `json:"messaging_service_sid"`
		DateCreated         string `json:"date_created"`
		DateSent            string `json:"date_sent"`
	} `json:"messages"`
	NextPageURI string `json:"next_page_uri"`
}

// listPage GETs uri (a path and query of the 2010-04-01 API) from the
// configured API URL and decodes the page.
func (n *Notifier) listPage(ctx context.Context, uri string) (*messagePage, error) {
	u := *n.apiURL
	path, query, _ := strings.Cut(uri, "?")
	u.Path, u.RawPath, u.RawQuery = n.apiURL.Path+path, "", query
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(n.sid, n.token)
	req.Header.Set("Accept", "application/json")
	resp, err := n.lister.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// Its text holds the URL, whose query holds the full number.
			return nil, fmt.Errorf("GET %s: %w", redactQuery(u), ue.Err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, listMaxBody)
	if resp.StatusCode != http.StatusOK {
		var te struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		_ = json.NewDecoder(body).Decode(&te)
		return nil, fmt.Errorf("GET %s: status %d: code %d: %s", redactQuery(u), resp.StatusCode, te.Code, te.Message)
	}
	var page messagePage
	if err := json.NewDecoder(body).Decode(&page); err != nil {
		return nil, fmt.Errorf("GET %s: decode page: %w", redactQuery(u), err)
	}
	return &page, nil
}

// redactQuery returns u without its query, which holds the recipient.
func redactQuery(u url.URL) string {
	u.RawQuery = ""
	return u.String()
}

// ReconcileError is Reconcile's "cannot tell": the list could not be read,
// or not far enough, or not late enough. Its text names the configured API
// URL and the masked recipient, never the auth token or the full number.
type ReconcileError struct {
	APIURL string // the configured base URL
	To     string // the recipient, masked
	// Err is ErrListLag, ErrListIncomplete, or the list API's failure. Its
	// own text may hold the full number (in Twilio's message): print
	// ReconcileError's text, not Err's.
	Err error
	to  string // unmasked, to mask it out of Err's text
}

func (e *ReconcileError) Error() string {
	text := e.Err.Error()
	if e.to != "" {
		text = strings.ReplaceAll(text, e.to, e.To)
	}
	return fmt.Sprintf("twilio: reconcile send to %s via %s: cannot tell: %s", e.To, e.APIURL, text)
}

func (e *ReconcileError) Unwrap() error { return e.Err }
