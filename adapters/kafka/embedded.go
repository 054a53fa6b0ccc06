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

// KeepJoiningMembers makes c keep a consumer group member that waits in
// JoinGroup in its group until the rebalance completes (or its rebalance
// timeout ends), as Apache Kafka does. kfake, left alone, keeps such a
// member's session timer running: a member that waits in JoinGroup longer
// than its session timeout (for a member slow to rejoin, such as one
// finishing the records of its revoked partitions) is removed from the
// group and its JoinGroup is never answered, so the client waits out its
// read timeout and joins again, which starts another rebalance. Under
// membership churn that stalled whole groups (docs/kafka-brokers.md).
//
// It watches the JoinGroup requests of known members and, while each
// waits, sends heartbeats for it under the generation of its last own
// SyncGroup or heartbeat, every third of its session timeout, until the broker stops
// answering REBALANCE_IN_PROGRESS (the rebalance completed, or the member
// is gone). Call it once, before clients connect, and call stop before
// closing c.
func KeepJoiningMembers(c *kfake.Cluster) (stop func(), err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &joinKeeper{cl: cl, ctx: ctx, cancel: cancel, gens: map[memberKey]int32{}, keeping: map[memberKey]bool{}, joins: map[memberKey]int{}}
	// A member's generation is the one of its last SyncGroup or
	// heartbeat: a member may rejoin before it heartbeated in the
	// generation it synced into.
	c.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.HeartbeatRequest)
		k.generation(memberKey{req.Group, req.MemberID}, req.Generation)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SyncGroupRequest)
		k.generation(memberKey{req.Group, req.MemberID}, req.Generation)
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

// joinKeeper heartbeats for members waiting in JoinGroup; see
// KeepJoiningMembers.
type joinKeeper struct {
	cl     *kgo.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	gens    map[memberKey]int32 // each member's generation, from its last SyncGroup or heartbeat
	keeping map[memberKey]bool  // members heartbeated for now
	joins   map[memberKey]int   // JoinGroup requests seen from each member
}

// generation records that m is in generation gen.
func (k *joinKeeper) generation(m memberKey, gen int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gens[m] = gen
}

// keep heartbeats for m, which sent a JoinGroup, while the broker answers
// REBALANCE_IN_PROGRESS, each time under m's latest generation. A member
// that never synced nor heartbeated has no generation to send and is not
// kept: a member waiting in its first rebalance has no session timer in
// kfake.
func (k *joinKeeper) keep(m memberKey, session time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, known := k.gens[m]; !known || k.ctx.Err() != nil {
		return
	}
	k.joins[m]++
	if k.keeping[m] {
		return
	}
	k.keeping[m] = true
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		every := max(session/3, 10*time.Millisecond)
		for {
			select {
			case <-k.ctx.Done():
				return
			case <-time.After(every):
			}
			k.mu.Lock()
			gen, joins := k.gens[m], k.joins[m]
			k.mu.Unlock()
			req := kmsg.NewPtrHeartbeatRequest()
			req.Group, req.MemberID, req.Generation = m.group, m.member, gen
			resp, err := req.RequestWith(k.ctx, k.cl)
			if err == nil && errors.Is(kerr.ErrorForCode(resp.ErrorCode), kerr.RebalanceInProgress) {
				continue
			}
			// The rebalance is over for m, unless m joined again since
			// this heartbeat was sent.
			k.mu.Lock()
			if err == nil && k.joins[m] != joins {
				k.mu.Unlock()
				continue
			}
			delete(k.keeping, m)
			k.mu.Unlock()
			return
		}
	}()
}

func (k *joinKeeper) close() {
	k.cancel()
	k.wg.Wait()
	k.cl.Close()
}
