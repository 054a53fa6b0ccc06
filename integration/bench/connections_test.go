package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
	"github.com/harborlight/notification-worker/ports"
)

// twilioRounds: the runs are CPU-bound (the worker, the broker and the
// double share the CPUs), so three interleaved rounds, best kept.
const twilioRounds = 3

// BenchmarkTwilioConnections sends every record's SMS through the real
// Twilio adapter to the Twilio double, which answers at once and counts the
// connections its listener accepts: the adapter as it was (Go's default
// transport, which keeps 2 idle connections per host, and a twilio-go
// client per send) against one client with a pool of MaxInFlight
// connections. Each round builds its adapter afresh, so the pool's warm-up
// is counted.
func BenchmarkTwilioConnections(b *testing.B) {
	const events, keys, maxInFlight = 4000, 1000, 64
	const sid, token, from = "ACbench", "benchtoken", "+15550000000"
	br := mustBroker(b, events, keys)

	d := double.New(sid, token)
	srv := httptest.NewUnstartedServer(d)
	srv.Listener = d.Listener(srv.Listener)
	srv.Start()
	b.Cleanup(srv.Close)
	cfg := twilio.Config{AccountSID: sid, AuthToken: token, From: from, APIURL: srv.URL}

	through := func(open func(b *testing.B) ports.Notifier) func(b *testing.B) measurement {
		return func(b *testing.B) measurement {
			d.Reset()
			sms := open(b)
			before := d.Connections()
			m := run{maxInFlight: maxInFlight, store: memory.New(nil), sms: sms, want: events, within: time.Minute}.measure(b, br)
			m.conns = d.Connections() - before
			if got := len(d.Messages()); got < m.records {
				b.Fatalf("the double accepted %d SMS, %d records measured", got, m.records)
			}
			return m
		}
	}
	for range b.N {
		bestOf(b, twilioRounds, []variant{
			{runTwilioFresh, through(func(b *testing.B) ports.Notifier {
				c := cfg
				c.Transport = http.DefaultTransport.(*http.Transport).Clone()
				return clientPerSend{cfg: c}
			})},
			{runTwilioPool, through(func(b *testing.B) ports.Notifier {
				c := cfg
				c.MaxConns = maxInFlight
				n, err := twilio.New(c)
				if err != nil {
					b.Fatalf("twilio.New: %v", err)
				}
				return n
			})},
		})
	}
}

// clientPerSend is the Twilio adapter as it was: every send builds its own
// twilio-go client around a transport shared by every send.
type clientPerSend struct{ cfg twilio.Config }

func (c clientPerSend) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	n, err := twilio.New(c.cfg)
	if err != nil {
		return ports.Receipt{}, err
	}
	return n.Send(ctx, m)
}
