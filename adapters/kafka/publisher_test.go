package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/ports"
)

func TestPublisher(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "publish")
	brokers := MustStartEmbedded(t, 3, topic).Brokers()

	t.Run("KeyKeepsPartitionAndHeadersArrive", func(t *testing.T) {
		MustPublish(t, brokers, topic,
			kafka.Message{Key: []byte("SHP-7"), Value: []byte("a"), Headers: map[string]string{"content-type": "application/json"}},
			kafka.Message{Key: []byte("SHP-7"), Value: []byte("b")},
			kafka.Message{Key: []byte("SHP-7"), Value: []byte("c")},
		)
		got := readTopic(t, brokers, topic)
		if len(got) != 3 {
			t.Fatalf("%d records, want 3", len(got))
		}
		for i, m := range got {
			if m.Partition != got[0].Partition {
				t.Errorf("record %d on partition %d, first on %d: one key must keep one partition", i, m.Partition, got[0].Partition)
			}
			if want := string(rune('a' + i)); string(m.Value) != want {
				t.Errorf("record %d = %q, want %q (order kept)", i, m.Value, want)
			}
		}
		if ct, _ := header(got[0], "content-type"); ct != "application/json" {
			t.Errorf("content-type header = %q", ct)
		}
	})
	t.Run("ErrPublisherClosed", func(t *testing.T) {
		p, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
		if err != nil {
			t.Fatalf("NewPublisher: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		err = p.Publish(context.Background(), topic, kafka.Message{Value: []byte("x")})
		if !errors.Is(err, kafka.ErrPublisherClosed) {
			t.Fatalf("Publish after Close = %v, want ErrPublisherClosed", err)
		}
	})
	t.Run("CancelledContext", func(t *testing.T) {
		p, err := kafka.NewPublisher(kafka.Config{Brokers: brokers})
		if err != nil {
			t.Fatalf("NewPublisher: %v", err)
		}
		defer p.Close()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := p.Publish(ctx, topic, kafka.Message{Value: []byte("x")}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish = %v, want context.Canceled", err)
		}
	})
	t.Run("ErrInvalidConfig", func(t *testing.T) {
		if _, err := kafka.NewPublisher(kafka.Config{}); !errors.Is(err, kafka.ErrInvalidConfig) {
			t.Fatalf("NewPublisher = %v, want ErrInvalidConfig", err)
		}
	})
}

// SASL: each mechanism authenticates against a broker that requires it, end
// to end through the consumer, and a wrong password is refused.
func TestSASL(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{kafka.SASLPlain, kafka.SASLSCRAMSHA256, kafka.SASLSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			topic := uniqueName(t, "sasl")
			c := MustStartCluster(t, 1, []string{topic, topic + ".dlq"},
				kfake.EnableSASL(), kfake.Superuser(mech, "worker", "s3cret=,pass"))
			brokers := c.ListenAddrs()
			auth := kafka.Config{Brokers: brokers, SASLMechanism: mech, SASLUsername: "worker", SASLPassword: "s3cret=,pass"}

			p, err := kafka.NewPublisher(auth)
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Publish(ctx, topic, kafka.Message{Key: []byte("SHP-1"), Value: []byte("v")}); err != nil {
				t.Fatalf("Publish: %v", err)
			}

			cfg, _ := testConfig(brokers, topic)
			cfg.SASLMechanism, cfg.SASLUsername, cfg.SASLPassword = auth.SASLMechanism, auth.SASLUsername, auth.SASLPassword
			var once sync.Once
			got := make(chan struct{})
			rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
				once.Do(func() { close(got) })
				return nil
			}))
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("consumer received nothing")
			}
			rc.MustStop(t, 10*time.Second)

			wrong := auth
			wrong.SASLPassword = "nope"
			if p, err := kafka.NewPublisher(wrong); err == nil {
				p.Close()
				t.Fatal("NewPublisher with a wrong password succeeded")
			}
		})
	}
}

// SASLprep: SCRAM prepares the password (RFC 4013) before deriving the key,
// so a password typed with a code point SASLprep maps to nothing (U+00AD,
// a soft hyphen pasted from a document) authenticates as the password
// without it, and one SASLprep prohibits (U+0007) is refused before any
// byte is sent.
func TestSASLprep(t *testing.T) {
	t.Parallel()
	for _, mech := range []string{kafka.SASLSCRAMSHA256, kafka.SASLSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			topic := uniqueName(t, "saslprep")
			c := MustStartCluster(t, 1, []string{topic}, kfake.EnableSASL(), kfake.Superuser(mech, "worker", "s3cretpass"))
			auth := kafka.Config{Brokers: c.ListenAddrs(), SASLMechanism: mech, SASLUsername: "worker", SASLPassword: "s3cret\u00ADpass"}
			p, err := kafka.NewPublisher(auth)
			if err != nil {
				t.Fatalf("NewPublisher with a soft hyphen in the password: %v", err)
			}
			p.Close()

			auth.SASLPassword = "s3cret\u0007pass"
			if p, err := kafka.NewPublisher(auth); err == nil {
				p.Close()
				t.Fatal("NewPublisher with a prohibited code point in the password succeeded")
			}
		})
	}
}
