package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// ErrPublisherClosed is returned by Publish after Close.
var ErrPublisherClosed = errors.New("kafka: publisher closed")

// Message is one record to publish. Key is the shipment_id, so one
// shipment's events land in one partition, in order.
type Message struct {
	Key, Value []byte
	Headers    map[string]string
}

// Publisher writes records with a synchronous producer: Publish returns once
// the broker acknowledged them (acks=all). It is safe for concurrent use.
type Publisher struct {
	producer sarama.SyncProducer

	// mu lets Close wait for sends in progress, so no send hits a closed
	// producer (Sarama panics on that).
	mu     sync.RWMutex
	closed bool
}

// NewPublisher connects to cfg.Brokers (only Brokers, TLS and SASL are
// used). It returns an error wrapping ErrInvalidConfig for a bad Config, or
// the connection error when no broker answers.
func NewPublisher(cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(false); err != nil {
		return nil, err
	}
	return newProducer(cfg.Brokers, cfg.saramaConfig())
}

// newProducer is a Publisher on brokers with Sarama's configuration sc.
func newProducer(brokers []string, sc *sarama.Config) (*Publisher, error) {
	sp, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("kafka: connect producer to %v: %w", brokers, err)
	}
	return &Publisher{producer: sp}, nil
}

// Publish writes msgs to topic as one batch, each partitioned by its key.
// It returns nil once every message is acknowledged, or an error naming how
// many failed (some may have been written: the caller retries the batch, and
// consumers must tolerate the duplicates, as they do any replay). If ctx ends
// first it returns ctx's error; the batch may still be written, as Sarama's
// producer cannot take a send back.
func (p *Publisher) Publish(ctx context.Context, topic string, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	batch := make([]*sarama.ProducerMessage, len(msgs))
	for i, m := range msgs {
		pm := &sarama.ProducerMessage{Topic: topic}
		if m.Key != nil {
			pm.Key = sarama.ByteEncoder(m.Key)
		}
		if m.Value != nil {
			pm.Value = sarama.ByteEncoder(m.Value)
		}
		for k, v := range m.Headers {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
		}
		batch[i] = pm
	}
	if err := p.send(ctx, batch); err != nil {
		return fmt.Errorf("kafka: publish %d messages to %s: %w", len(msgs), topic, err)
	}
	return nil
}

// send writes batch and waits for it or for ctx.
func (p *Publisher) send(ctx context.Context, batch []*sarama.ProducerMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		p.mu.RLock()
		defer p.mu.RUnlock()
		if p.closed {
			done <- ErrPublisherClosed
			return
		}
		if len(batch) == 1 {
			_, _, err := p.producer.SendMessage(batch[0])
			done <- err
			return
		}
		done <- p.producer.SendMessages(batch)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close waits for sends in progress, then closes the producer. Publish
// returns ErrPublisherClosed afterwards. Closing twice is a no-op.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if err := p.producer.Close(); err != nil {
		return fmt.Errorf("kafka: close producer: %w", err)
	}
	return nil
}
