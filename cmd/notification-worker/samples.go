package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// sampleTypes cycles through the event types the embedded templates know.
var sampleTypes = []string{
	"shipment.created", "shipment.out_for_delivery", "shipment.delayed",
	"shipment.delivered", "shipment.delivery_failed",
}

var sampleNames = []string{"Ada", "Grace", "Linus", "Margaret", "Ken", "Barbara", "Dennis"}

// sampleEvent is the JSON of a shipment event, as the README's "The event" shows it.
type sampleEvent struct {
	EventID    string            `json:"event_id"`
	Type       string            `json:"type"`
	OccurredAt time.Time         `json:"occurred_at"`
	ShipmentID string            `json:"shipment_id"`
	Recipient  sampleRecipient   `json:"recipient"`
	Channels   []string          `json:"channels,omitempty"`
	Data       map[string]string `json:"data"`
}

type sampleRecipient struct {
	Name  string `json:"name"`
	Phone string `json:"phone,omitempty"`
	Email string `json:"email,omitempty"`
}

// sampleEvents returns n events over n/2+1 shipments with fresh event ids:
// most go to both channels, every fifth to SMS only, every seventh to email
// only. It also returns how many notifications they fan out to. They
// occurred in the n minutes before now, one a minute, so no default
// MAX_EVENT_AGE finds them stale.
func sampleEvents(n int) (events []sampleEvent, notifications int) {
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	start := time.Now().UTC().Truncate(time.Second).Add(-time.Duration(n) * time.Minute)
	for i := range n {
		shipment := fmt.Sprintf("SHP-%06d", 100200+i/2)
		name := sampleNames[i%len(sampleNames)]
		ev := sampleEvent{
			EventID:    fmt.Sprintf("%s-0000-4000-8000-%012d", hex.EncodeToString(nonce[:]), i),
			Type:       sampleTypes[i%len(sampleTypes)],
			OccurredAt: start.Add(time.Duration(i) * time.Minute),
			ShipmentID: shipment,
			Recipient: sampleRecipient{
				Name:  name,
				Phone: fmt.Sprintf("+3120%07d", 1000000+i),
				Email: fmt.Sprintf("%s.%d@example.com", strings.ToLower(name), i),
			},
			Data: map[string]string{
				"eta":          "14:00-16:00",
				"tracking_url": "https://track.example/" + shipment,
			},
		}
		switch {
		case i%5 == 4:
			ev.Channels = []string{"sms"}
			notifications++
		case i%7 == 6:
			ev.Channels = []string{"email"}
			notifications++
		default:
			notifications += 2
		}
		events = append(events, ev)
	}
	return events, notifications
}

func (e sampleEvent) json() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // a struct of strings always marshals
	}
	return b
}
