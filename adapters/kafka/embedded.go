package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Embedded is an in-process Kafka broker speaking the real protocol
// (franz-go's kfake), for `make run`, a worker started without brokers, and
// tests. It keeps everything in memory and listens on 127.0.0.1 only.
type Embedded struct {
	cluster  *kfake.Cluster
	stopKeep func()
}

// StartEmbedded starts a one-broker cluster on a random 127.0.0.1 port with
// topics created with the given number of partitions. Topics it does not
// know (the dead letter topic, say) are created on first use with the same
// partition count. Groups accept session timeouts down to 100ms, so tests
// can rebalance quickly. A member waiting in JoinGroup stays in its group
// as on Apache Kafka (see KeepJoiningMembers).
func StartEmbedded(partitions int32, topics ...string) (*Embedded, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("kafka: embedded broker needs at least 1 partition, got %d", partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(partitions)),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: start embedded broker: %w", err)
	}
	stop, err := KeepJoiningMembers(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("kafka: start embedded broker: %w", err)
	}
	return &Embedded{cluster: c, stopKeep: stop}, nil
}

// Brokers returns the broker addresses, for Config.Brokers.
func (e *Embedded) Brokers() []string { return e.cluster.ListenAddrs() }

// Close stops the broker; its data is gone.
func (e *Embedded) Close() {
	e.stopKeep()
	e.cluster.Close()
}

// KeepJoiningMembers makes c treat a consumer group member that waits in
// JoinGroup as Apache Kafka does, in the two ways kfake alone does not:
//
//   - kfake keeps the session timer of a known member waiting in JoinGroup
//     running, and when it fires removes the member without answering its
//     JoinGroup. A rebalance that waits longer than a session timeout for
//     a member slow to rejoin (one finishing the records of its revoked
//     partitions) so drops every member already waiting: each waits out
//     its client's read timeout, joins again and starts another
//     rebalance. Kafka keeps a member awaiting join until the rebalance
//     completes.
//   - kfake stops the session timer of a new member when it joins, and
//     starts it again only once an answer reaches the member. A new member
//     that dies waiting in its first JoinGroup therefore stays in the
//     group for ever: every later rebalance waits for it until the
//     rebalance timeout, which each member joining meanwhile restarts.
//     Kafka starts every member's session when the rebalance completes.
//
// Under membership churn either stalls whole groups (docs/kafka-brokers.md).
//
// It watches JoinGroup requests that carry a member id and, for each,
// heartbeats for the member every third of its session timeout under the
// group's generation at the join, while the broker answers
// REBALANCE_IN_PROGRESS (the member waits, and is kept). Once the broker
// answers otherwise, the rebalance has moved the group to the next
// generation; one heartbeat under it (or under a later one a member has
// sent since) starts the member's
// session timer there, and the keeper stops: a member that died is then
// removed at its session timeout, and one alive heartbeats for itself.
// The group's generation is the highest a member sent in a SyncGroup or
// heartbeat. Call it once, before clients connect, and call stop before
// closing c.
func KeepJoiningMembers(c *kfake.Cluster) (stop func(), err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &joinKeeper{cl: cl, ctx: ctx, cancel: cancel, gens: map[string]int32{}, keeping: map[memberGen]bool{}}
	c.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.HeartbeatRequest)
		k.generation(req.Group, req.Generation)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SyncGroupRequest)
		k.generation(req.Group, req.Generation)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.JoinGroupRequest)
		if req.MemberID != "" {
			k.keep(memberKey{req.Group, req.MemberID}, time.Duration(req.SessionTimeoutMillis)*time.Millisecond)
		}
		return nil, nil, false
	})
	return k.close, nil
}

type memberKey struct{ group, member string }

// memberGen is a member joining from one generation.
type memberGen struct {
	memberKey
	gen int32
}

// joinKeeper heartbeats for members waiting in JoinGroup; see
// KeepJoiningMembers.
type joinKeeper struct {
	cl     *kgo.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	gens    map[string]int32   // each group's generation, the highest seen
	keeping map[memberGen]bool // members heartbeated for now
}

// generation records that a member of group sent gen.
func (k *joinKeeper) generation(group string, gen int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gens[group] = max(k.gens[group], gen)
}

// keep heartbeats for m, which sent a JoinGroup; see KeepJoiningMembers.
func (k *joinKeeper) keep(m memberKey, session time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	mg := memberGen{m, k.gens[m.group]}
	if k.keeping[mg] || k.ctx.Err() != nil {
		return
	}
	k.keeping[mg] = true
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		defer func() {
			k.mu.Lock()
			delete(k.keeping, mg)
			k.mu.Unlock()
		}()
		every := max(session/3, 10*time.Millisecond)
		for gen := mg.gen; ; {
			select {
			case <-k.ctx.Done():
				return
			case <-time.After(every):
			}
			err := k.heartbeat(m, gen)
			if gen > mg.gen || err == nil || !errors.Is(err, kerr.RebalanceInProgress) && !errors.Is(err, kerr.IllegalGeneration) {
				// The session runs in the next generation, or the member
				// is gone.
				return
			}
			if errors.Is(err, kerr.IllegalGeneration) {
				k.mu.Lock()
				gen = max(mg.gen+1, k.gens[m.group])
				k.mu.Unlock()
				every = 0
			}
		}
	}()
}

// heartbeat sends a heartbeat for m under gen and returns the broker's
// error (nil: accepted).
func (k *joinKeeper) heartbeat(m memberKey, gen int32) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = m.group, m.member, gen
	resp, err := req.RequestWith(k.ctx, k.cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

func (k *joinKeeper) close() {
	k.cancel()
	k.wg.Wait()
	k.cl.Close()
}
