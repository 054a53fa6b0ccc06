package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/internal/logtest"
)

// TestRun_CleanShutdownExits0: the README's exit codes say 0 after a clean
// shutdown. The worker command runs (embedded broker, console notifiers)
// until its context is cancelled, as SIGTERM cancels it in main, and then
// returns 0 having logged worker_stopped.
func TestRun_CleanShutdownExits0(t *testing.T) {
	clearEnv(t)
	t.Setenv("EVENT_SOURCE", "embedded")
	t.Setenv("HTTP_ADDR", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"worker"}, strings.NewReader(""), &stdout, &stderr) }()

	waitFor(t, "the consumer to start", func() (bool, string) {
		return strings.Contains(stdout.String(), `"msg":"consumer_started"`), stdout.String()
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after a clean shutdown, want 0; stderr: %s", code, stderr.String())
		}
	case <-time.After(waitWithin):
		t.Fatalf("run did not return within %v of the cancellation", waitWithin)
	}
	if !strings.Contains(stdout.String(), `"msg":"worker_stopped"`) {
		t.Errorf("no worker_stopped line:\n%s", stdout.String())
	}
}
