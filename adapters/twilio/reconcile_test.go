package twilio_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/ports"
)

// noLag is a list lag short enough that a window ended before Reconcile is
// past it: the double lists a message the moment it accepts it.
const noLag = time.Nanosecond

func sms(to, text string) ports.Message {
	return ports.Message{IdempotencyKey: "k-" + to + text, EventID: "evt", Channel: ports.ChannelSMS, To: to, Text: text}
}

// window runs f and returns the window [since, until] around it, as the
// caller of Send would record it.
func window(f func()) (since, until time.Time) {
	since = time.Now()
	f()
	return since, time.Now()
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()

	t.Run("DeliveredWithSID", func(t *testing.T) {
		d, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: noLag})
		m := sms(testTo, "Parcel SHP-1: out for delivery")
		var r ports.Receipt
		since, until := window(func() {
			var err error
			if r, err = n.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		})
		got, err := n.Reconcile(ctx, m, byText(m, since, until))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Delivered || got.Receipt.ProviderID != r.ProviderID || got.Receipt.ProviderID != d.Messages()[0].SID {
			t.Fatalf("Reconcile = %+v, want delivered with SID %s", got, r.ProviderID)
		}
		if got.Receipt.SentAt.Before(since.Add(-time.Second)) || got.Receipt.SentAt.After(until) {
			t.Errorf("SentAt %v outside the window [%v, %v]", got.Receipt.SentAt, since, until)
		}
	})

	t.Run("DeliveredEvenWithinTheLag", func(t *testing.T) {
		_, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: time.Hour})
		m := sms(testTo, "Parcel SHP-2: delivered")
		since, until := window(func() {
			if _, err := n.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		})
		got, err := n.Reconcile(ctx, m, byText(m, since, until))
		if err != nil || !got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; a listed message is delivered whatever the lag", got, err)
		}
	})

	t.Run("MatchesWhatWasSentNotTheTextNow", func(t *testing.T) {
		// The message was sent in one wording; the caller renders another
		// now (a template reworded since). The caller's rule decides.
		_, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: noLag})
		sent := sms(testTo, "Parcel SHP-7: out for delivery")
		since, until := window(func() {
			if _, err := n.Send(ctx, sent); err != nil {
				t.Fatal(err)
			}
		})
		now := sms(testTo, "Harborlight: parcel SHP-7 is out for delivery")
		w := ports.Window{Since: since, Until: until, Sent: func(text string) bool { return text == sent.Text }}
		if got, err := n.Reconcile(ctx, now, w); err != nil || !got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want delivered: the listed text is what was sent", got, err)
		}
		if got, err := n.Reconcile(ctx, now, byText(now, since, until)); err != nil || got.Delivered {
			t.Fatalf("Reconcile by today's text = %+v, %v; want not delivered", got, err)
		}
	})

	t.Run("NotDelivered", func(t *testing.T) {
		d, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: noLag})
		// Around it, what must not match: the same text to another number,
		// another text to the same number, the same text from another
		// sender.
		other := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: "+15550001234", APIURL: apiURL})
		m := sms(testTo, "Parcel SHP-3: delayed")
		since, until := window(func() {
			for _, send := range []struct {
				n *twilio.Notifier
				m ports.Message
			}{{n, sms("+15559998888", m.Text)}, {n, sms(testTo, "Parcel SHP-3: delivered")}, {other, m}} {
				if _, err := send.n.Send(ctx, send.m); err != nil {
					t.Fatal(err)
				}
			}
		})
		if len(d.Messages()) != 3 {
			t.Fatalf("double holds %d messages, want 3", len(d.Messages()))
		}
		got, err := n.Reconcile(ctx, m, byText(m, since, until))
		if err != nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want not delivered", got, err)
		}
	})

	t.Run("NotDeliveredOutsideTheWindow", func(t *testing.T) {
		_, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: noLag, ClockSkew: time.Second})
		m := sms(testTo, "Parcel SHP-4: out for delivery")
		if _, err := n.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		// The same message, sent now, is not the attempt of an hour ago.
		got, err := n.Reconcile(ctx, m, byText(m, time.Now().Add(-time.Hour), time.Now().Add(-59*time.Minute)))
		if err != nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want not delivered", got, err)
		}
	})

	t.Run("ErrLagWindowCannotTell", func(t *testing.T) {
		_, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: time.Minute})
		m := sms(testTo, "Parcel SHP-5: delayed")
		got, err := n.Reconcile(ctx, m, byText(m, time.Now().Add(-time.Second), time.Now()))
		if !errors.Is(err, twilio.ErrListLag) || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want ErrListLag: the list may not show it yet", got, err)
		}
		var re *twilio.ReconcileError
		if !errors.As(err, &re) {
			t.Errorf("err = %#v, want a *twilio.ReconcileError", err)
		}
		AssertSafeErrorText(t, err, apiURL)
	})

	t.Run("ErrListFailingCannotTell", func(t *testing.T) {
		fake := NewFakeTwilio(t, reply(http.StatusInternalServerError, twilioError(500, 20500, "Internal Server Error for "+testTo)))
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL, ListLag: noLag})
		got, err := n.Reconcile(ctx, sms(testTo, "x"), byText(sms(testTo, "x"), time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)))
		if err == nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want cannot tell", got, err)
		}
		if !strings.Contains(err.Error(), "500") {
			t.Errorf("error %q does not name the status", err)
		}
		AssertSafeErrorText(t, err, fake.URL)
		r := fake.Only(t)
		if r.Method != http.MethodGet || r.Path != "/2010-04-01/Accounts/"+testSID+"/Messages.json" || r.User != testSID || r.Pass != testToken {
			t.Errorf("request = %s %s as %s, want the account's Messages list, authenticated", r.Method, r.Path, r.User)
		}
	})

	t.Run("ErrListHangingBoundedByTimeout", func(t *testing.T) {
		arrived := make(chan struct{}, 1)
		fake := NewFakeTwilio(t, hang(t, arrived))
		const timeout = 300 * time.Millisecond
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL, Timeout: timeout, ListLag: noLag})
		start := time.Now()
		got, err := n.Reconcile(ctx, sms(testTo, "x"), byText(sms(testTo, "x"), time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)))
		if err == nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want cannot tell", got, err)
		}
		if el := time.Since(start); el > timeout+time.Second {
			t.Errorf("Reconcile took %v, want about %v", el, timeout)
		}
		AssertSafeErrorText(t, err, fake.URL)
	})

	t.Run("Paging", func(t *testing.T) {
		d, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: noLag})
		m := sms(testTo, "Parcel SHP-6: out for delivery")
		var r ports.Receipt
		since, until := window(func() {
			var err error
			if r, err = n.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
			// 45 newer messages to the same number: ours is on page 3.
			for i := range 45 {
				if _, err := n.Send(ctx, sms(testTo, fmt.Sprint("other ", i))); err != nil {
					t.Fatal(err)
				}
			}
		})
		got, err := n.Reconcile(ctx, m, byText(m, since, until))
		if err != nil || !got.Delivered || got.Receipt.ProviderID != r.ProviderID {
			t.Fatalf("Reconcile = %+v, %v; want delivered as %s from page 3", got, err, r.ProviderID)
		}
		got, err = n.Reconcile(ctx, sms(testTo, "never sent"), byText(sms(testTo, "never sent"), since, until))
		if err != nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want not delivered after every page", got, err)
		}
		if len(d.Messages()) != 46 {
			t.Fatalf("double holds %d messages, want 46", len(d.Messages()))
		}
	})

	t.Run("ErrTooManyPagesCannotTell", func(t *testing.T) {
		_, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, ListLag: noLag})
		since, until := window(func() {
			for i := range 201 { // more than 10 pages of 20
				if _, err := n.Send(ctx, sms(testTo, fmt.Sprint("other ", i))); err != nil {
					t.Fatal(err)
				}
			}
		})
		got, err := n.Reconcile(ctx, sms(testTo, "never sent"), byText(sms(testTo, "never sent"), since, until))
		if !errors.Is(err, twilio.ErrListIncomplete) || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want ErrListIncomplete", got, err)
		}
	})

	t.Run("StopsPagingPastTheWindow", func(t *testing.T) {
		// One page whose last message was created and sent before the
		// window, with a next page that would fail: the listing is complete
		// without it.
		old := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC1123Z)
		var gets atomic.Int64
		fake := NewFakeTwilio(t, func(w http.ResponseWriter, r *http.Request) {
			if gets.Add(1) > 1 {
				reply(http.StatusInternalServerError, twilioError(500, 20500, "page 2"))(w, r)
				return
			}
			reply(http.StatusOK, fmt.Sprintf(`{"messages":[{"sid":"SMold","to":%q,"from":%q,"body":"old","date_created":%q,"date_sent":%q}],
				"next_page_uri":"/2010-04-01/Accounts/%s/Messages.json?Page=1&PageToken=PASMold","page":0,"page_size":20}`, testTo, testFrom, old, old, testSID))(w, r)
		})
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL, ListLag: noLag})
		got, err := n.Reconcile(ctx, sms(testTo, "x"), byText(sms(testTo, "x"), time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)))
		if err != nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want not delivered", got, err)
		}
		if gets.Load() != 1 {
			t.Errorf("%d list requests, want 1", gets.Load())
		}
	})

	t.Run("QueuedMessageKeepsPaging", func(t *testing.T) {
		// An old message still queued (no date_sent) does not end the
		// listing: the list may be ordered by date_sent.
		old := time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC1123Z)
		var gets atomic.Int64
		fake := NewFakeTwilio(t, func(w http.ResponseWriter, r *http.Request) {
			gets.Add(1)
			if r.URL.Query().Get("PageToken") == "" {
				reply(http.StatusOK, fmt.Sprintf(`{"messages":[{"sid":"SMold","to":%q,"body":"old","date_created":%q,"date_sent":null}],
					"next_page_uri":"/2010-04-01/Accounts/%s/Messages.json?Page=1&PageToken=PASMold"}`, testTo, old, testSID))(w, r)
				return
			}
			reply(http.StatusOK, `{"messages":[],"next_page_uri":null}`)(w, r)
		})
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: fake.URL, ListLag: noLag})
		got, err := n.Reconcile(ctx, sms(testTo, "x"), byText(sms(testTo, "x"), time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)))
		if err != nil || got.Delivered {
			t.Fatalf("Reconcile = %+v, %v; want not delivered", got, err)
		}
		if gets.Load() != 2 {
			t.Errorf("%d list requests, want 2", gets.Load())
		}
	})

	t.Run("MessagingService", func(t *testing.T) {
		_, apiURL := StartDouble(t)
		n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, MessagingServiceSID: "MG1", APIURL: apiURL, ListLag: noLag})
		other := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, MessagingServiceSID: "MG2", APIURL: apiURL, ListLag: noLag})
		m := sms(testTo, "Parcel SHP-7: out for delivery")
		var r ports.Receipt
		since, until := window(func() {
			var err error
			if r, err = n.Send(ctx, m); err != nil {
				t.Fatal(err)
			}
		})
		got, err := n.Reconcile(ctx, m, byText(m, since, until))
		if err != nil || !got.Delivered || got.Receipt.ProviderID != r.ProviderID {
			t.Fatalf("Reconcile = %+v, %v; want delivered as %s", got, err, r.ProviderID)
		}
		got, err = other.Reconcile(ctx, m, byText(m, since, until))
		if err != nil || got.Delivered {
			t.Fatalf("another service's Reconcile = %+v, %v; want not delivered", got, err)
		}
	})
}

// TestReconcileAsksTheSenderTheSendUsed: a send made from one sender is
// reconciled by a Notifier configured with another (a deploy changed
// TWILIO_FROM_NUMBER, or moved to a messaging service, or back): given the
// window's sender, the send's own Sender, it finds the message, which its
// own sender would not.
func TestReconcileAsksTheSenderTheSendUsed(t *testing.T) {
	ctx := context.Background()
	byNumber := twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, ListLag: noLag}
	byOtherNumber := twilio.Config{AccountSID: testSID, AuthToken: testToken, From: "+15550009999", ListLag: noLag}
	byService := twilio.Config{AccountSID: testSID, AuthToken: testToken, MessagingServiceSID: "MG1", ListLag: noLag}
	byOtherService := twilio.Config{AccountSID: testSID, AuthToken: testToken, MessagingServiceSID: "MG2", ListLag: noLag}
	for _, tc := range []struct {
		name       string
		sent, asks twilio.Config
	}{
		{"NewFromNumber", byNumber, byOtherNumber},
		{"FromNumberToService", byNumber, byService},
		{"ServiceToFromNumber", byService, byNumber},
		{"NewService", byService, byOtherService},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, apiURL := StartDouble(t)
			tc.sent.APIURL, tc.asks.APIURL = apiURL, apiURL
			sender, asker := MustNew(t, tc.sent), MustNew(t, tc.asks)
			if sender.Sender() == asker.Sender() {
				t.Fatalf("both notifiers name their sender %q", sender.Sender())
			}
			m := sms(testTo, "Parcel SHP-8: out for delivery")
			var r ports.Receipt
			since, until := window(func() {
				var err error
				if r, err = sender.Send(ctx, m); err != nil {
					t.Fatal(err)
				}
			})
			w := byText(m, since, until)
			if got, err := asker.Reconcile(ctx, m, w); err != nil || got.Delivered {
				t.Fatalf("asked about its own sender %q: %+v, %v; want not delivered", asker.Sender(), got, err)
			}
			w.Sender = sender.Sender()
			if got, err := asker.Reconcile(ctx, m, w); err != nil || !got.Delivered || got.Receipt.ProviderID != r.ProviderID {
				t.Fatalf("asked about the send's sender %q: %+v, %v; want delivered as %s", w.Sender, got, err, r.ProviderID)
			}
		})
	}
	t.Run("ErrUnknownSenderCannotTell", func(t *testing.T) {
		_, apiURL := StartDouble(t)
		byNumber.APIURL = apiURL
		m := sms(testTo, "Parcel SHP-9: out for delivery")
		w := byText(m, time.Now().Add(-time.Hour), time.Now().Add(-time.Minute))
		w.Sender = "+15550001111"
		if got, err := MustNew(t, byNumber).Reconcile(ctx, m, w); err == nil {
			t.Fatalf("a sender of no known form: %+v, want cannot tell", got)
		}
	})
}

// TestUnknownOutcomesReconciled: of 8 sends whose answer never comes, the 4
// Twilio accepted are found by Reconcile with the SID Twilio gave them, and
// the 4 it dropped are not delivered.
func TestUnknownOutcomesReconciled(t *testing.T) {
	d, apiURL := StartDouble(t)
	const timeout = 300 * time.Millisecond
	n := MustNew(t, twilio.Config{AccountSID: testSID, AuthToken: testToken, From: testFrom, APIURL: apiURL, Timeout: timeout, ListLag: noLag})

	type attempt struct {
		m            ports.Message
		since, until time.Time
		accepted     bool
	}
	var attempts []attempt
	for i := range 8 {
		to := fmt.Sprintf("+1555010%04d", i)
		accepted := i < 4
		if accepted {
			// Twilio takes it, its answer comes after the client gave up.
			d.Fail(double.Fault{To: to, Count: 1, Accept: true, Delay: double.Duration(10 * timeout)})
		} else {
			// Taken and dropped: no answer, nothing accepted.
			d.Fail(double.Fault{To: to, Count: 1, Drop: true})
		}
		attempts = append(attempts, attempt{m: sms(to, fmt.Sprint("Parcel SHP-", i, ": out for delivery")), accepted: accepted})
	}

	ctx := context.Background()
	for i := range attempts {
		a := &attempts[i]
		var err error
		a.since, a.until = window(func() { _, err = n.Send(ctx, a.m) })
		if !errors.Is(err, ports.ErrOutcomeUnknown) {
			t.Fatalf("send %d: err = %v, want an unknown outcome", i, err)
		}
		var te *twilio.Error
		if !errors.As(err, &te) {
			t.Errorf("send %d: err = %#v, want a *twilio.Error inside", i, err)
		}
	}

	stored := map[string]string{} // To -> SID
	for _, m := range d.Messages() {
		stored[m.To] = m.SID
	}
	if len(stored) != 4 {
		t.Fatalf("double accepted %d messages, want 4", len(stored))
	}
	for i, a := range attempts {
		got, err := n.Reconcile(ctx, a.m, byText(a.m, a.since, a.until))
		if err != nil {
			t.Fatalf("reconcile %d: %v", i, err)
		}
		switch {
		case a.accepted && (!got.Delivered || got.Receipt.ProviderID != stored[a.m.To] || got.Receipt.ProviderID == ""):
			t.Errorf("reconcile %d = %+v, want delivered as %s", i, got, stored[a.m.To])
		case !a.accepted && got.Delivered:
			t.Errorf("reconcile %d = %+v, want not delivered", i, got)
		}
	}
}

// byText is the window [since, until] for a send of m's text.
func byText(m ports.Message, since, until time.Time) ports.Window {
	return ports.Window{Since: since, Until: until, Sent: func(text string) bool { return text == m.Text }}
}
