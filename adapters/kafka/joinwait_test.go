package kafka_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/internal/wait"
)

// joinWaitSession and joinWaitRebalance are the group timeouts of the
// joinWait scene's members.
const (
	joinWaitSession   = time.Second
	joinWaitRebalance = 30 * time.Second
)

// joinWait is a group of two members, A and S, each with its own client
// (so a JoinGroup the broker holds holds up nothing else), driven request
// by request. A has rejoined, which starts a rebalance, and waits in
// JoinGroup, sending no heartbeats, as Sarama does not while it joins. S
// has not rejoined yet, as a member busy finishing its records has not.
type joinWait struct {
	t           *testing.T
	ctx         context.Context
	group       string
	a, s, admin *kgo.Client
	idA, idS    string
	gen         int32
	// aAnswer receives A's JoinGroup answer, or its error once the test
	// ends.
	aAnswer chan *kmsg.JoinGroupResponse
	// rejoined is when A's rejoin started the rebalance.
	rejoined time.Time
}

// newJoinWait is a scene on brokers, for a group named prefix and the
// time: A and the admin client connected, a context that ends with t or
// after 2 minutes, and client, which connects one more client closed with
// t.
func newJoinWait(t *testing.T, brokers []string, prefix string) (w *joinWait, client func() *kgo.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	client = func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	w = &joinWait{t: t, ctx: ctx, group: prefix + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""),
		a: client(), admin: client()}
	return w, client
}

// startJoinWait forms the group on brokers (A alone, then S joins and A's
// rejoin completes that rebalance with both), then makes A rejoin and
// returns once the rebalance it starts is under way.
func startJoinWait(t *testing.T, brokers []string) *joinWait {
	t.Helper()
	w, _ := formGroupOfTwo(t, brokers, "join-wait-")
	ctx := w.ctx
	w.aAnswer = make(chan *kmsg.JoinGroupResponse, 1)

	// A, the leader, rejoins: a rebalance starts, and A waits for S.
	go func() {
		resp, err := w.join(ctx, w.a, w.idA)
		if err != nil {
			resp = nil
		}
		w.aAnswer <- resp
	}()
	wait.For(t, 20*time.Second, "A's rejoin to start a rebalance", func() bool {
		return errors.Is(w.heartbeat(w.s, w.idS, w.gen), kerr.RebalanceInProgress)
	})
	w.rejoined = time.Now()
	return w
}

// formGroupOfTwo forms a group on brokers for a group named prefix: A
// joins alone, then S joins and A's rejoin completes that rebalance with
// both, A leading; both have synced into w.gen. It returns the scene and
// what connects one more client (see newJoinWait).
func formGroupOfTwo(t *testing.T, brokers []string, prefix string) (w *joinWait, client func() *kgo.Client) {
	t.Helper()
	w, client = newJoinWait(t, brokers, prefix)
	ctx := w.ctx
	w.s = client()

	w.idA = w.memberID(w.a)
	first := w.mustJoin(w.a, w.idA)
	w.sync(w.a, w.idA, first.Generation)
	w.idS = w.memberID(w.s)
	sJoined := make(chan *kmsg.JoinGroupResponse, 1)
	go func() {
		resp, _ := w.join(ctx, w.s, w.idS)
		sJoined <- resp
	}()
	wait.For(t, 20*time.Second, "S's join to start a rebalance", func() bool {
		return errors.Is(w.heartbeat(w.a, w.idA, first.Generation), kerr.RebalanceInProgress)
	})
	both := w.mustJoin(w.a, w.idA)
	if resp := <-sJoined; resp == nil || resp.ErrorCode != 0 {
		t.Fatalf("S's join failed: %+v", resp)
	}
	if both.LeaderID != w.idA {
		t.Fatalf("the second rebalance completed with %s leading, want A (%s)", both.LeaderID, w.idA)
	}
	w.gen = both.Generation
	w.sync(w.a, w.idA, w.gen)
	w.sync(w.s, w.idS, w.gen)
	if ids := w.members(); len(ids) != 2 || !slices.Contains(ids, w.idA) || !slices.Contains(ids, w.idS) {
		t.Fatalf("after the second rebalance the group holds %v, want A (%s) and S (%s)", ids, w.idA, w.idS)
	}
	return w, client
}

// kfakeAlone starts a one-broker kfake without internal/devbroker's keeper,
// groups accepting the scenes' short sessions, closed with t, and returns
// its address: for the tests that pin what kfake does on its own.
func kfakeAlone(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// brokerName is the broker the scenes ran on, for a test's log line.
func brokerName() string {
	if b := os.Getenv(testBrokersEnv); b != "" {
		return b
	}
	return "the embedded broker"
}

func (w *joinWait) join(ctx context.Context, cl *kgo.Client, member string) (*kmsg.JoinGroupResponse, error) {
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.MemberID, req.ProtocolType = w.group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = int32(joinWaitSession/time.Millisecond), int32(joinWaitRebalance/time.Millisecond)
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0}}}
	return req.RequestWith(ctx, cl)
}

func (w *joinWait) mustJoin(cl *kgo.Client, member string) *kmsg.JoinGroupResponse {
	w.t.Helper()
	resp, err := w.join(w.ctx, cl, member)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		w.t.Fatalf("join %s: %v", member, err)
	}
	return resp
}

// memberID gets a member id: the first join is answered MEMBER_ID_REQUIRED
// with the id to join under (KIP-394).
func (w *joinWait) memberID(cl *kgo.Client) string {
	w.t.Helper()
	resp, err := w.join(w.ctx, cl, "")
	if err != nil {
		w.t.Fatal(err)
	}
	if kerr.ErrorForCode(resp.ErrorCode) != kerr.MemberIDRequired {
		w.t.Fatalf("first join: %v, want MEMBER_ID_REQUIRED", kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp.MemberID
}

func (w *joinWait) sync(cl *kgo.Client, member string, gen int32) {
	w.t.Helper()
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = w.group, member, gen
	// Kafka checks both against the group's from SyncGroup v5 on.
	req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
	resp, err := req.RequestWith(w.ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		w.t.Fatalf("sync %s: %v", member, err)
	}
}

func (w *joinWait) heartbeat(cl *kgo.Client, member string, gen int32) error {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = w.group, member, gen
	resp, err := req.RequestWith(w.ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

// heartbeatS sends S's heartbeat, which must say the rebalance goes on.
func (w *joinWait) heartbeatS() {
	w.t.Helper()
	if err := w.heartbeat(w.s, w.idS, w.gen); !errors.Is(err, kerr.RebalanceInProgress) {
		w.t.Fatalf("S's heartbeat during the rebalance: %v, want REBALANCE_IN_PROGRESS", err)
	}
}

// members returns the ids of the group's members, as DescribeGroups says.
func (w *joinWait) members() []string {
	w.t.Helper()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{w.group}
	resp, err := req.RequestWith(w.ctx, w.admin)
	if err != nil || len(resp.Groups) != 1 {
		w.t.Fatalf("describe group: %v", err)
	}
	var ids []string
	for _, m := range resp.Groups[0].Members {
		ids = append(ids, m.MemberID)
	}
	return ids
}

// assertANotAnswered fails the test if A's JoinGroup has been answered.
func (w *joinWait) assertANotAnswered(when string) {
	w.t.Helper()
	select {
	case resp := <-w.aAnswer:
		w.t.Fatalf("A's JoinGroup was answered %s (%+v)", when, resp)
	default:
	}
}

// TestKfake_RemovesAMemberWaitingInJoinGroupAtItsSessionTimeout pins what
// kfake, franz-go's in-memory broker, does on its own (without
// internal/devbroker's keeper): it keeps the session timer of a member that
// waits in JoinGroup running, and when it fires it removes the member from
// the group and never answers its JoinGroup, which then waits for its
// client's read timeout. docs/kafka-brokers.md describes it; if kfake
// changes, the page must.
func TestKfake_RemovesAMemberWaitingInJoinGroupAtItsSessionTimeout(t *testing.T) {
	w := startJoinWait(t, kfakeAlone(t))

	var gone time.Duration
	wait.For(t, 20*time.Second, "kfake to remove A, waiting in JoinGroup, from the group", func() bool {
		w.heartbeatS()
		gone = time.Since(w.rejoined)
		return !slices.Contains(w.members(), w.idA)
	})
	if gone < joinWaitSession/2 {
		t.Errorf("A was removed %v after its rejoin, before its session timeout (%v) could have passed", gone, joinWaitSession)
	}
	w.assertANotAnswered("before S rejoined")

	// S rejoins: the rebalance completes at once, without A.
	final := w.mustJoin(w.s, w.idS)
	if len(final.Members) != 1 || final.Members[0].MemberID != w.idS || final.LeaderID != w.idS {
		t.Errorf("the rebalance completed with leader %s and members %+v, want S (%s) alone", final.LeaderID, final.Members, w.idS)
	}
	// The broker answers every member waiting in JoinGroup together when a
	// rebalance completes; S has its answer, so A would have its own by
	// now, but for the time it takes to arrive.
	select {
	case resp := <-w.aAnswer:
		t.Fatalf("A's JoinGroup was answered (%+v), want it held with no answer", resp)
	case <-time.After(2 * time.Second):
	}
	t.Logf("kfake removed A %v after A rejoined (session timeout %v, rebalance timeout %v); its JoinGroup was not answered",
		gone.Round(10*time.Millisecond), joinWaitSession, joinWaitRebalance)
}

// TestBroker_KeepsAMemberWaitingInJoinGroup: a member waiting in JoinGroup
// stays in its group past its session timeout, and is answered when the
// rebalance completes, with every member that rejoined. Apache Kafka does
// so (KAFKA_TEST_BROKERS); the embedded broker does so through
// internal/devbroker's keeper.
func TestBroker_KeepsAMemberWaitingInJoinGroup(t *testing.T) {
	brokers := testBrokers(t, 1, "join-wait")
	w := startJoinWait(t, brokers)

	// Three session timeouts, S heartbeating, A silent in JoinGroup.
	for time.Since(w.rejoined) < 3*joinWaitSession {
		w.heartbeatS()
		if ids := w.members(); !slices.Contains(ids, w.idA) {
			t.Fatalf("A, waiting in JoinGroup, left the group %v after it rejoined (session timeout %v): members %v",
				time.Since(w.rejoined).Round(10*time.Millisecond), joinWaitSession, ids)
		}
		w.assertANotAnswered("before S rejoined")
		time.Sleep(joinWaitSession / 5)
	}

	// S rejoins: the rebalance completes with both, A still the leader.
	final := w.mustJoin(w.s, w.idS)
	var answer *kmsg.JoinGroupResponse
	select {
	case answer = <-w.aAnswer:
	case <-time.After(30 * time.Second):
		t.Fatal("A's JoinGroup was not answered within 30s of the rebalance completing")
	}
	if answer == nil || answer.ErrorCode != 0 {
		t.Fatalf("A's JoinGroup answered %+v, want success", answer)
	}
	if answer.Generation != final.Generation || answer.LeaderID != w.idA || len(answer.Members) != 2 {
		t.Errorf("A's answer: generation %d, leader %s, %d members; S's generation %d: want the same generation, A leading both",
			answer.Generation, answer.LeaderID, len(answer.Members), final.Generation)
	}
	t.Logf("on %s, A waited in JoinGroup %v (session timeout %v) and was answered with both members",
		brokerName(), time.Since(w.rejoined).Round(10*time.Millisecond), joinWaitSession)
}

// TestBroker_RemovesASilentMemberDuringARebalance: a member that stops
// heartbeating and does not rejoin (it died) is removed at its session
// timeout, and the rebalance completes without it. On the embedded broker
// this checks that internal/devbroker's keeper heartbeats only for members
// waiting in JoinGroup: S's own JoinGroup was answered a rebalance ago,
// and keeping S alive would hold A until the rebalance timeout.
func TestBroker_RemovesASilentMemberDuringARebalance(t *testing.T) {
	brokers := testBrokers(t, 1, "join-wait")
	w := startJoinWait(t, brokers)

	// S falls silent; A waits in JoinGroup.
	var answer *kmsg.JoinGroupResponse
	select {
	case answer = <-w.aAnswer:
	case <-time.After(joinWaitRebalance / 2):
		t.Fatalf("A's JoinGroup not answered %v after S fell silent (session timeout %v, rebalance timeout %v): members %v",
			joinWaitRebalance/2, joinWaitSession, joinWaitRebalance, w.members())
	}
	if answer == nil || answer.ErrorCode != 0 {
		t.Fatalf("A's JoinGroup answered %+v, want success", answer)
	}
	if len(answer.Members) != 1 || answer.Members[0].MemberID != w.idA {
		t.Errorf("the rebalance completed with members %+v, want A (%s) alone", answer.Members, w.idA)
	}
	t.Logf("A was answered alone %v after its rejoin (session timeout %v)", time.Since(w.rejoined).Round(10*time.Millisecond), joinWaitSession)
}

// newMemberDiesInFirstJoin forms a group of A alone on brokers, makes a
// new member N join and die (its connection closed) while its first
// JoinGroup waits, and completes that rebalance by A's rejoin. It returns
// the scene (S unused), N's id and the generation A synced into.
func newMemberDiesInFirstJoin(t *testing.T, brokers []string) (w *joinWait, idN string, gen int32) {
	t.Helper()
	w, client := newJoinWait(t, brokers, "join-death-")
	ctx := w.ctx
	w.idA = w.memberID(w.a)
	first := w.mustJoin(w.a, w.idA)
	w.sync(w.a, w.idA, first.Generation)

	n := client()
	idN = w.memberID(n)
	nCtx, nCancel := context.WithCancel(ctx)
	nDone := make(chan struct{})
	go func() {
		defer close(nDone)
		_, _ = w.join(nCtx, n, idN)
	}()
	wait.For(t, 20*time.Second, "N's join to start a rebalance", func() bool {
		return errors.Is(w.heartbeat(w.a, w.idA, first.Generation), kerr.RebalanceInProgress)
	})
	// N dies: its connections close with its JoinGroup unanswered.
	nCancel()
	n.Close()
	<-nDone

	both := w.mustJoin(w.a, w.idA)
	if len(both.Members) != 2 {
		t.Fatalf("the rebalance completed with %d members, want A and N", len(both.Members))
	}
	w.sync(w.a, w.idA, both.Generation)
	return w, idN, both.Generation
}

// TestKfake_KeepsANewMemberThatDiedInItsFirstJoinGroup pins the other
// half of what kfake does on its own (without internal/devbroker's keeper):
// it stops a new member's session timer when the member joins and starts
// it again only once it has handed the member its answer. For a member
// whose connection closed, kfake picks at random between handing the
// answer to the dead connection's writer (the timer starts, and the member
// is removed at its session timeout) and dropping it: then the member
// stays in the group for good, and every later rebalance waits for it
// until the rebalance timeout. So the scene is tried until kfake keeps N
// once (each try keeps it with probability about one half; ten tries
// all failing would be one in a thousand). docs/kafka-brokers.md
// describes it.
func TestKfake_KeepsANewMemberThatDiedInItsFirstJoinGroup(t *testing.T) {
	brokers := kfakeAlone(t)
	const tries = 10
	for try := 1; try <= tries; try++ {
		w, idN, gen := newMemberDiesInFirstJoin(t, brokers)
		kept := true
		// Five session timeouts of A heartbeating: N is still listed, or
		// kfake removed it and rebalanced.
		for start := time.Now(); kept && time.Since(start) < 5*joinWaitSession; time.Sleep(joinWaitSession / 5) {
			switch err := w.heartbeat(w.a, w.idA, gen); {
			case errors.Is(err, kerr.RebalanceInProgress):
				kept = false
			case err != nil:
				t.Fatalf("A's heartbeat: %v", err)
			}
		}
		if kept && slices.Contains(w.members(), idN) {
			t.Logf("try %d: kfake kept N, dead since its first JoinGroup, %v (session timeout %v)", try, 5*joinWaitSession, joinWaitSession)
			return
		}
		t.Logf("try %d: kfake started N's session and removed it", try)
	}
	t.Fatalf("in %d tries kfake never kept a new member that died in its first JoinGroup: docs/kafka-brokers.md and internal/devbroker's keeper describe a kfake that is gone", tries)
}

// TestBroker_RemovesANewMemberThatDiedInItsFirstJoinGroup: a new member
// that dies waiting in its first JoinGroup is removed at its session
// timeout once the rebalance completed, and the group rebalances without
// it. Apache Kafka does so (KAFKA_TEST_BROKERS); the embedded broker does
// so through internal/devbroker's keeper.
func TestBroker_RemovesANewMemberThatDiedInItsFirstJoinGroup(t *testing.T) {
	w, idN, gen := newMemberDiesInFirstJoin(t, testBrokers(t, 1, "join-death"))
	synced := time.Now()
	wait.For(t, 20*joinWaitSession, "N to be removed and the group to rebalance", func() bool {
		err := w.heartbeat(w.a, w.idA, gen)
		if err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
			t.Fatalf("A's heartbeat: %v", err)
		}
		return err != nil
	})
	final := w.mustJoin(w.a, w.idA)
	for _, m := range final.Members {
		if m.MemberID == idN {
			t.Fatalf("the rebalance after N's death completed with N: %+v", final.Members)
		}
	}
	t.Logf("N, dead in its first JoinGroup, was removed %v after the rebalance it joined (session timeout %v)",
		time.Since(synced).Round(10*time.Millisecond), joinWaitSession)
}
