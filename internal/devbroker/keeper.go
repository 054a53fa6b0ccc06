package devbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// keepWaitingMembers makes c keep a consumer group member that waits in
// JoinGroup or SyncGroup for as long as it waits, and start its session
// when the wait ends, as Apache Kafka does. kfake alone removes a known
// member waiting in either at its session timeout without answering it
// (and, for one waiting in SyncGroup, then waits out the next rebalance's
// timeout), and keeps a new member that died in its first JoinGroup for
// good; under membership churn each stalls whole groups
// (docs/kafka-brokers.md, "kfake's JoinGroup and SyncGroup").
//
// It heartbeats for the waiting member from outside kfake:
//
//   - After a JoinGroup that carries a member id: every third of its
//     session timeout under the group's generation at the join, while the
//     broker answers REBALANCE_IN_PROGRESS; then once under the next
//     generation (or a later one a member has sent since), which starts
//     the member's session there.
//   - After a SyncGroup: under the sync's generation, every third of the
//     session timeout its last JoinGroup named, while DescribeGroups says
//     CompletingRebalance (the leader has not synced); the first
//     heartbeat after the group left that state is the last.
//
// A member that died is then removed at its session timeout, one alive
// heartbeats for itself, and no member is heartbeated into a rebalance it
// did not join (which would make that rebalance wait for it until the
// rebalance timeout). The group's generation is the highest a member sent
// in a SyncGroup or heartbeat. Call it once, before clients connect, and
// close the keeper before closing c.
func keepWaitingMembers(c *kfake.Cluster) (*waitKeeper, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &waitKeeper{cl: cl, ctx: ctx, cancel: cancel, gens: map[string]int32{},
		sessions: map[memberKey]time.Duration{}, keeping: map[keptWait]bool{}}
	c.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.HeartbeatRequest)
		k.note("Heartbeat v%d %s member=%q gen=%d", req.Version, req.Group, req.MemberID, req.Generation)
		k.generation(req.Group, req.Generation)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.SyncGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.SyncGroupRequest)
		k.note("SyncGroup %s member=%q gen=%d assignments=%d", req.Group, req.MemberID, req.Generation, len(req.GroupAssignment))
		k.generation(req.Group, req.Generation)
		k.keepSyncing(memberKey{req.Group, req.MemberID}, req.Generation)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.JoinGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.JoinGroupRequest)
		k.note("JoinGroup v%d %s member=%q session=%dms rebalance=%dms", req.Version, req.Group, req.MemberID, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis)
		if req.MemberID != "" {
			k.keepJoining(memberKey{req.Group, req.MemberID}, time.Duration(req.SessionTimeoutMillis)*time.Millisecond)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.LeaveGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := r.(*kmsg.LeaveGroupRequest)
		ids := []string{req.MemberID}
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
		}
		k.note("LeaveGroup %s members=%q", req.Group, ids)
		for _, id := range ids {
			k.left(memberKey{req.Group, id})
		}
		return nil, nil, false
	})
	return k, nil
}

type memberKey struct{ group, member string }

// keptWait is a member waiting in JoinGroup (sync false) or SyncGroup
// from one generation.
type keptWait struct {
	memberKey
	gen  int32
	sync bool
}

// waitKeeper heartbeats for members waiting in JoinGroup or SyncGroup;
// see keepWaitingMembers.
type waitKeeper struct {
	cl     *kgo.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	trace atomic.Pointer[func(line string)] // see Broker.TraceGroups

	mu       sync.Mutex
	gens     map[string]int32            // each group's generation, the highest seen
	sessions map[memberKey]time.Duration // each member's session timeout, from its last JoinGroup, until it leaves
	keeping  map[keptWait]bool           // members heartbeated for now
}

// note passes a line to the trace, if there is one.
func (k *waitKeeper) note(format string, args ...any) {
	if trace := k.trace.Load(); trace != nil {
		(*trace)(fmt.Sprintf(format, args...))
	}
}

// generation records that a member of group sent gen.
func (k *waitKeeper) generation(group string, gen int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gens[group] = max(k.gens[group], gen)
}

// left forgets m, which left its group.
func (k *waitKeeper) left(m memberKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.sessions, m)
}

// start runs keep on its own goroutine for w, unless w is kept already or
// the keeper is closed. keep returns when w no longer needs keeping.
func (k *waitKeeper) start(w keptWait, keep func()) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keeping[w] || k.ctx.Err() != nil {
		return
	}
	k.keeping[w] = true
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		defer func() {
			k.mu.Lock()
			delete(k.keeping, w)
			k.mu.Unlock()
		}()
		keep()
	}()
}

// tick waits d, and reports false once the keeper is closed.
func (k *waitKeeper) tick(d time.Duration) bool {
	select {
	case <-k.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// keepJoining heartbeats for m, which sent a JoinGroup naming session;
// see keepWaitingMembers.
func (k *waitKeeper) keepJoining(m memberKey, session time.Duration) {
	k.mu.Lock()
	k.sessions[m] = session
	w := keptWait{memberKey: m, gen: k.gens[m.group]}
	k.mu.Unlock()
	k.start(w, func() {
		every := max(session/3, 10*time.Millisecond)
		for gen := w.gen; k.tick(every); {
			err := k.heartbeat(m, gen)
			if gen > w.gen || err == nil || !errors.Is(err, kerr.RebalanceInProgress) && !errors.Is(err, kerr.IllegalGeneration) {
				// The session runs in the next generation, or the member
				// is gone.
				return
			}
			if errors.Is(err, kerr.IllegalGeneration) {
				k.mu.Lock()
				gen = max(w.gen+1, k.gens[m.group])
				k.mu.Unlock()
				every = 0
			}
		}
	})
}

// keepSyncing heartbeats for m, which sent a SyncGroup under gen; see
// keepWaitingMembers. Only a member the keeper saw send a JoinGroup
// naming its id is kept (that JoinGroup gives its session timeout). Every
// dynamic member does before it syncs; a static member's first SyncGroup,
// after a join that named no id, is not kept.
func (k *waitKeeper) keepSyncing(m memberKey, gen int32) {
	k.mu.Lock()
	session, ok := k.sessions[m]
	k.mu.Unlock()
	if !ok {
		return
	}
	k.start(keptWait{memberKey: m, gen: gen, sync: true}, func() {
		every := max(session/3, 10*time.Millisecond)
		for k.tick(every) {
			// A state that cannot be had ends the keeping as a state
			// left does: the member's session runs, as kfake's own.
			state := k.groupState(m.group)
			// Under gen only: a later generation's rebalance is one the
			// member must join itself.
			err := k.heartbeat(m, gen)
			if state != completingRebalance || err != nil {
				return
			}
		}
	})
}

// completingRebalance is the state DescribeGroups names for a group whose
// members were answered their JoinGroups and whose leader has not synced.
const completingRebalance = "CompletingRebalance"

// groupState returns group's state as DescribeGroups names it, or "" when
// it cannot be had.
func (k *waitKeeper) groupState(group string) string {
	described, _ := kadm.NewClient(k.cl).DescribeGroups(k.ctx, group)
	return described[group].State
}

// heartbeat sends a heartbeat for m under gen and returns the broker's
// error (nil: accepted).
func (k *waitKeeper) heartbeat(m memberKey, gen int32) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = m.group, m.member, gen
	resp, err := req.RequestWith(k.ctx, k.cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

func (k *waitKeeper) close() {
	k.cancel()
	k.wg.Wait()
	k.cl.Close()
}
