// Package double is an HTTP test double of the Twilio resource the worker
// calls, /2010-04-01/Accounts/{sid}/Messages.json (POST sends a message, GET
// lists them), with a read-back API and scriptable provider failures. Tests
// serve it in-process (httptest.NewServer(double.New(sid, token))) and
// drive it over HTTP, as the worker does.
//
// The list answers as Twilio's does: newest first, filtered by To, From and
// DateSent (a day; "DateSent<" and "DateSent>" bound it, inclusive), PageSize
// (default 50, at most 1000) messages a page, with Page, PageToken and
// next_page_uri; dates in RFC 2822. A message the double accepted is listed
// at once: the double has no list lag.
//
// Control API, besides the Twilio endpoint:
//
//	GET    /messages  every accepted message, oldest first (JSON list of Message)
//	GET    /attempts  every send request, accepted or failed (JSON list of Attempt)
//	POST   /faults    add a Fault (JSON body)
//	GET    /connections  {"accepted": n}: connections accepted so far
//	GET    /list-requests  {"requests": n}: Messages list requests answered so far
//	                    (?to=<number>: of those filtering by that To)
//	PUT    /rate-limit  set the RateLimit (JSON body; per_second 0: off)
//	GET    /rate-limit  the RateLimit and {"limited": n}: sends it refused
//	GET    /healthz   200 once serving
//
// # Rate limit
//
// Off by default. With a RateLimit set, the double paces each sender (the
// From number, or the Messaging Service when the send names no From) as
// Twilio paces a sender: PerSecond sends a second, Burst at once after
// the sender was idle. A send beyond it is not processed: it is answered
// 429 with error 20429 and a Retry-After header, the whole seconds until
// the sender's next send would be accepted (at least 1), and counted
// (RateLimited, GET /rate-limit). The pace is checked after the request's
// own validation and before any Fault, and a refused send does not use
// up the pace.
//
// The double counts connections only on a listener it wrapped (see
// Double.Listener): how many TCP handshakes, and so how many TLS handshakes
// against the real API, its clients paid. Requests to the control API count
// too.
package double

import (
	"cmp"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Message is one SMS the double accepted.
type Message struct {
	SID        string `json:"sid"`
	AccountSID string `json:"account_sid"`
	From       string `json:"from"`
	// MessagingServiceSID is the messaging service the send named, if any.
	MessagingServiceSID string    `json:"messaging_service_sid,omitempty"`
	To                  string    `json:"to"`
	Body                string    `json:"body"`
	Created             time.Time `json:"date_created"`
}

// Attempt is one send request as the double answered it. Status is the HTTP
// status it returned; Code the Twilio error code, zero on success.
type Attempt struct {
	Message
	Status int `json:"status"`
	Code   int `json:"code,omitempty"`
}

// Fault scripts a provider failure. Faults are matched in the order they were
// added; the first one that matches a send answers it.
type Fault struct {
	// To limits the fault to sends to this number; empty matches every send.
	To string `json:"to,omitempty"`
	// Count is how many sends the fault answers before it is used up; zero
	// means for good.
	Count int `json:"count,omitempty"`
	// Status is the HTTP status to answer (503, 429, 400...). Zero with a
	// Delay means "accept, but slowly".
	Status int `json:"status,omitempty"`
	// Code is Twilio's error code in the body (21211: invalid To number).
	// Zero means the code Twilio gives the Status (20429, 20500, 20503,
	// ...: 20000 + the status), as every error Twilio answers carries one.
	Code int `json:"code,omitempty"`
	// Message is the error text in the body; a default is derived from Code.
	Message string `json:"message,omitempty"`
	// Delay holds the answer back, e.g. to make the worker's client time
	// out. JSON: nanoseconds, or a string such as "2s".
	Delay Duration `json:"delay,omitempty"`
	// Accept stores the message as accepted the moment the request arrives,
	// before the Delay and whatever becomes of the answer: Twilio took it,
	// its answer is late or lost. Without Accept, a send with Status 0 is
	// accepted only when the answer is written, and not at all when the
	// client gave up waiting.
	Accept bool `json:"accept,omitempty"`
	// Drop closes the connection without an answer (after the Delay, if
	// any): the request was taken and no answer comes. The message is
	// stored only with Accept.
	Drop bool `json:"drop,omitempty"`
}

// Duration is a time.Duration that reads "2s" as well as nanoseconds from JSON.
type Duration time.Duration

// UnmarshalJSON accepts a number of nanoseconds or a time.ParseDuration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = Duration(v)
		return err
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want a number of nanoseconds or a string like \"2s\": %s", b)
	}
	*d = Duration(n)
	return nil
}

// Double is the fake Twilio. It is an http.Handler and safe for concurrent use.
type Double struct {
	accountSID string
	authToken  string
	mux        *http.ServeMux

	accepted atomic.Int64 // connections accepted by a listener from Listener

	mu       sync.Mutex
	messages []Message
	attempts []Attempt
	faults   []*Fault

	now     func() time.Time // the rate limit's clock
	limit   RateLimit
	paces   map[string]time.Time // sender -> when its pace reaches its next send
	limited int64                // sends refused by the rate limit
	// listed counts the list requests answered, by their To filter ("":
	// none), since New or the last Reset.
	listed map[string]int64
}

// RateLimit is the pace the double allows each sender; see the package
// comment. The zero value is off.
type RateLimit struct {
	// PerSecond is the sends a second each sender may make; 0: no limit.
	PerSecond float64 `json:"per_second"`
	// Burst is how many it may send at once after it was idle; below 1: 1.
	Burst int `json:"burst,omitempty"`
}

// New returns a Double that accepts requests authenticated as accountSID
// with authToken, the way Twilio's API does (HTTP basic auth).
func New(accountSID, authToken string) *Double {
	d := &Double{accountSID: accountSID, authToken: authToken, mux: http.NewServeMux(), now: time.Now, paces: make(map[string]time.Time), listed: make(map[string]int64)}
	d.mux.HandleFunc("POST /2010-04-01/Accounts/{sid}/Messages.json", d.createMessage)
	d.mux.HandleFunc("GET /2010-04-01/Accounts/{sid}/Messages.json", d.listMessages)
	d.mux.HandleFunc("GET /messages", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, d.Messages()) })
	d.mux.HandleFunc("GET /attempts", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, d.Attempts()) })
	d.mux.HandleFunc("POST /faults", d.addFault)
	d.mux.HandleFunc("GET /connections", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]int64{"accepted": d.Connections()})
	})
	d.mux.HandleFunc("GET /list-requests", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]int64{"requests": d.ListRequests(r.URL.Query().Get("to"))})
	})
	d.mux.HandleFunc("PUT /rate-limit", d.putRateLimit)
	d.mux.HandleFunc("GET /rate-limit", func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		l, n := d.limit, d.limited
		d.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"per_second": l.PerSecond, "burst": l.Burst, "limited": n})
	})
	d.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return d
}

// ServeHTTP serves the Twilio endpoint and the control API.
func (d *Double) ServeHTTP(w http.ResponseWriter, r *http.Request) { d.mux.ServeHTTP(w, r) }

// Listener returns ln, counting every connection it accepts into d. Serve
// the double on it (http.Server.Serve(d.Listener(ln))) for Connections to
// mean anything.
func (d *Double) Listener(ln net.Listener) net.Listener {
	return &countingListener{Listener: ln, accepted: &d.accepted}
}

// Connections returns how many connections the listeners from Listener
// have accepted so far. It never decreases: a test reads it before and
// after what it measures.
func (d *Double) Connections() int64 { return d.accepted.Load() }

// countingListener is a net.Listener that counts the connections it
// accepts.
type countingListener struct {
	net.Listener
	accepted *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// ListRequests returns how many Messages list requests (GET
// .../Messages.json) the double answered, whatever it answered, since New
// or the last Reset: what a provider that rate-limits its list counts. A
// non-empty to counts only those filtering by that To number.
func (d *Double) ListRequests(to string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if to != "" {
		return d.listed[to]
	}
	var n int64
	for _, c := range d.listed {
		n += c
	}
	return n
}

// Messages returns a copy of the accepted messages, oldest first.
func (d *Double) Messages() []Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Message{}, d.messages...)
}

// Attempts returns a copy of every send request, oldest first.
func (d *Double) Attempts() []Attempt {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Attempt{}, d.attempts...)
}

// Fail adds a fault; see Fault for how it matches.
func (d *Double) Fail(f Fault) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, &f)
}

// Reset forgets messages, attempts, the senders' paces and the counts of
// sends the rate limit refused and of list requests; faults and the rate
// limit stay.
func (d *Double) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.messages, d.attempts = nil, nil
	d.paces, d.limited, d.listed = make(map[string]time.Time), 0, make(map[string]int64)
}

// LimitRate sets the pace each sender is allowed (see RateLimit); the zero
// RateLimit turns it off. The senders' paces start afresh.
func (d *Double) LimitRate(l RateLimit) {
	l.Burst = max(l.Burst, 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.limit, d.paces = l, make(map[string]time.Time)
}

// RateLimited returns how many sends the rate limit refused (answered 429)
// since New or the last Reset.
func (d *Double) RateLimited() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limited
}

func (d *Double) putRateLimit(w http.ResponseWriter, r *http.Request) {
	var l RateLimit
	if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
		http.Error(w, "rate limit: "+err.Error(), http.StatusBadRequest)
		return
	}
	if l.PerSecond < 0 || l.Burst < 0 || math.IsInf(l.PerSecond, 0) {
		http.Error(w, "rate limit: per_second and burst must not be negative", http.StatusBadRequest)
		return
	}
	d.LimitRate(l)
	w.WriteHeader(http.StatusNoContent)
}

// admit reports whether sender may send now under the rate limit and, if
// not, how long until it may. An admitted send moves the sender's pace.
func (d *Double) admit(sender string) (bool, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.limit.PerSecond <= 0 {
		return true, 0
	}
	now := d.now()
	interval := time.Duration(float64(time.Second) / d.limit.PerSecond)
	tolerance := time.Duration(d.limit.Burst-1) * interval
	pace := d.paces[sender]
	if pace.Before(now) {
		pace = now
	}
	if early := pace.Sub(now) - tolerance; early > 0 {
		d.limited++
		return false, early
	}
	d.paces[sender] = pace.Add(interval)
	return true, 0
}

func (d *Double) addFault(w http.ResponseWriter, r *http.Request) {
	var f Fault
	if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
		http.Error(w, "fault: "+err.Error(), http.StatusBadRequest)
		return
	}
	if f.Status == 0 && f.Delay == 0 && !f.Drop {
		http.Error(w, "fault: set status, delay, drop or a mix", http.StatusBadRequest)
		return
	}
	d.Fail(f)
	w.WriteHeader(http.StatusNoContent)
}

// takeFault returns a copy of the first fault matching to and uses one of
// its Count, or nil when no fault matches.
func (d *Double) takeFault(to string) *Fault {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, f := range d.faults {
		if f.To != "" && f.To != to {
			continue
		}
		found := *f
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				d.faults = append(d.faults[:i], d.faults[i+1:]...)
			}
		}
		return &found
	}
	return nil
}

// authorized answers Twilio's error and returns false unless r carries the
// double's credentials and names its account.
func (d *Double) authorized(w http.ResponseWriter, r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	// Constant-time compare, as a habit: the double's token is not a secret.
	if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(d.accountSID)) != 1 ||
		subtle.ConstantTimeCompare([]byte(pass), []byte(d.authToken)) != 1 {
		writeError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return false
	}
	if sid := r.PathValue("sid"); sid != d.accountSID {
		writeError(w, http.StatusNotFound, 20404, fmt.Sprintf("The requested resource /2010-04-01/Accounts/%s/Messages.json was not found", sid))
		return false
	}
	return true
}

func (d *Double) createMessage(w http.ResponseWriter, r *http.Request) {
	if !d.authorized(w, r) {
		return
	}
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, 21100, "Invalid form: "+err.Error())
		return
	}
	m := Message{
		AccountSID:          d.accountSID,
		From:                r.PostForm.Get("From"),
		MessagingServiceSID: r.PostForm.Get("MessagingServiceSid"),
		To:                  r.PostForm.Get("To"),
		Body:                r.PostForm.Get("Body"),
		Created:             time.Now().UTC(),
	}
	// The real API's own validation, so a worker bug that drops a field
	// fails here as it would in production.
	switch {
	case m.To == "":
		d.answer(w, m, http.StatusBadRequest, 21604, "A 'To' phone number is required.")
		return
	case m.Body == "":
		d.answer(w, m, http.StatusBadRequest, 21602, "Message body is required.")
		return
	case m.From == "" && m.MessagingServiceSID == "":
		d.answer(w, m, http.StatusBadRequest, 21603, "A 'From' phone number is required.")
		return
	}

	sender := m.From
	sender = cmp.Or(sender, m.MessagingServiceSID)
	if ok, after := d.admit(sender); !ok {
		// Whole seconds, as the header carries them, rounded up so a
		// client that honours it finds the pace free.
		w.Header().Set("Retry-After", strconv.FormatInt(max(int64((after+time.Second-1)/time.Second), 1), 10))
		d.answer(w, m, http.StatusTooManyRequests, 20429, "Too Many Requests")
		return
	}

	if f := d.takeFault(m.To); f != nil && d.fault(w, r, &m, f) {
		return
	}

	if m.SID == "" {
		d.accept(&m)
	}
	d.record(Attempt{Message: m, Status: http.StatusCreated})
	// As Twilio answers a create: queued, not yet sent.
	created := resource(m)
	created["status"], created["date_sent"] = "queued", nil
	writeJSON(w, http.StatusCreated, created)
}

// fault plays f on the send of m: it accepts m first when f says so,
// waits f's delay (answering nothing if the client gives up meanwhile),
// then drops the connection or answers f's error. It reports whether it
// answered; if not, the send goes on as a success.
func (d *Double) fault(w http.ResponseWriter, r *http.Request, m *Message, f *Fault) (answered bool) {
	if f.Accept {
		d.accept(m)
	}
	if f.Delay > 0 {
		select {
		case <-time.After(time.Duration(f.Delay)):
		case <-r.Context().Done():
			// The client gave up; record what it saw: nothing.
			d.record(Attempt{Message: *m, Status: 0})
			return true
		}
	}
	if f.Drop {
		d.record(Attempt{Message: *m, Status: 0})
		drop(w)
		return true
	}
	if f.Status >= 300 {
		code := f.Code
		code = cmp.Or(code, 20000+f.Status)
		msg := f.Message
		msg = cmp.Or(msg, defaultMessage(code, m.To))
		d.answer(w, *m, f.Status, code, msg)
		return true
	}
	return false
}

// accept gives m a SID and stores it as accepted.
func (d *Double) accept(m *Message) {
	m.SID = newSID()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.messages = append(d.messages, *m)
}

// drop closes the request's connection without writing an answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		// HTTP/2: abort the stream, the closest to a dropped connection.
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// resource is m as Twilio's API lists a Message resource: every date in
// RFC 2822, status "sent" (the double hands a message on at once, so
// date_sent is date_created).
func resource(m Message) map[string]any {
	var ms any
	if m.MessagingServiceSID != "" {
		ms = m.MessagingServiceSID
	}
	created := m.Created.Format(time.RFC1123Z)
	return map[string]any{
		"sid":                   m.SID,
		"account_sid":           m.AccountSID,
		"from":                  m.From,
		"to":                    m.To,
		"body":                  m.Body,
		"messaging_service_sid": ms,
		"status":                "sent",
		"direction":             "outbound-api",
		"api_version":           "2010-04-01",
		"num_segments":          "1",
		"num_media":             "0",
		"date_created":          created,
		"date_updated":          created,
		"date_sent":             created,
		"error_code":            nil,
		"error_message":         nil,
		"uri":                   "/2010-04-01/Accounts/" + m.AccountSID + "/Messages/" + m.SID + ".json",
	}
}

// Page sizes of the list resource, as Twilio's.
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// listMessages answers GET .../Messages.json: the accepted messages
// matching the filters, newest first, one page of them.
func (d *Double) listMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d.mu.Lock()
	d.listed[q.Get("To")]++
	d.mu.Unlock()
	if !d.authorized(w, r) {
		return
	}
	size, page, invalid := pageOf(q)
	if invalid != "" {
		writeError(w, http.StatusBadRequest, 20001, invalid)
		return
	}
	match, ok := d.matching(q)
	if !ok {
		writeError(w, http.StatusBadRequest, 20001, "Invalid date value.")
		return
	}
	// PageToken "PA" + a SID: the page starts after that message, so a page
	// stays put while newer messages arrive. Without it, Page counts pages.
	start := page * size
	if tok := q.Get("PageToken"); tok != "" {
		start = -1
		for i, m := range match {
			if "PA"+m.SID == tok {
				start = i + 1
			}
		}
		if start < 0 {
			writeError(w, http.StatusBadRequest, 20001, "Invalid PageToken")
			return
		}
	}
	start = min(start, len(match))
	end := min(start+size, len(match))

	msgs := make([]map[string]any, 0, end-start)
	for _, m := range match[start:end] {
		msgs = append(msgs, resource(m))
	}
	filters := url.Values{}
	for _, k := range []string{"To", "From", "DateSent", "DateSent<", "DateSent>"} {
		if q.Has(k) {
			filters.Set(k, q.Get(k))
		}
	}
	filters.Set("PageSize", strconv.Itoa(size))
	uri := func(page int, token string) string {
		v := url.Values{}
		for k, vs := range filters {
			v[k] = vs
		}
		v.Set("Page", strconv.Itoa(page))
		if token != "" {
			v.Set("PageToken", token)
		}
		return "/2010-04-01/Accounts/" + d.accountSID + "/Messages.json?" + v.Encode()
	}
	var next, previous any
	if end < len(match) {
		next = uri(page+1, "PA"+match[end-1].SID)
	}
	if page > 0 {
		previous = uri(page-1, "")
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"messages":          msgs,
		"page":              page,
		"page_size":         size,
		"start":             start,
		"end":               max(start, end-1),
		"uri":               r.URL.RequestURI(),
		"first_page_uri":    uri(0, ""),
		"next_page_uri":     next,
		"previous_page_uri": previous,
	})
}

// pageOf reads PageSize and Page from q, or says which is invalid.
func pageOf(q url.Values) (size, page int, invalid string) {
	size = defaultPageSize
	if v := q.Get("PageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, "Invalid PageSize"
		}
		size = min(n, maxPageSize)
	}
	if v := q.Get("Page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, 0, "Invalid Page"
		}
		page = n
	}
	return size, page, ""
}

// matching returns the messages q's To, From and DateSent filters select,
// newest first, or false when a date does not parse.
func (d *Double) matching(q url.Values) ([]Message, bool) {
	var day, onOrBefore, onOrAfter string
	for _, f := range []struct {
		key string
		to  *string
	}{{"DateSent", &day}, {"DateSent<", &onOrBefore}, {"DateSent>", &onOrAfter}} {
		v := q.Get(f.key)
		if v == "" {
			continue
		}
		t, ok := parseDay(v)
		if !ok {
			return nil, false
		}
		*f.to = t
	}
	all := d.Messages()
	var match []Message
	for i := len(all) - 1; i >= 0; i-- { // newest first
		m := all[i]
		sent := m.Created.UTC().Format(time.DateOnly)
		switch {
		case q.Has("To") && m.To != q.Get("To"),
			q.Has("From") && m.From != q.Get("From"),
			day != "" && sent != day,
			onOrBefore != "" && sent > onOrBefore,
			onOrAfter != "" && sent < onOrAfter:
			continue
		}
		match = append(match, m)
	}
	return match, true
}

// parseDay reads a DateSent value as Twilio does: YYYY-MM-DD, or a longer
// timestamp (twilio-go sends RFC 3339) of which the day counts.
func parseDay(v string) (string, bool) {
	if len(v) < len(time.DateOnly) {
		return "", false
	}
	day := v[:len(time.DateOnly)]
	if _, err := time.Parse(time.DateOnly, day); err != nil {
		return "", false
	}
	return day, true
}

// answer records a failed attempt and writes Twilio's error body.
func (d *Double) answer(w http.ResponseWriter, m Message, status, code int, msg string) {
	d.record(Attempt{Message: m, Status: status, Code: code})
	writeError(w, status, code, msg)
}

func (d *Double) record(a Attempt) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.attempts = append(d.attempts, a)
}

func defaultMessage(code int, to string) string {
	switch code {
	case 21211:
		return fmt.Sprintf("The 'To' number %s is not a valid phone number.", to)
	case 20429:
		return "Too Many Requests"
	case 20500:
		return "Internal Server Error"
	}
	return "Service Unavailable"
}

// writeError writes the JSON error body twilio-go decodes into
// *client.TwilioRestError (Status and Code come from here, not the header).
func writeError(w http.ResponseWriter, status, code int, msg string) {
	writeJSON(w, status, map[string]any{
		"code":      code,
		"message":   msg,
		"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code),
		"status":    status,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// newSID returns "SM" and 32 hex digits, the shape of a real message SID.
func newSID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "SM" + hex.EncodeToString(b[:])
}
