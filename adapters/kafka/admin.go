package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// Reach connects to the brokers as the consumer does (TLS, SASL), asks
// them for the cluster's metadata, once over the brokers with no retry of
// its own, and disconnects: nil once a broker answered. It returns by
// ctx's end; each connection and request is also bounded by what is left
// of ctx's deadline, so what it leaves running ends soon after.
func Reach(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	sc := cfg.saramaConfig()
	sc.Metadata.Retry.Max = 0
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("kafka: reach %v: %w", cfg.Brokers, context.DeadlineExceeded)
		}
		sc.Net.DialTimeout = min(sc.Net.DialTimeout, left)
		sc.Net.ReadTimeout = min(sc.Net.ReadTimeout, left)
		sc.Net.WriteTimeout = min(sc.Net.WriteTimeout, left)
	}
	done := make(chan error, 1)
	go func() {
		client, err := sarama.NewClient(cfg.Brokers, sc)
		if err == nil {
			err = client.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("kafka: reach %v: %w", cfg.Brokers, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka: reach %v: %w", cfg.Brokers, ctx.Err())
	}
}

// DeleteGroup deletes cfg.GroupID and its committed offsets, so the next
// member to join starts from the oldest record and replays the whole
// topic. The demo and the end-to-end tests use it; the group must have no
// live members.
func DeleteGroup(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.validate(true); err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, cfg.saramaConfig())
	if err != nil {
		return fmt.Errorf("kafka: admin client: %w", err)
	}
	defer admin.Close()
	done := make(chan error, 1)
	go func() { done <- admin.DeleteConsumerGroup(cfg.GroupID) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("kafka: delete group %s: %w", cfg.GroupID, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
