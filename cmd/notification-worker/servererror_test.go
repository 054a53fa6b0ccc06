package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/internal/wait"
)

// TestMain_ServerErrorAfterAcceptanceSendsOnce sends 5 SMS through a Twilio
// that answers each with a server error after the request arrived. Twilio
// took 4 of them (its Messages list shows them) and answered a JSON 500, a
// JSON 503, or a proxy in front of it answered a plain 500 or 502; the
// fifth it refused with a JSON 500 without taking it. Each must reach the
// customer exactly once: a 5xx says nothing definite about the message, so
// the worker asks the list before sending again.
func TestMain_ServerErrorAfterAcceptanceSendsOnce(t *testing.T) {
	const sid, token = "AC00000000000000000000000000000005", "fivexxtoken"
	twilioDouble := double.New(sid, token)
	// proxied holds the numbers a proxy answers for: Twilio's own answer
	// (a 201) is read and thrown away, the worker gets the proxy's page.
	var mu sync.Mutex
	proxied := map[string]int{}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err == nil && r.Method == http.MethodPost {
			mu.Lock()
			status, ok := proxied[r.PostForm.Get("To")]
			delete(proxied, r.PostForm.Get("To"))
			mu.Unlock()
			if ok {
				twilioDouble.ServeHTTP(httptest.NewRecorder(), r)
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(status)
				fmt.Fprintf(w, "<html><body>%d %s</body></html>", status, http.StatusText(status))
				return
			}
		}
		twilioDouble.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	p := startRetryPeers(t, smtptest.Script{}, nil, map[string]string{
		"TWILIO_ACCOUNT_SID": sid,
		"TWILIO_AUTH_TOKEN":  token,
		"TWILIO_API_URL":     api.URL,
		"SEND_TIMEOUT":       "1s",
		"TWILIO_LIST_LAG":    "300ms",
		"RECONCILE_TIMEOUT":  "30s",
	})
	evs, _ := sampleEvents(5)
	what := []string{"JSON 500, accepted", "JSON 503, accepted", "proxy's 500, accepted", "proxy's 502, accepted", "JSON 500, not accepted"}
	for i := range evs {
		evs[i].Channels = []string{"sms"}
		to := evs[i].Recipient.Phone
		switch i {
		case 0:
			twilioDouble.Fail(double.Fault{To: to, Count: 1, Accept: true, Status: http.StatusInternalServerError})
		case 1:
			twilioDouble.Fail(double.Fault{To: to, Count: 1, Accept: true, Status: http.StatusServiceUnavailable})
		case 2:
			proxied[to] = http.StatusInternalServerError
		case 3:
			proxied[to] = http.StatusBadGateway
		case 4:
			twilioDouble.Fail(double.Fault{To: to, Count: 1, Status: http.StatusInternalServerError})
		}
	}
	MustPublish(t, p.brokers, p.topic, eventMessages(evs)...)
	wait.For(t, waitWithin, "5 SMS sent", func() (bool, string) {
		s := scrape(t, p.m)
		sent := sumOf(s, "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
		return sent == 5, fmt.Sprintf("sent %v, unknown %v, reconciliations %v, in the double's list %d", sent,
			sumOf(s, "notification_worker_outcome_unknown_total{"), sumOf(s, "notification_worker_reconciliations_total{"), len(twilioDouble.Messages()))
	})
	perPhone := map[string]int{}
	for _, m := range twilioDouble.Messages() {
		perPhone[m.To]++
	}
	for i, ev := range evs {
		if n := perPhone[ev.Recipient.Phone]; n != 1 {
			t.Errorf("SMS %d (%s): the double accepted %d, want exactly 1", i, what[i], n)
		}
	}
	s := scrape(t, p.m)
	if got := sumOf(s, "notification_worker_reconciliations_total{", `result="delivered"`); got != 4 {
		t.Errorf("reconciliations delivered = %v, want 4", got)
	}
	if got := sumOf(s, "notification_worker_reconciliations_total{", `result="not_delivered"`); got != 1 {
		t.Errorf("reconciliations not delivered = %v, want 1", got)
	}
}
