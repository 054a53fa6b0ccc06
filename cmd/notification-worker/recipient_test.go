package main

import (
	"strings"
	"testing"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/internal/logtest"
)

// An event whose recipient carries a field the worker does not know is
// poison: dead-lettered with a reason naming the field, and nothing sent,
// rather than sent to the addresses it knows while the other is dropped.
func TestMain_UnknownRecipientFieldIsDeadLettered(t *testing.T) {
	topic := uniqueName("recipient")
	emb := MustStartEmbedded(t, topic)
	var out logtest.Buffer
	m := &Main{Config: MustLoadConfig(t, map[string]string{
		"KAFKA_BROKERS": emb.Brokers()[0], "KAFKA_TOPIC": topic, "KAFKA_GROUP_ID": uniqueName("group"), "HTTP_ADDR": "off",
	}), Stdout: &out}
	MustOpen(t, m)
	MustRun(t, m)
	value := `{"event_id":"evt-mobile","type":"shipment.out_for_delivery","shipment_id":"SHP-9",` +
		`"recipient":{"name":"Ada","mobile":"+31201234567","email":"ada@example.com"}}`
	MustPublish(t, emb.Brokers(), topic, kafka.Message{Key: []byte("SHP-9"), Value: []byte(value)})

	dl := MustReadTopic(t, emb.Brokers(), topic+".dlq", 1)[0]
	var reason string
	for _, h := range dl.Headers {
		if h.Key == "dlq.reason" {
			reason = string(h.Value)
		}
	}
	if !strings.Contains(reason, "recipient.mobile") || !strings.Contains(reason, "unknown field") {
		t.Errorf("dlq.reason %q, want it to name recipient.mobile as unknown", reason)
	}
	if string(dl.Value) != value {
		t.Errorf("dead letter value %q, want the record as published", dl.Value)
	}
	if n := len(out.Events(t, "notification_sent")); n != 0 {
		t.Errorf("%d notifications sent for a poison event", n)
	}
}
