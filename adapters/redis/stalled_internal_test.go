package redis

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// TestStalledEndsUnderLoadOnceTheServerAnswers: after an outage, a server
// that answers again under steady load must bring the store back to its
// fast path once stalledFor has passed since the last timeout. A version
// that also stayed stalled while any detached call was running never came
// back: under load some call always is (found in review).
func TestStalledEndsUnderLoadOnceTheServerAnswers(t *testing.T) {
	srv := redistest.MustStart(t)
	s, err := New(Config{URL: srv.URL() + "?write_timeout=1s", KeyPrefix: "stalled:", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	if s.stalledFor != 4*time.Second {
		t.Fatalf("stalledFor = %v with write_timeout=1s, want 4s (1s + 3 keep-alive intervals)", s.stalledFor)
	}

	srv.Pause(t)
	for i := range 5 {
		if _, err := s.Claim(context.Background(), fmt.Sprintf("outage-%d", i), "tok", time.Minute); err == nil {
			t.Fatal("a claim succeeded against a paused server")
		}
	}
	if !s.stalled() {
		t.Fatal("not stalled after 5 timeouts")
	}
	srv.Resume(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = s.Claim(context.Background(), fmt.Sprintf("load-%d-%d", c, i), "tok", time.Minute)
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	deadline := time.Now().Add(s.stalledFor + 10*time.Second)
	for s.stalled() {
		if time.Now().After(deadline) {
			t.Fatalf("still stalled %v after the server came back, under load", s.stalledFor+10*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
