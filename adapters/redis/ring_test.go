package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// TestRingHoldsMaxUnanswered: against a paused server, 64 callers leave
// 2880 commands unanswered, far more than rueidis' default ring of 1024,
// where the calls after the 1024th hung until rueidis dropped the
// connection (about 11 s; redis/rueidis#858). With MaxUnanswered 3000 the
// ring holds them all, and every call returns within its timeout plus the
// margin.
func TestRingHoldsMaxUnanswered(t *testing.T) {
	const (
		callers, perCaller = 64, 45
		callTimeout        = 50 * time.Millisecond
	)
	srv := redistest.MustStart(t)
	s := MustStore(t, redis.Config{URL: srv.URL(), KeyPrefix: "ring:", Timeout: callTimeout, MaxUnanswered: callers * perCaller})
	storetest.MustClaim(t, s, testCtx(t), uniqueKey(t), "tok", time.Minute)

	srv.Pause(t)
	t.Cleanup(func() { srv.Resume(t) })
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		slowest time.Duration
		answers int
	)
	stop := time.Now().Add(30 * time.Second)
	for c := range callers {
		wg.Go(func() {
			for i := 0; i < perCaller && time.Now().Before(stop); i++ {
				start := time.Now()
				_, err := s.Claim(context.Background(), fmt.Sprintf("%s-%d-%d", uniqueKey(t), c, i), "tok", "", "", time.Minute)
				took := time.Since(start)
				mu.Lock()
				slowest = max(slowest, took)
				if err == nil {
					answers++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if answers != 0 {
		t.Fatalf("%d claims answered by a paused server", answers)
	}
	if slowest > callTimeout+margin {
		t.Fatalf("slowest of %d calls took %v with a %v timeout; want at most %v", callers*perCaller, slowest, callTimeout, callTimeout+margin)
	}

	srv.Resume(t)
	wait.For(t, 20*time.Second, "store answers after the server resumes", func() error {
		_, err := s.Claim(context.Background(), uniqueKey(t), "tok", "", "", time.Minute)
		return err
	})
}

// TestPingEveryNode: Ping, the breaker's probe, fails while any node of a
// cluster is silent, though the others answer, and names the node; it
// succeeds again once every node answers.
func TestPingEveryNode(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	s := MustStore(t, redis.Config{URL: c.URL(), KeyPrefix: "ping:", Timeout: timeout})
	if err := s.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping with every node up: %v", err)
	}
	c.Nodes[1].Pause(t)
	t.Cleanup(func() { c.Nodes[1].Resume(t) })
	start := time.Now()
	err := s.Ping(context.Background())
	if err == nil {
		t.Fatal("Ping succeeded with a node paused")
	}
	if took := time.Since(start); took > timeout+margin {
		t.Fatalf("Ping took %v with a %v timeout", took, timeout)
	}
	if want := c.Nodes[1].Addr(); !strings.Contains(err.Error(), want) {
		t.Fatalf("Ping error %q does not name the paused node %s", err, want)
	}
	c.Nodes[1].Resume(t)
	wait.For(t, 20*time.Second, "Ping succeeds once every node answers", func() error { return s.Ping(context.Background()) })
}

// TestUnansweredFor: how long a command may keep its ring slot follows the
// URL's write_timeout (plus three keep-alive intervals of 1 s).
func TestUnansweredFor(t *testing.T) {
	for url, want := range map[string]time.Duration{
		"redis://127.0.0.1:6379":                  13 * time.Second,
		"redis://127.0.0.1:6379?write_timeout=1s": 4 * time.Second,
	} {
		got, err := redis.Config{URL: url}.UnansweredFor()
		if err != nil || got != want {
			t.Errorf("UnansweredFor(%s) = %v, %v; want %v", url, got, err, want)
		}
	}
	if _, err := (redis.Config{URL: "redis://127.0.0.1:6379?write_timeout=-1s"}).UnansweredFor(); err == nil {
		t.Error("UnansweredFor with a negative write_timeout: no error")
	}
}

// TestPingAfterANodeLeaves: a node goes silent, and the cluster takes its
// slots over (here by hand: the others forget it, and one of them adds its
// slots). Ping fails while the silent node is in the client's slot map, and
// succeeds again once the store has reread the map, though no routed
// command failed to make it: an open breaker sends none. (A node that
// dies, its connection refused, makes rueidis reread the map by itself.)
func TestPingAfterANodeLeaves(t *testing.T) {
	c := redistest.MustStartCluster(t, 3)
	s := MustStore(t, redis.Config{URL: c.URL(), KeyPrefix: "leave:", Timeout: timeout})
	if err := s.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping with every node up: %v", err)
	}
	silent := c.MustNodeID(t, 2)
	c.Nodes[2].Pause(t)
	t.Cleanup(func() { c.Nodes[2].Resume(t) })
	if err := s.Ping(testCtx(t)); err == nil {
		t.Fatal("Ping succeeded with a node of the slot map silent")
	}
	for i := range 2 {
		node := c.Nodes[i].MustClient(t, 0)
		if err := node.Do(testCtx(t), node.B().Arbitrary("CLUSTER", "FORGET").Args(silent).Build()).Error(); err != nil {
			t.Fatalf("CLUSTER FORGET on node %d: %v", i, err)
		}
	}
	lo, hi := c.Slots(2)
	node0 := c.Nodes[0].MustClient(t, 0)
	if err := node0.Do(testCtx(t), node0.B().Arbitrary("CLUSTER", "ADDSLOTSRANGE").Args(strconv.Itoa(lo), strconv.Itoa(hi)).Build()).Error(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE on node 0: %v", err)
	}
	// Within the store's 5 s refresh and slack; rueidis' own drop of the
	// silent connection, which also rereads the map, takes 11 s or more.
	wait.For(t, 9*time.Second, "Ping succeeds once the silent node has left the slot map", func() error { return s.Ping(context.Background()) })
}
