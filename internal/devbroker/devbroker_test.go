package devbroker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/internal/devbroker"
)

func TestStart(t *testing.T) {
	t.Parallel()
	t.Run("LoopbackOnly", func(t *testing.T) {
		b, err := devbroker.Start(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		for _, addr := range b.Brokers() {
			if !strings.HasPrefix(addr, "127.0.0.1:") {
				t.Errorf("broker %s is not on 127.0.0.1", addr)
			}
		}
	})
	t.Run("ErrNoPartitions", func(t *testing.T) {
		if _, err := devbroker.Start(0, []string{"t"}); err == nil {
			t.Fatal("Start(0) succeeded")
		}
	})
}

// TraceGroups: each group request the broker receives is a line of the
// trace, naming the request, its group and its member.
func TestTraceGroups(t *testing.T) {
	t.Parallel()
	b, err := devbroker.Start(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	lines := make(chan string, 16)
	b.TraceGroups(func(line string) { lines <- line })

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = "traced", "m-1", 3
	if _, err := req.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-lines:
		if !strings.HasPrefix(line, "Heartbeat ") || !strings.Contains(line, `traced member="m-1" gen=3`) {
			t.Errorf("trace line %q, want the heartbeat of m-1 in traced, generation 3", line)
		}
	case <-ctx.Done():
		t.Fatal("no trace line for a heartbeat")
	}
}
