//go:build integration

package integration_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/smtp"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twilio/twilio-go"
	"github.com/twilio/twilio-go/client"
	openapi "github.com/twilio/twilio-go/rest/api/v2010"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// TestHarness proves each peer the scenarios build on: it starts, and a
// round trip through it shows what a scenario will assert on.
func TestHarness(t *testing.T) {
	t.Parallel()
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		r := integration.StartRedis(t)
		key := "harness:" + t.Name()
		if err := r.Client.Do(ctx, r.Client.B().Set().Key(key).Value("sent").Px(time.Hour).Build()).Error(); err != nil {
			t.Fatal(err)
		}

		// An outage: connections fail while the server is down...
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// (rueidis retries a read until its context ends: bound it.)
		down, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _, err := r.Get(down, key)
		cancel()
		if err == nil {
			t.Fatal("GET answered while Redis was stopped")
		}
		// ...and the key survives the restart on the same address.
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		val, ok, err := r.Get(ctx, key)
		if err != nil || !ok || val != "sent" {
			t.Fatalf("after restart: %q, %v, %v; want \"sent\"", val, ok, err)
		}
		ttl, ok, err := r.PTTL(ctx, key)
		if err != nil || !ok || ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("PTTL = %v, %v, %v; want just under 1h", ttl, ok, err)
		}
		if _, ok, _ := r.PTTL(ctx, key+":absent"); ok {
			t.Fatal("PTTL reports an absent key as present")
		}
		if keys, err := r.Keys(ctx, "harness:*"); err != nil || len(keys) != 1 {
			t.Fatalf("Keys = %v, %v", keys, err)
		}
	})

	t.Run("Mailpit", func(t *testing.T) {
		t.Parallel()
		m := integration.StartMailpit(t)
		addr := fmt.Sprintf("%s:%d", m.SMTPHost, m.SMTPPort)
		body := "Message-ID: <evt-1.email@harborlight.test>\r\n" +
			"From: notifications@harborlight.test\r\n" +
			"To: ada@example.com\r\n" +
			"Subject: Out for delivery\r\n" +
			"\r\n" +
			"Your parcel SHP-100234 arrives 14:00-16:00.\r\n"
		// net/smtp allows PLAIN auth without TLS on 127.0.0.1 only: here.
		auth := smtp.PlainAuth("", "worker", "secret", m.SMTPHost)
		if err := smtp.SendMail(addr, auth, "notifications@harborlight.test", []string{"ada@example.com"}, []byte(body)); err != nil {
			t.Fatal(err)
		}

		got, err := m.WaitMessages(context.Background(), 1, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e := got[0]
		if len(got) != 1 || e.MessageID != "evt-1.email@harborlight.test" || e.From != "notifications@harborlight.test" ||
			len(e.To) != 1 || e.To[0] != "ada@example.com" || e.Subject != "Out for delivery" ||
			!strings.Contains(e.Text, "SHP-100234") {
			t.Fatalf("received %+v", got)
		}
	})

	t.Run("TwilioDouble", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		tw := integration.StartTwilioDouble(t)
		rc := twilioClient(t, tw)
		if err := tw.Fail(ctx, double.Fault{To: "+15550001111", Status: 400, Code: 21211}); err != nil {
			t.Fatal(err)
		}

		sent, err := sendSMS(rc, tw.From, "+15551234567")
		if err != nil {
			t.Fatal(err)
		}
		_, err = sendSMS(rc, tw.From, "+15550001111")
		var tErr *client.TwilioRestError
		if !errors.As(err, &tErr) || tErr.Code != 21211 || tErr.Status != 400 {
			t.Fatalf("send to the failing number: %v, want 400 code 21211", err)
		}

		msgs, err := tw.Messages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || msgs[0].SID != *sent.Sid || msgs[0].To != "+15551234567" || msgs[0].From != tw.From {
			t.Fatalf("messages = %+v", msgs)
		}
		attempts, err := tw.Attempts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(attempts) != 2 || attempts[1].Code != 21211 {
			t.Fatalf("attempts = %+v", attempts)
		}
	})

	t.Run("Kafka", func(t *testing.T) {
		t.Parallel()
		// The broker the scenarios share, started by StartKafka as a
		// test's own broker is (TestKafkaAdapterOnApacheKafka starts one).
		k := integration.SharedKafka(t)
		// The round trip's deadline, from when the broker answers: its
		// start has a bound of its own.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		topic, group := "harness-events", "harness-group"
		if err := k.CreateTopic(ctx, topic, integration.DefaultPartitions); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if err := k.Publish(ctx, topic, fmt.Sprintf("SHP-%d", i), []byte(fmt.Sprintf(`{"event_id":"e%d"}`, i))); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := k.ReadTopic(ctx, topic, 3)
		if err != nil || len(recs) != 3 {
			t.Fatalf("read %d records: %v", len(recs), err)
		}

		// A group consumes everything and commits: CommittedOffsets must then
		// equal the end offsets, the check scenarios make after a shutdown.
		consumeAndCommit(ctx, t, k, topic, group, 3)
		committed, err := k.CommittedOffsets(ctx, group, topic)
		if err != nil {
			t.Fatal(err)
		}
		end, err := k.EndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for p, o := range end {
			if o > 0 && committed[p] != o {
				t.Fatalf("partition %d: committed %d, end %d (committed %v)", p, committed[p], o, committed)
			}
		}

		// The dead letter topic is created on first use, as the worker's is.
		if err := k.PublishRecords(ctx, &kgo.Record{Topic: topic + ".dlq", Value: []byte("poison"),
			Headers: []kgo.RecordHeader{{Key: "reason", Value: []byte("decode")}}}); err != nil {
			t.Fatal(err)
		}
		dlq, err := k.ReadDLQ(ctx, topic, 1)
		if err != nil || len(dlq) != 1 || string(dlq[0].Value) != "poison" || string(dlq[0].Headers[0].Value) != "decode" {
			t.Fatalf("dlq = %v, %v", dlq, err)
		}
	})
}

// twilioClient is the real twilio-go client pointed at the double, set up
// the way the worker's adapter does it (twilio-go has no base-URL option).
func twilioClient(t *testing.T, tw *integration.Twilio) *twilio.RestClient {
	t.Helper()
	base, err := url.Parse(tw.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := &client.Client{
		Credentials: client.NewCredentials(tw.AccountSID, tw.AuthToken),
		HTTPClient:  &http.Client{Transport: rewriteHost{base}, Timeout: 5 * time.Second},
	}
	c.SetAccountSid(tw.AccountSID)
	return twilio.NewRestClientWithParams(twilio.ClientParams{Client: c})
}

type rewriteHost struct{ base *url.URL }

func (r rewriteHost) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = r.base.Scheme, r.base.Host
	return http.DefaultTransport.RoundTrip(req)
}

func sendSMS(rc *twilio.RestClient, from, to string) (*openapi.ApiV2010Message, error) {
	p := &openapi.CreateMessageParams{}
	p.SetTo(to).SetFrom(from).SetBody("Your parcel is out for delivery")
	return rc.Api.CreateMessage(p)
}

// consumeAndCommit reads n records of topic in group and commits them.
func consumeAndCommit(ctx context.Context, t *testing.T, k *integration.Kafka, topic, group string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d: %v", got, n, ctx.Err())
		}
		got += len(fs.Records())
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHarnessWorker proves the worker helpers on both runners: one event in,
// one SMS at the double and one email at mailpit out, a clean SIGTERM exit.
// It also proves the worker image and binary read their whole
// configuration from the environment the peers' Env methods give.
func TestHarnessWorker(t *testing.T) {
	t.Parallel()
	for _, run := range []struct {
		name  string
		start func(testing.TB, map[string]string) *integration.Worker
	}{
		{"Process", integration.StartWorkerProcess},
		{"Container", integration.StartWorkerContainer},
	} {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			// The broker the scenarios share.
			k := integration.SharedKafka(t)
			r := integration.StartRedis(t)
			m := integration.StartMailpit(t)
			tw := integration.StartTwilioDouble(t)
			// The scenario's deadline, from when every peer answers: their
			// starts have bounds of their own.
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			topic := "harness-" + strings.ToLower(run.name)
			if err := k.CreateTopic(ctx, topic, integration.DefaultPartitions); err != nil {
				t.Fatal(err)
			}

			w := run.start(t, integration.Env(k.Env(topic, topic+"-group"), r.Env(), m.Env(), tw.Env()))
			if err := w.WaitReady(60 * time.Second); err != nil {
				t.Fatal(err)
			}
			event := `{"event_id":"7f1c9a52-3d4e-4b8a-9f0e-2c6d1e8b5a43","type":"shipment.out_for_delivery",` +
				`"occurred_at":"` + time.Now().UTC().Format(time.RFC3339) + `","shipment_id":"SHP-100234",` +
				`"recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"},` +
				`"channels":["sms","email"],"data":{"eta":"14:00-16:00","tracking_url":"https://track.example/SHP-100234"}}`
			if err := k.Publish(ctx, topic, "SHP-100234", []byte(event)); err != nil {
				t.Fatal(err)
			}

			if _, err := w.WaitLog("notification_sent", 2, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			sms, err := tw.Messages(ctx)
			if err != nil || len(sms) != 1 || sms[0].To != "+31201234567" {
				t.Fatalf("sms = %+v, %v", sms, err)
			}
			mail, err := m.WaitMessages(ctx, 1, 10*time.Second)
			if err != nil || len(mail) != 1 || mail[0].To[0] != "ada@example.com" {
				t.Fatalf("mail = %+v, %v", mail, err)
			}

			if err := w.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if code, exited := w.ExitCode(); !exited || code != 0 {
				t.Fatalf("exit = %d, %v; want 0 after SIGTERM\n%s", code, exited, strings.Join(w.Logs(), "\n"))
			}
		})
	}
}
