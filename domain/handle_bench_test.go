package domain_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// benchEvent is the record integration/bench publishes: about 330 bytes,
// an SMS with a name, a phone and an email, and two data values.
func benchEvent(i int) []byte {
	return fmt.Appendf(nil, `{"event_id":"%08x-7d3c-4b1e-9f2a-0c5d8e6b4a21","type":"shipment.out_for_delivery","occurred_at":%q,`+
		`"shipment_id":"SHP-%06d","recipient":{"name":"Ada","phone":"+31201234567","email":"ada@example.com"},`+
		`"channels":["sms"],"data":{"eta":"14:00-16:00","tracking_url":"https://track.example/SHP-%06d"}}`,
		i, time.Now().UTC().Format(time.RFC3339), i%5000, i%5000)
}

// BenchmarkHandle is a record's way through the domain as the worker runs
// it with the console notifier: decode, render, claim and record in the
// memory store, the send, and the JSON log lines, written to io.Discard.
func BenchmarkHandle(b *testing.B) {
	events := make([][]byte, b.N)
	for i := range events {
		events[i] = benchEvent(i)
	}
	svc, err := domain.NewService(domain.Config{
		Store:     memory.New(nil),
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: console.New(io.Discard), ports.ChannelEmail: console.New(io.Discard)},
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		rec := ports.Record{Topic: "shipment-events", Partition: 3, Offset: int64(i), Value: events[i], DeliveryID: ports.NewDeliveryID()}
		if err := svc.Handle(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is the decode and validation of that record.
func BenchmarkDecode(b *testing.B) {
	ev := benchEvent(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := domain.Decode(ev); err != nil {
			b.Fatal(err)
		}
	}
}
