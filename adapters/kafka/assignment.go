package kafka

import (
	"slices"
	"sync"

	"github.com/IBM/sarama"
)

// revocations tells a partition's ConsumeClaim that a cooperative
// rebalance revoked it. Sarama signals that only by closing the Messages
// channel of the partition's assignment, which a ConsumeClaim waiting on a
// bound of flow is not reading; this channel is closed as soon as the
// member receives an assignment that no longer names the partition. Its
// methods are safe for concurrent use.
type revocations struct {
	topic string

	mu   sync.Mutex
	held map[int32]chan struct{} // guarded by mu
}

func newRevocations(topic string) *revocations {
	return &revocations{topic: topic, held: make(map[int32]chan struct{})}
}

// hold returns the channel closed when partition is revoked.
func (r *revocations) hold(partition int32) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	r.held[partition] = ch
	return ch
}

// release forgets partition.
func (r *revocations) release(partition int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, partition)
}

// assigned closes the channel of every partition held that assignment
// does not name.
func (r *revocations) assigned(assignment map[string][]int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, ch := range r.held {
		if !slices.Contains(assignment[r.topic], p) {
			close(ch)
			delete(r.held, p)
		}
	}
}

// watchedStrategy is a cooperative balance strategy that also tells
// revocations each assignment this member receives. Sarama calls
// OnAssignment only for a non-empty assignment; a member left with no
// partitions learns of the revoke from its Messages channels.
type watchedStrategy struct {
	cooperativeStrategy
	revocations *revocations
}

// cooperativeStrategy is what Sarama's cooperative-sticky strategy
// implements beyond sarama.BalanceStrategy.
type cooperativeStrategy interface {
	sarama.BalanceStrategy
	SupportedProtocols() []sarama.RebalanceProtocol
	SubscriptionUserData(topics []string) ([]byte, error)
	OnAssignment(assignment *sarama.ConsumerGroupMemberAssignment, generationID int32)
}

func (s watchedStrategy) OnAssignment(assignment *sarama.ConsumerGroupMemberAssignment, generationID int32) {
	s.cooperativeStrategy.OnAssignment(assignment, generationID)
	s.revocations.assigned(assignment.Topics)
}

// watchRevocations wraps each cooperative strategy of sc so that r hears of
// the assignments.
func watchRevocations(sc *sarama.Config, r *revocations) {
	for i, s := range sc.Consumer.Group.Rebalance.GroupStrategies {
		if cs, ok := s.(cooperativeStrategy); ok {
			sc.Consumer.Group.Rebalance.GroupStrategies[i] = watchedStrategy{cooperativeStrategy: cs, revocations: r}
		}
	}
}
