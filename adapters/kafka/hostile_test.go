package kafka_test

// Hostile records end to end: each bad record, published between good ones
// on one partition and one key, goes through the real consumer and the real
// domain service; it must come out once on the dead letter topic with a
// reason a person understands, while every good record is sent and the
// worker lives on, a panicking notifier included.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// recordingNotifier keeps what it was asked to send, per event and
// channel, and panics for the events panicFor names.
type recordingNotifier struct {
	ch       ports.Channel
	panicFor func(m ports.Message) bool

	mu   sync.Mutex
	sent map[string][]ports.Message // by event_id
}

func newRecordingNotifier(ch ports.Channel, panicFor func(ports.Message) bool) *recordingNotifier {
	return &recordingNotifier{ch: ch, panicFor: panicFor, sent: map[string][]ports.Message{}}
}

func (n *recordingNotifier) Send(_ context.Context, m ports.Message) (ports.Receipt, error) {
	if n.panicFor != nil && n.panicFor(m) {
		panic(fmt.Sprintf("%s notifier bug on %s", n.ch, m.EventID))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sent[m.EventID] = append(n.sent[m.EventID], m)
	return ports.Receipt{ProviderID: fmt.Sprintf("%s-%s", n.ch, m.EventID), SentAt: time.Now()}, nil
}

func (n *recordingNotifier) sentFor(eventID string) []ports.Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]ports.Message(nil), n.sent[eventID]...)
}

// shipmentEvent is a valid record for event id, on both channels, with
// extra raw JSON members appended.
func shipmentEvent(id, extra string) string {
	return `{"event_id":"` + id + `","type":"shipment.out_for_delivery","shipment_id":"SHP-1",` +
		`"recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"},` +
		`"data":{"eta":"14:00-16:00"}` + extra + `}`
}

func TestHostileRecordsEndToEnd(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "hostile")
	brokers := MustStartEmbedded(t, 1, topic).Brokers()

	const consumerLimit = 256 << 10
	bad := []struct {
		name, value, reason string
	}{
		{"NotJSON", `nope`, "not a JSON event"},
		{"InvalidUTF8", strings.Replace(shipmentEvent("bad-utf8", ""), "Ada", "Ada\xff", 1), "not valid UTF-8"},
		{"LoneSurrogateEscape", strings.Replace(shipmentEvent("bad-surrogate", ""), "Ada", `Ada\ud800`, 1), "recipient.name: not valid UTF-8"},
		{"OverConsumerRecordLimit", shipmentEvent("bad-huge", `,"pad":"`+strings.Repeat("x", consumerLimit)+`"`), "record too large"},
		{"DeeplyNested", shipmentEvent("bad-deep", `,"x":`+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)), "nested deeper than 32 levels"},
		{"DuplicateRecipientKey", strings.Replace(shipmentEvent("bad-dup", ""), `"phone":"+31201234567"`, `"phone":"+31201234567","phone":"+31207654321"`, 1), "recipient.phone: the key appears more than once"},
		{"CaseVariantKey", strings.Replace(shipmentEvent("bad-case", ""), `"type"`, `"TYPE":"shipment.delivered","type"`, 1), `field names are case-sensitive: want "type"`},
		{"HugeEventID", shipmentEvent(strings.Repeat("e", 10<<10), ""), "longer than 128 bytes"},
		{"BlankEventID", shipmentEvent("   ", ""), "event_id: required"},
		{"UnknownType", strings.Replace(shipmentEvent("bad-type", ""), "shipment.out_for_delivery", "shipment.teleported", 1), `unknown event type "shipment.teleported"`},
		{"NoAddress", `{"event_id":"bad-addr","type":"shipment.created","shipment_id":"SHP-1","recipient":{"name":"Ada"}}`, "recipient: neither phone nor email"},
		{"NotifierPanics", shipmentEvent("panic-1", ""), "panic: sms notifier bug on panic-1"},
	}

	sms := newRecordingNotifier(ports.ChannelSMS, func(m ports.Message) bool { return strings.HasPrefix(m.EventID, "panic-") })
	email := newRecordingNotifier(ports.ChannelEmail, nil)
	svc, err := domain.NewService(domain.Config{
		Store:     memory.New(nil),
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: sms, ports.ChannelEmail: email},
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("NewService: %v", err)
	}

	// good-0, bad, good-1, bad, ..., good-N: one key, so each record waits
	// for the one before it, and a good record handled after a bad one
	// shows the partition moved on.
	var msgs []kafka.Message
	var goods []string
	addGood := func(id string) {
		goods = append(goods, id)
		msgs = append(msgs, kafka.Message{Key: []byte("SHP-1"), Value: []byte(shipmentEvent(id, ""))})
	}
	addGood("good-0")
	for i, b := range bad {
		msgs = append(msgs, kafka.Message{Key: []byte("SHP-1"), Value: []byte(b.value)})
		addGood(fmt.Sprintf("good-%d", i+1))
	}
	// A name that tries to add a header is not a bad record: it is sent,
	// on one line.
	msgs = append(msgs, kafka.Message{Key: []byte("SHP-1"), Value: []byte(strings.Replace(
		shipmentEvent("good-crlf", ""), `"Ada"`, `"Ada\r\nBcc: evil@example.com"`, 1))})
	goods = append(goods, "good-crlf")
	MustPublish(t, brokers, topic, msgs...)

	cfg, _ := testConfig(brokers, topic)
	cfg.MaxRecordBytes = consumerLimit
	metrics := newFakeMetrics()
	cfg.Metrics = metrics
	rc := MustRun(t, cfg, svc)

	sentEverywhere := func(id string) bool {
		return len(sms.sentFor(id)) == 1 && len(email.sentFor(id)) == 1
	}
	wait.For(t, 60*time.Second, "every good record sent and every bad one dead-lettered", func() bool {
		if dl, _ := metrics.counts(); dl < len(bad) {
			return false
		}
		for _, id := range goods {
			if !sentEverywhere(id) {
				return false
			}
		}
		return true
	})
	// Committed past every record: no bad record holds the partition.
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: int64(len(msgs))})

	t.Run("EachBadRecordDeadLetteredOnceWithAReason", func(t *testing.T) {
		dlq := readTopic(t, brokers, cfg.DLQTopic)
		if len(dlq) != len(bad) {
			t.Errorf("%d records dead-lettered, want %d", len(dlq), len(bad))
		}
		for _, b := range bad {
			t.Run(b.name, func(t *testing.T) {
				var found int
				for _, m := range dlq {
					if string(m.Value) != b.value {
						continue
					}
					found++
					reason, _ := header(m, kafka.HeaderDLQReason)
					kind, _ := header(m, kafka.HeaderDLQKind)
					if !strings.Contains(reason, b.reason) || kind != "permanent" {
						t.Errorf("reason %q kind %q, want a permanent reason containing %q", reason, kind, b.reason)
					}
					checkReadable(t, reason)
				}
				if found != 1 {
					t.Errorf("found %d times in the dead letter topic, want once", found)
				}
			})
		}
	})

	t.Run("EveryGoodRecordSentOnce", func(t *testing.T) {
		for _, id := range goods {
			if !sentEverywhere(id) {
				t.Errorf("%s: %d SMS, %d emails, want 1 of each", id, len(sms.sentFor(id)), len(email.sentFor(id)))
			}
		}
		if m := email.sentFor("good-crlf"); len(m) == 1 && m[0].ToName != "Ada Bcc: evil@example.com" {
			t.Errorf("ToName %q, want the name on one line", m[0].ToName)
		}
	})

	t.Run("PanicCountedAndNothingSentForIt", func(t *testing.T) {
		if _, panics := metrics.counts(); panics != 1 {
			t.Errorf("HandlerPanicked %d times, want 1", panics)
		}
		if n := len(sms.sentFor("panic-1")) + len(email.sentFor("panic-1")); n != 0 {
			t.Errorf("%d messages sent for the panicking record", n)
		}
	})

	t.Run("WorkerStillLive", func(t *testing.T) {
		MustPublish(t, brokers, topic, kafka.Message{Key: []byte("SHP-2"), Value: []byte(shipmentEvent("good-after", ""))})
		wait.For(t, 30*time.Second, "a record published after the hostile ones to be sent", func() bool {
			return sentEverywhere("good-after")
		})
	})

	rc.MustStop(t, 30*time.Second)
}

// checkReadable: a reason is for a person: short, one line, printable, and
// not an echo of a huge value.
func checkReadable(t *testing.T, reason string) {
	t.Helper()
	if reason == "" || len(reason) > 1024 || !utf8.ValidString(reason) {
		t.Errorf("reason of %d bytes %.120q: want a short UTF-8 sentence", len(reason), reason)
	}
	if strings.Contains(reason, strings.Repeat("e", 100)) || strings.Contains(reason, strings.Repeat("x", 100)) {
		t.Errorf("reason %.120q echoes a huge value", reason)
	}
	for _, r := range reason {
		if unicode.IsControl(r) {
			t.Errorf("reason %q holds a control character", reason)
			return
		}
	}
}
