package kafka_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/internal/wait"
)

// syncWait is the joinWait scene one step on: A and S both rejoined and
// the broker answered their JoinGroups, A as the leader; S sent its
// SyncGroup and waits for A's, sending no heartbeats, as Sarama does not
// while it joins; A, the leader, has not synced yet (a leader balancing,
// or one that died). A heartbeats meanwhile.
type syncWait struct {
	*joinWait
	// sAnswer receives S's SyncGroup answer, or nil once its client gave
	// up (the test ended, or S died).
	sAnswer chan *kmsg.SyncGroupResponse
	// sDie closes S's connections with its SyncGroup unanswered.
	sDie func()
	// syncing is when S sent its SyncGroup.
	syncing time.Time
}

// startSyncWait forms the group of A and S on brokers, as startJoinWait
// does, completes A's rejoin with S's, and returns once S waits in
// SyncGroup for A.
func startSyncWait(t *testing.T, brokers []string) *syncWait {
	t.Helper()
	w := startJoinWait(t, brokers)
	joined := w.mustJoin(w.s, w.idS)
	var aJoined *kmsg.JoinGroupResponse
	select {
	case aJoined = <-w.aAnswer:
	case <-time.After(30 * time.Second):
		t.Fatal("A's JoinGroup not answered within 30s of S's rejoin")
	}
	if aJoined == nil || aJoined.ErrorCode != 0 || aJoined.LeaderID != w.idA || joined.Generation != aJoined.Generation {
		t.Fatalf("the rebalance completed with A's answer %+v and S's generation %d, want A leading both", aJoined, joined.Generation)
	}
	w.gen = joined.Generation

	sCtx, sCancel := context.WithCancel(w.ctx)
	sw := &syncWait{joinWait: w, sAnswer: make(chan *kmsg.SyncGroupResponse, 1), syncing: time.Now()}
	sw.sDie = func() {
		sCancel()
		w.s.Close()
	}
	t.Cleanup(sCancel)
	go func() {
		resp, err := w.syncRequest(sCtx, w.s, w.idS, w.gen, nil)
		if err != nil {
			resp = nil
		}
		sw.sAnswer <- resp
	}()
	// S's SyncGroup is in when the broker has S's request: nothing tells
	// a client that, so give it a moment on loopback.
	time.Sleep(200 * time.Millisecond)
	sw.assertSNotAnswered("before A synced")
	return sw
}

// syncRequest sends member's SyncGroup for gen, with assignments when the
// member leads, and returns the broker's answer.
func (w *joinWait) syncRequest(ctx context.Context, cl *kgo.Client, member string, gen int32, assignments map[string][]byte) (*kmsg.SyncGroupResponse, error) {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = w.group, member, gen
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	for id, a := range assignments {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a})
	}
	return req.RequestWith(ctx, cl)
}

// assertSNotAnswered fails the test if S's SyncGroup has been answered.
func (w *syncWait) assertSNotAnswered(when string) {
	w.t.Helper()
	select {
	case resp := <-w.sAnswer:
		w.t.Fatalf("S's SyncGroup was answered %s (%+v)", when, resp)
	default:
	}
}

// heartbeatA sends A's heartbeat, which must be accepted: the group
// completes its rebalance, and A is not waiting in anything.
func (w *syncWait) heartbeatA() {
	w.t.Helper()
	if err := w.heartbeat(w.a, w.idA, w.gen); err != nil {
		w.t.Fatalf("A's heartbeat while S waits in SyncGroup: %v, want it accepted", err)
	}
}

// TestKfake_RemovesAMemberWaitingInSyncGroupAtItsSessionTimeout pins what
// kfake does on its own (without internal/devbroker's keeper) to a member
// waiting in SyncGroup for its leader: the member's session timer runs,
// and when it fires kfake removes the member and never answers its
// SyncGroup, which then waits for its client's read timeout. Worse, the
// removal counts the SyncGroup as a JoinGroup taken back, so the group's
// count of members that joined goes below zero, and the next rebalance,
// though every member rejoined, waits until its rebalance timeout.
// docs/kafka-brokers.md describes it; if kfake changes, the page must.
func TestKfake_RemovesAMemberWaitingInSyncGroupAtItsSessionTimeout(t *testing.T) {
	w := startSyncWait(t, kfakeAlone(t))

	var gone time.Duration
	wait.For(t, 20*time.Second, "kfake to remove S, waiting in SyncGroup, from the group", func() bool {
		gone = time.Since(w.syncing)
		if err := w.heartbeat(w.a, w.idA, w.gen); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
			t.Fatalf("A's heartbeat: %v", err)
		}
		return !slices.Contains(w.members(), w.idS)
	})
	if gone < joinWaitSession/2 {
		t.Errorf("S was removed %v after its SyncGroup, before its session timeout (%v) could have passed", gone, joinWaitSession)
	}

	// A, alone now, rejoins: a broker counting right completes the
	// rebalance at once.
	aCtx, aCancel := context.WithCancel(w.ctx)
	defer aCancel()
	aAnswer := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, _ := w.join(aCtx, w.a, w.idA)
		aAnswer <- resp
	}()
	select {
	case resp := <-aAnswer:
		t.Fatalf("A, the only member, rejoined and was answered at once (%+v): kfake counts joins right now, and docs/kafka-brokers.md and internal/devbroker's keeper describe a kfake that is gone", resp)
	case resp := <-w.sAnswer:
		t.Fatalf("S's SyncGroup was answered (%+v), want it held with no answer", resp)
	case <-time.After(3 * time.Second):
	}
	t.Logf("kfake removed S %v after its SyncGroup (session timeout %v) and never answered it; A's rejoin alone waited more than 3s (rebalance timeout %v)",
		gone.Round(10*time.Millisecond), joinWaitSession, joinWaitRebalance)
}

// TestBroker_KeepsAMemberWaitingInSyncGroup: a member waiting in SyncGroup
// for its leader stays in its group past its session timeout, and gets
// the assignment the leader sends. Apache Kafka does so
// (KAFKA_TEST_BROKERS); the embedded broker does so through
// internal/devbroker's keeper.
func TestBroker_KeepsAMemberWaitingInSyncGroup(t *testing.T) {
	w := startSyncWait(t, testBrokers(t, 1, "sync-wait"))

	// Three session timeouts, A heartbeating, S silent in SyncGroup.
	for time.Since(w.syncing) < 3*joinWaitSession {
		w.heartbeatA()
		if ids := w.members(); !slices.Contains(ids, w.idS) {
			t.Fatalf("S, waiting in SyncGroup, left the group %v after it synced (session timeout %v): members %v",
				time.Since(w.syncing).Round(10*time.Millisecond), joinWaitSession, ids)
		}
		w.assertSNotAnswered("before A synced")
		time.Sleep(joinWaitSession / 5)
	}

	// A syncs: S gets what A assigned it.
	assigned := []byte("S's share")
	resp, err := w.syncRequest(w.ctx, w.a, w.idA, w.gen, map[string][]byte{w.idA: []byte("A's share"), w.idS: assigned})
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("A's SyncGroup: %v", err)
	}
	var answer *kmsg.SyncGroupResponse
	select {
	case answer = <-w.sAnswer:
	case <-time.After(30 * time.Second):
		t.Fatal("S's SyncGroup was not answered within 30s of A's")
	}
	if answer == nil || answer.ErrorCode != 0 || string(answer.MemberAssignment) != string(assigned) {
		t.Fatalf("S's SyncGroup answered %+v, want success with %q", answer, assigned)
	}
	t.Logf("on %s, S waited in SyncGroup %v (session timeout %v) and got its assignment",
		brokerName(), time.Since(w.syncing).Round(10*time.Millisecond), joinWaitSession)
}

// TestBroker_RemovesAMemberThatDiedInSyncGroup: a member that dies waiting
// in SyncGroup is removed at its session timeout once its leader synced,
// and the group rebalances without it. Apache Kafka does so
// (KAFKA_TEST_BROKERS); on the embedded broker this checks that
// internal/devbroker's keeper stops keeping a member once the sync is over,
// and starts its session then: kfake alone may drop the answer to a dead
// member's SyncGroup without starting its session, and keep it for good.
func TestBroker_RemovesAMemberThatDiedInSyncGroup(t *testing.T) {
	w := startSyncWait(t, testBrokers(t, 1, "sync-death"))
	w.sDie()
	<-w.sAnswer

	resp, err := w.syncRequest(w.ctx, w.a, w.idA, w.gen, map[string][]byte{w.idA: []byte("A's share"), w.idS: []byte("S's share")})
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("A's SyncGroup: %v", err)
	}
	synced := time.Now()
	wait.For(t, 20*joinWaitSession, "S to be removed and the group to rebalance", func() bool {
		err := w.heartbeat(w.a, w.idA, w.gen)
		if err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
			t.Fatalf("A's heartbeat: %v", err)
		}
		return err != nil
	})
	final := w.mustJoin(w.a, w.idA)
	for _, m := range final.Members {
		if m.MemberID == w.idS {
			t.Fatalf("the rebalance after S's death completed with S: %+v", final.Members)
		}
	}
	t.Logf("S, dead in SyncGroup, was removed %v after A synced (session timeout %v)",
		time.Since(synced).Round(10*time.Millisecond), joinWaitSession)
}

// TestKfake_TellsEveryMemberItLeadsOnceItsLeaderLeft pins one more thing
// kfake does on its own, which shows in a group trace rather than as a
// stall: when the group's leader left, kfake names each member it answers
// the leader of the new generation (completeRebalance picks a leader anew
// for every member), so every Sarama member balances and sends its
// SyncGroup with assignments, and kfake takes the assignments of the last
// one it named. Kafka names one leader, in every member's answer.
// docs/kafka-brokers.md describes it; if kfake changes, the page must.
func TestKfake_TellsEveryMemberItLeadsOnceItsLeaderLeft(t *testing.T) {
	// A and S in a group, A leading.
	w, client := formGroupOfTwo(t, kfakeAlone(t), "leader-left-")

	// A, the leader, leaves; a new member N joins, then S rejoins: the
	// rebalance completes with S and N, and without its leader.
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group, leave.Members = w.group, []kmsg.LeaveGroupRequestMember{{MemberID: w.idA}}
	if _, err := leave.RequestWith(w.ctx, w.a); err != nil {
		t.Fatalf("A's LeaveGroup: %v", err)
	}
	n := client()
	idN := w.memberID(n)
	nAnswer := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, _ := w.join(w.ctx, n, idN)
		nAnswer <- resp
	}()
	wait.For(t, 20*time.Second, "N to join the group", func() bool { return slices.Contains(w.members(), idN) })
	s := w.mustJoin(w.s, w.idS)
	var nJoined *kmsg.JoinGroupResponse
	select {
	case nJoined = <-nAnswer:
	case <-time.After(30 * time.Second):
		t.Fatal("N's JoinGroup not answered within 30s of S's rejoin")
	}
	if nJoined == nil || nJoined.ErrorCode != 0 || nJoined.Generation != s.Generation {
		t.Fatalf("N's JoinGroup answered %+v, want generation %d", nJoined, s.Generation)
	}
	if s.LeaderID == nJoined.LeaderID {
		t.Fatalf("S and N were both told %s leads: kfake names one leader now, and docs/kafka-brokers.md describes a kfake that is gone", s.LeaderID)
	}
	if s.LeaderID != w.idS || nJoined.LeaderID != idN {
		t.Fatalf("S was told %s leads and N %s, want each told it leads itself (S %s, N %s)", s.LeaderID, nJoined.LeaderID, w.idS, idN)
	}
	t.Logf("once A left, kfake told S and N each that it leads generation %d", s.Generation)
}
