package memory

import "github.com/harborlight/notification-worker/ports"

// Provider offers the store as IDEMPOTENCY_STORE=memory: no settings, not
// shared (every sent record is forgotten on restart).
var Provider = ports.Provider{
	Name:     "memory",
	Variable: ports.StoreVariable,
	Load:     func(ports.Settings) bool { return true },
	OpenStore: func(_ ports.Settings, env ports.StoreEnv) (ports.IdempotencyStore, error) {
		return NewWithConfig(Config{KeepAbandoned: env.TTL}), nil
	},
}
