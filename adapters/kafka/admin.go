package kafka

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
)

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
