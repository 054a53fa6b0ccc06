package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/adapters/smtp/smtptest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// TestMain_ShutdownPaysOrReportsTheLedger: an SMS is sent while Redis
// refuses writes (out of memory), so its sent record is owed. Then SIGTERM.
//
// When Redis takes writes again just before SIGTERM (before the background
// drain's next try), Close writes the record: it is in Redis, and a replay
// by a new worker is suppressed (1 SMS at the double). When Redis still
// refuses at SIGTERM, the record is lost with the process, and the worker
// says so: owed_records_lost at error level with the count, and
// notification_worker_owed_records_lost_total.
func TestMain_ShutdownPaysOrReportsTheLedger(t *testing.T) {
	for _, tc := range []struct {
		name      string
		storeBack bool
	}{
		{"StoreBackJustBeforeSIGTERM", true},
		{"StoreDownAtSIGTERM", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startRetryPeers(t, smtptest.Script{}, nil, nil)
			client := p.redis.MustClient(t, 0)
			admin := func(args ...string) {
				if err := client.Do(context.Background(), client.B().Arbitrary(args...).Build()).Error(); err != nil {
					t.Fatalf("redis %v: %v", args, err)
				}
			}
			admin("CONFIG", "SET", "maxmemory", "1") // every write refused: OOM
			t.Cleanup(func() { admin("CONFIG", "SET", "maxmemory", "0") })

			evs, _ := sampleEvents(1)
			evs[0].Channels = []string{"sms"}
			MustPublish(t, p.brokers, p.topic, eventMessages(evs)...)
			wait.For(t, waitWithin, "the SMS sent and its record owed", func() (bool, string) {
				s := scrape(t, p.m)
				sent := sumOf(s, "notification_worker_notifications_total{", `channel="sms"`, `outcome="sent"`)
				owed := sumOf(s, "notification_worker_ledger_owed")
				return sent == 1 && owed == 1, fmt.Sprintf("sent %v, owed %v", sent, owed)
			})
			if tc.storeBack {
				admin("CONFIG", "SET", "maxmemory", "0")
			}
			if err := p.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			p.m.Close()

			logs := p.m.Stdout.(*logtest.Buffer).String()
			lost, lostLine := owedRecordsLost(t, logs)
			counted := gathered(t, p.m, "notification_worker_owed_records_lost_total")
			key := storeKey(t, p.m.Config)(domain.NotificationKey(evs[0].EventID, ports.ChannelSMS))
			v, err := client.Do(context.Background(), client.B().Get().Key(key).Build()).ToString()
			recorded := err == nil && isSentRecord(v)

			if !tc.storeBack {
				if lost != 1 || !strings.Contains(lostLine, `"level":"ERROR"`) {
					t.Errorf("owed_records_lost: count %d, line %q; want one error line with count 1", lost, lostLine)
				}
				if counted != 1 {
					t.Errorf("notification_worker_owed_records_lost_total = %v, want 1", counted)
				}
				return
			}
			if !recorded {
				t.Errorf("after Close, GET %s = %q, %v: want the sent record Close owed", key, v, err)
			}
			if lost != 0 || counted != 0 {
				t.Errorf("owed_records_lost count %d, counter %v: want nothing lost", lost, counted)
			}
			// A replay by a new worker (another group reads the topic from
			// the start) finds the record and sends nothing.
			cfg := p.m.Config.With("KAFKA_GROUP_ID", uniqueName("group"))
			replay := &Main{Config: cfg, Stdout: &logtest.Buffer{}}
			MustOpen(t, replay)
			MustRun(t, replay)
			wait.For(t, waitWithin, "the replay handled", func() (bool, string) {
				s := scrape(t, replay)
				n := sumOf(s, "notification_worker_notifications_total{", `channel="sms"`)
				return n == 1, fmt.Sprintf("notifications counted by the replaying worker: %v", n)
			})
			if got := len(p.twilio.Messages()); got != 1 {
				t.Errorf("the Twilio double accepted %d SMS, want 1", got)
			}
		})
	}
}

// owedRecordsLost returns the count and the line of the owed_records_lost
// log in logs, or 0 and "" when there is none.
func owedRecordsLost(tb testing.TB, logs string) (int, string) {
	tb.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var ev struct {
			Msg   string
			Count int
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Msg == "owed_records_lost" {
			return ev.Count, line
		}
	}
	return 0, ""
}

// gathered returns the value of the unlabelled metric name in m's registry
// (readable after Close, when /metrics is no longer served), 0 when absent.
func gathered(tb testing.TB, m *Main, name string) float64 {
	tb.Helper()
	mfs, err := m.metrics.Registry().Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		total := 0.0
		for _, mt := range mf.GetMetric() {
			total += mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
		return total
	}
	return 0
}
