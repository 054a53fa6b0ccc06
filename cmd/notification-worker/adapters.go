package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/ports"
)

// The adapter registry: for each port, the adapters it can be given, by the
// name its variable takes (EVENT_SOURCE, IDEMPOTENCY_STORE; each channel's
// notifiers are in its row of channels). Adding an adapter is an entry here
// and its Provider among config.Providers, which offers its name as a
// value of the variable.
var (
	// eventSources return the brokers the consumer dials.
	eventSources = map[string]func(m *Main) ([]string, error){
		"kafka":    func(m *Main) ([]string, error) { return m.kafka.Brokers, nil },
		"embedded": (*Main).startEmbedded,
	}
	// stores: a store whose Provider opens it is one line,
	// providedStore(its Provider), as memory.
	stores = map[string]store{
		"redis":  {open: (*Main).openRedis, provider: &redis.Provider},
		"memory": providedStore(memory.Provider),
	}
)

// choice is the adapter built for each port: the one config.LoadWorker
// resolved, or "given" for a port the Deps give.
type choice struct {
	Source, Store string
	// Notifiers holds each channel's notifier, by channel.
	Notifiers map[ports.Channel]string
	// consoleShared lists the variables that chose a console notifier
	// beside a shared store (redis, or a provider's that is Shared),
	// explicitly: allowed, and logged at start.
	consoleShared []string
	// realBesideMemory lists the notifiers that reach customers beside a
	// store that forgets on restart (memory, or a provider's that is not
	// Shared), which config.LoadWorker allows only when it is asked for
	// by name: logged at start.
	realBesideMemory []string
}

const given = "given"

// choose returns the adapters cfg names for the ports d does not give.
// cfg comes from config.LoadWorker, which resolved and checked the choice;
// an adapter name missing from the registry is a caller's error (a Config
// from config.Load, whose Adapters are left as given).
func choose(cfg config.Config, d Deps) (choice, error) {
	a := cfg.Adapters
	c := choice{Source: a.EventSource, Store: a.Store, Notifiers: map[ports.Channel]string{}}
	if d.Store != nil {
		c.Store = given
	}
	_, source := eventSources[c.Source]
	st, store := stores[c.Store]
	resolved := source && (store || c.Store == given)
	shared := st.provider != nil && st.provider.Shared
	forgets := st.provider != nil && !st.provider.Shared
	for _, ch := range active(cfg, d) {
		name := cfg.Notifier(ch.Provider.Variable)
		if d.Notifiers[ch.Name] != nil {
			name = given
		}
		if shared && name == "console" {
			c.consoleShared = append(c.consoleShared, ch.Provider.Variable)
		}
		if forgets && name != "console" && name != given {
			c.realBesideMemory = append(c.realBesideMemory, name)
		}
		resolved = resolved && (name == ch.Provider.Name || name == "console" || name == given)
		c.Notifiers[ch.Name] = name
	}
	if !resolved {
		return choice{}, fmt.Errorf("adapters %+v are not all resolved: the worker's Config comes from config.LoadWorker", a)
	}
	return c, nil
}

// store is one entry of stores: how the worker opens it, and its Provider.
type store struct {
	open     func(m *Main, ctx context.Context) (ports.IdempotencyStore, error)
	provider *ports.Provider
}

// providedStore is the entry of a store whose adapter reads its own
// settings: built by p.OpenStore from Config.Settings, closed at stop if
// it has a Close method, and behind the circuit breaker when p.Shared.
func providedStore(p ports.Provider) store {
	return store{provider: &p, open: func(m *Main, _ context.Context) (ports.IdempotencyStore, error) {
		s, err := p.OpenStore(m.Config.Settings(), ports.StoreEnv{TTL: m.Config.Idempotency.TTL})
		if err != nil {
			return nil, err
		}
		if c, ok := s.(interface{ Close() }); ok {
			m.closers = append(m.closers, c.Close)
		}
		if !p.Shared {
			return s, nil
		}
		cfg := m.Config.Idempotency
		b := breaker.New(s, breaker.Config{Failures: cfg.BreakerFailures, Cooldown: cfg.BreakerCooldown})
		m.closers = append(m.closers, b.Close)
		m.breaker = b
		m.metrics.WatchBreaker(func() bool { return b.State() == breaker.StateOpen })
		return b, nil
	}}
}

// embeddedBroker starts the in-process broker with topics and returns its
// addresses and what stops it. Only a development build links one
// (devbroker.go, built with -tags devbroker: `make run`); in the production
// binary it is nil, and EVENT_SOURCE=embedded and the demo refuse
// (errNoEmbeddedBroker).
var embeddedBroker func(topics ...string) (brokers []string, stop func(), err error)

// errNoEmbeddedBroker is what EVENT_SOURCE=embedded and the demo get from a
// binary without the in-process broker.
var errNoEmbeddedBroker = errors.New("this binary has no embedded broker: only a development build has one (go build -tags devbroker; `make run` runs the demo on it)")

// startEmbedded starts the in-process broker, with the topic and the dead
// letter topic, and returns its address; in the production binary it
// refuses EVENT_SOURCE=embedded as bad configuration.
func (m *Main) startEmbedded() ([]string, error) {
	if embeddedBroker == nil {
		return nil, m.configError("EVENT_SOURCE", "embedded", errNoEmbeddedBroker.Error()+"; set EVENT_SOURCE=kafka and KAFKA_BROKERS")
	}
	brokers, stop, err := embeddedBroker(m.kafka.Topic, m.kafka.DLQTopic)
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, stop)
	return brokers, nil
}

// openRedis returns the Redis store behind the circuit breaker, the one
// layer that decides Redis is unavailable; it also bounds what the handlers
// leave unanswered on a server that went silent, and the store's ring is
// sized to hold that bound, so no call waits for a free slot past its
// deadline (see redis.Config; config.LoadWorker refused a bound the
// largest ring cannot hold, and redis.New refuses it too).
func (m *Main) openRedis(ctx context.Context) (ports.IdempotencyStore, error) {
	cfg := m.Config.Idempotency
	rcfg := storeConfig(m.Config)
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		return nil, err
	}
	// The callers: MAX_IN_FLIGHT handlers, each making one store call at a
	// time, and the domain's one background writer of owed records.
	bcfg, maxUnanswered := breaker.ForCallers(
		breaker.Config{Failures: cfg.BreakerFailures, Cooldown: cfg.BreakerCooldown},
		m.Config.MaxInFlight+1, unansweredFor)
	rcfg.MaxUnanswered = maxUnanswered
	rcfg.Health.Logger, rcfg.Health.Events = m.logger, m.metrics
	rcfg.Health.Interval = redisHealthInterval
	var rs *redis.Store
	err = m.reach(ctx, "redis", func(context.Context) error {
		var err error
		rs, err = redis.New(rcfg)
		var evicting *redis.EvictionPolicyError
		switch {
		case errors.As(err, &evicting):
			// The operator's choice to make: a configuration error (exit 2).
			return m.configError("IDEMPOTENCY_ALLOW_EVICTION", "false", "the Redis primary "+evicting.Node+" has "+evicting.Reason())
		case errors.Is(err, redis.ErrNoWaitAOF):
			return m.configError("IDEMPOTENCY_WAIT_AOF", "true", err.Error())
		case errors.Is(err, redis.ErrAckRefused):
			return m.configError("IDEMPOTENCY_MIN_REPLICAS", rcfg.MinReplicasSetting(), err.Error())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, rs.Close)
	bcfg.Probe = rs.Ping
	b := breaker.New(rs, bcfg)
	m.closers = append(m.closers, b.Close)
	m.breaker = b
	m.metrics.WatchBreaker(func() bool { return b.State() == breaker.StateOpen })
	return b, nil
}

// redisHealthInterval is how often the Redis store looks for evictions and
// a reset: zero, the store's default (a minute). Tests shorten it.
var redisHealthInterval time.Duration

// storeConfig is the Redis store's configuration from the worker's: the
// store's own settings (redis.LoadSettings) and the worker's budget per
// call and sent records' TTL.
func storeConfig(c config.Config) redis.Config {
	rcfg := redis.LoadSettings(c.Settings())
	rcfg.Timeout = c.Idempotency.Timeout
	rcfg.KeepAbandoned = c.Idempotency.TTL
	return rcfg
}
