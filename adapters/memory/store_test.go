package memory_test

import (
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

func TestStoreContract(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T, keep time.Duration) ports.IdempotencyStore {
			return memory.NewWithConfig(memory.Config{KeepAbandoned: keep})
		},
	})
}
