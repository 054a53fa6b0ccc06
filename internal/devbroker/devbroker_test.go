package devbroker_test

import (
	"strings"
	"testing"

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
