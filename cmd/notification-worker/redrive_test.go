package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"
	gosmtp "github.com/emersion/go-smtp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/internal/devbroker"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
)

func TestRedriveCommand(t *testing.T) {
	t.Run("HelpShowsFlags", func(t *testing.T) {
		clearEnv(t)
		code, stdout, stderr := runCmd(t, "", "redrive", "-h")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q; want 0", code, stderr)
		}
		for _, flag := range []string{"-since", "-from", "-reason", "-dry-run"} {
			if !strings.Contains(stdout, flag) {
				t.Errorf("redrive -h does not show %s:\n%s", flag, stdout)
			}
		}
	})

	t.Run("BadFlagsExit2NamingEach", func(t *testing.T) {
		clearEnv(t)
		code, _, stderr := runCmd(t, "", "redrive", "-reason", "bogus", "-since", "yesterday", "-from", "1:x")
		if code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		for _, want := range []string{"KAFKA_BROKERS", `-reason "bogus"`, `-since "yesterday"`, `"1:x" is not partition:offset`, "cannot both be given"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not name %s: %q", want, stderr)
			}
		}
	})

	// The worker dead-letters a malformed record; redrive puts it back on
	// the topic with its key, headers and timestamp; a dry run before and a
	// second run after write nothing.
	t.Run("WorkersDeadLetterRedriven", func(t *testing.T) {
		emb, topic, group := startRedriveBroker(t, "redrive")
		cfg := MustLoadConfig(t, map[string]string{
			"KAFKA_BROKERS": emb.Brokers()[0], "KAFKA_TOPIC": topic, "KAFKA_GROUP_ID": group,
			"HTTP_ADDR": "127.0.0.1:0", "SEND_TIMEOUT": "2s", "SHUTDOWN_TIMEOUT": "5s",
		})
		const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		poison := kafka.Message{
			Key:     []byte("SHP-broken"),
			Value:   []byte(`{"type":"shipment.delivered","shipment_id":"SHP-broken"`),
			Headers: map[string]string{"traceparent": traceparent},
		}
		MustPublish(t, emb.Brokers(), topic, poison)
		var out logtest.Buffer
		m := &Main{Config: cfg, Stdout: &out, Deps: Deps{Store: memory.New(nil), Metrics: prometheus.New()}}
		MustOpen(t, m)
		stop := MustRun(t, m)
		wait.For(t, waitWithin, "the poison record dead-lettered", func() (bool, string) {
			dl := sumOf(scrape(t, m), "notification_worker_records_dead_lettered_total{")
			return dl == 1, fmt.Sprintf("dead-lettered %v of 1", dl)
		})
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}

		code, stdout, stderr := runCmd(t, "", "redrive", "-dry-run")
		if code != 0 || !strings.Contains(stdout, "1 dead letters read, 1 would be redriven") || !strings.Contains(stdout, "permanent") {
			t.Fatalf("dry run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if got := topicRecords(t, emb.Brokers(), topic); got != 1 {
			t.Fatalf("after a dry run the topic holds %d records, want 1", got)
		}

		code, stdout, stderr = runCmd(t, "", "redrive")
		if code != 0 || !strings.Contains(stdout, "1 dead letters read, 1 redriven") || !strings.Contains(stdout, topic+".dlq") {
			t.Fatalf("redrive: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		t.Logf("redrive printed:\n%s", stdout)
		if !strings.Contains(stderr, "1 dead letters read, 1 redriven") {
			t.Errorf("no progress line on stderr: %q", stderr)
		}
		if got := topicRecords(t, emb.Brokers(), topic); got != 2 {
			t.Fatalf("after the redrive the topic holds %d records, want 2", got)
		}
		recs := MustReadHeaders(t, emb.Brokers(), topic, 2)
		orig, again := recs[0], recs[1]
		if string(again.Key) != "SHP-broken" || string(again.Value) != string(poison.Value) {
			t.Errorf("redriven record %q = %q, want the poison record", again.Key, again.Value)
		}
		if again.Partition != orig.Partition || !again.Timestamp.Equal(orig.Timestamp) {
			t.Errorf("redriven to partition %d at %s, want the original's %d at %s", again.Partition, again.Timestamp, orig.Partition, orig.Timestamp)
		}
		if hs := headerMap(again); len(hs) != 1 || hs["traceparent"] != traceparent {
			t.Errorf("redriven record's headers %v, want only traceparent %s", hs, traceparent)
		}

		code, stdout, stderr = runCmd(t, "", "redrive")
		if code != 0 || !strings.Contains(stdout, "1 dead letters read, 0 redriven, 1 already redriven passed over") {
			t.Fatalf("second redrive: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		if got := topicRecords(t, emb.Brokers(), topic); got != 2 {
			t.Fatalf("after the second run the topic holds %d records, want 2", got)
		}
	})
}

// startRedriveBroker starts an embedded broker with a topic named after
// prefix and its dead letter topic, and sets the environment to them
// alone, with a group of its own.
func startRedriveBroker(t *testing.T, prefix string) (emb *devbroker.Broker, topic, group string) {
	t.Helper()
	clearEnv(t)
	topic, group = uniqueName(prefix), uniqueName("group")
	emb = MustStartEmbedded(t, topic)
	t.Setenv("KAFKA_BROKERS", strings.Join(emb.Brokers(), ","))
	t.Setenv("KAFKA_TOPIC", topic)
	t.Setenv("KAFKA_GROUP_ID", group)
	return emb, topic, group
}

// topicRecords returns how many records topic holds: the sum of its
// partitions' end offsets (nothing is deleted in these tests).
func topicRecords(tb testing.TB, brokers []string, topic string) int64 {
	tb.Helper()
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		tb.Fatal(err)
	}
	defer client.Close()
	ps, err := client.Partitions(topic)
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, p := range ps {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			tb.Fatal(err)
		}
		n += end
	}
	return n
}

func headerMap(r *kgo.Record) map[string]string {
	out := map[string]string{}
	for _, h := range r.Headers {
		out[h.Key] = string(h.Value)
	}
	return out
}

// The adversary's case: an event whose SMS went out and whose email ran
// out of retries is dead-lettered whole. Redriven once the mail server is
// back, with Redis healthy, the customer gets the email and not a second
// SMS.
func TestRedrive_PartlySentEventSendsOnlyWhatFailed(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	p := startRetryPeers(t, smtptest.Script{DataReply: func(int) error {
		if failing.Load() {
			return smtpReply(451, gosmtp.EnhancedCode{4, 3, 0}, "try again later")
		}
		return nil
	}}, nil, map[string]string{"RETRY_MAX_ATTEMPTS": "3"})
	p.publishSMSAndEmail(t)
	wait.For(t, waitWithin, "the event dead-lettered as retryable", func() (bool, string) {
		dl := sumOf(scrape(t, p.m), "notification_worker_records_dead_lettered_total{", `kind="retryable"`)
		return dl == 1, fmt.Sprintf("dead-lettered retryable %v of 1", dl)
	})
	p.wantAtPeers(t, 1, 0)

	failing.Store(false)
	k := kafka.LoadSettings(p.m.Config.Settings())
	t.Setenv("KAFKA_BROKERS", strings.Join(k.Brokers, ","))
	t.Setenv("KAFKA_TOPIC", k.Topic)
	t.Setenv("KAFKA_GROUP_ID", k.GroupID)
	code, stdout, stderr := runCmd(t, "", "redrive", "-reason", "retryable")
	if code != 0 || !strings.Contains(stdout, "1 dead letters read, 1 redriven") {
		t.Fatalf("redrive: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	p.waitEmailSent(t)
	wait.For(t, waitWithin, "the SMS of the redriven record suppressed", func() (bool, string) {
		dup := sumOf(scrape(t, p.m), "notification_worker_notifications_total{", `channel="sms"`, `outcome="duplicate"`)
		return dup == 1, fmt.Sprintf("SMS counted duplicate: %v", dup)
	})
	p.wantAtPeers(t, 1, 1)
}
