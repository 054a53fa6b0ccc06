package main

import (
	"strings"
	"testing"
)

// TestRun_CleanShutdownExits0: the README's exit codes say 0 after a clean
// shutdown. The worker command runs (embedded broker, console notifiers)
// until its context is cancelled, as SIGTERM cancels it in main, and then
// returns 0 having logged worker_stopped.
func TestRun_CleanShutdownExits0(t *testing.T) {
	setEnv(t, map[string]string{"EVENT_SOURCE": "embedded", "HTTP_ADDR": "127.0.0.1:0"})
	if stdout := mustStartAndStop(t, nil); !strings.Contains(stdout, `"msg":"worker_stopped"`) {
		t.Errorf("no worker_stopped line:\n%s", stdout)
	}
}
