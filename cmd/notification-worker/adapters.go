package main

import (
	"context"
	"fmt"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/ports"
)

// The adapter registry: for each port, the adapters it can be given, by the
// name its variable takes (EVENT_SOURCE, IDEMPOTENCY_STORE, SMS_NOTIFIER,
// EMAIL_NOTIFIER). Adding an adapter is an entry here and its name among
// the variable's values in config.
var (
	// eventSources return the brokers the consumer dials.
	eventSources = map[string]func(m *Main) ([]string, error){
		"kafka":    func(m *Main) ([]string, error) { return m.Config.Kafka.Brokers, nil },
		"embedded": (*Main).startEmbedded,
	}
	stores = map[string]func(m *Main, ctx context.Context) (ports.IdempotencyStore, error){
		"redis":  (*Main).openRedis,
		"memory": func(*Main, context.Context) (ports.IdempotencyStore, error) { return memory.New(nil), nil },
	}
	smsNotifiers = map[string]func(m *Main) (ports.Notifier, error){
		"twilio":  (*Main).openTwilio,
		"console": (*Main).openConsole,
	}
	emailNotifiers = map[string]func(m *Main) (ports.Notifier, error){
		"smtp":    (*Main).openSMTP,
		"console": (*Main).openConsole,
	}
)

// choice is the adapter named for each port. A port the Deps give is
// "given" and built by no registry entry.
type choice struct {
	Source, Store, SMS, Email string
	// consoleShared lists the variables that chose a console notifier
	// beside the redis store, explicitly: allowed, and logged at start.
	consoleShared []string
}

const given = "given"

// choose resolves the adapters cfg names, with their defaults, for the
// ports d does not give. It returns a *config.Error naming every variable
// whose choice is half-configured (twilio without Twilio's variables) or
// contradictory (an in-process broker with KAFKA_BROKERS set); and, since a
// console notifier's sent records in a shared store would suppress the real
// notification for IDEMPOTENCY_TTL once its provider is configured, a
// console notifier chosen by default beside the redis store.
func choose(cfg config.Config, d Deps) (choice, error) {
	a := cfg.Adapters
	var bad []config.Problem
	fail := func(name, value, reason string) {
		bad = append(bad, config.Problem{Var: name, Value: value, Reason: reason})
	}
	c := choice{Source: a.EventSource, Store: a.Store, SMS: a.SMS, Email: a.Email}

	switch {
	case c.Source == "kafka" && len(cfg.Kafka.Brokers) == 0:
		fail("KAFKA_BROKERS", "", "required with EVENT_SOURCE=kafka (the default); for an in-process broker that keeps nothing across a restart, set EVENT_SOURCE=embedded")
	case c.Source == "embedded" && len(cfg.Kafka.Brokers) > 0:
		fail("EVENT_SOURCE", c.Source, "contradicts KAFKA_BROKERS, which is set; unset one of them")
	}

	redisSet := cfg.Idempotency.RedisURL != ""
	switch {
	case d.Store != nil:
		c.Store = given
	case c.Store == "":
		c.Store = map[bool]string{true: "redis", false: "memory"}[redisSet]
	case c.Store == "redis" && !redisSet:
		fail("REDIS_URL", "", "required with IDEMPOTENCY_STORE=redis")
	case c.Store == "memory" && redisSet:
		fail("IDEMPOTENCY_STORE", c.Store, "contradicts REDIS_URL, which is set; unset one of them")
	}
	shared := c.Store == "redis"

	for _, n := range []struct {
		ch                          ports.Channel
		name, provider, providerVar string
		configured                  bool
		pick                        *string
	}{
		{ports.ChannelSMS, "SMS_NOTIFIER", "twilio", "TWILIO_ACCOUNT_SID", cfg.TwilioEnabled(), &c.SMS},
		{ports.ChannelEmail, "EMAIL_NOTIFIER", "smtp", "SMTP_HOST", cfg.SMTPEnabled(), &c.Email},
	} {
		switch v := *n.pick; {
		case d.Notifiers[n.ch] != nil:
			*n.pick = given
		case v == "" && n.configured:
			*n.pick = n.provider
		case v == "" && shared:
			fail(n.name, "", fmt.Sprintf("unset, and %s is unset while the store is redis: notifications would go to the console and their sent records into the shared store, suppressing the real ones for IDEMPOTENCY_TTL once %s is configured; configure %s, or set %s=console for a test lab", n.providerVar, n.provider, n.provider, n.name))
		case v == "":
			*n.pick = "console"
		case v == n.provider && !n.configured:
			fail(n.providerVar, "", fmt.Sprintf("required with %s=%s", n.name, n.provider))
		case v == "console" && n.configured:
			fail(n.name, v, fmt.Sprintf("contradicts %s, which is set; unset one of them", n.providerVar))
		case v == "console" && shared:
			c.consoleShared = append(c.consoleShared, n.name)
		}
	}
	if len(bad) > 0 {
		return choice{}, &config.Error{Problems: bad}
	}
	return c, nil
}

// startEmbedded starts the in-process broker, with the topic and the dead
// letter topic, and returns its address.
func (m *Main) startEmbedded() ([]string, error) {
	emb, err := kafka.StartEmbedded(embeddedPartitions, m.Config.Kafka.Topic, m.Config.Kafka.DLQTopic)
	if err != nil {
		return nil, err
	}
	m.closers = append(m.closers, emb.Close)
	return emb.Brokers(), nil
}

// openRedis returns the Redis store behind the circuit breaker, the one
// layer that decides Redis is unavailable; it also bounds what the handlers
// leave unanswered on a server that went silent, and the store's ring is
// sized to hold that bound, so no call waits for a free slot past its
// deadline (see redis.Config).
func (m *Main) openRedis(ctx context.Context) (ports.IdempotencyStore, error) {
	cfg := m.Config.Idempotency
	rcfg, err := storeConfig(m.Config)
	if err != nil {
		return nil, err
	}
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		return nil, err
	}
	// The callers: MAX_IN_FLIGHT handlers, each making one store call at a
	// time, and the domain's one background writer of owed records.
	bcfg, maxUnanswered := breaker.ForCallers(
		breaker.Config{Failures: cfg.BreakerFailures, Cooldown: cfg.BreakerCooldown},
		m.Config.Kafka.MaxInFlight+1, unansweredFor)
	most, err := rcfg.MaxCalls()
	if err != nil {
		return nil, err
	}
	if maxUnanswered > most {
		return nil, fmt.Errorf("MAX_IN_FLIGHT=%d with IDEMPOTENCY_BREAKER_COOLDOWN=%v and the Redis URL's write_timeout (a command may wait %v for its answer) would leave up to %d calls awaiting Redis; the store holds at most %d: lower MAX_IN_FLIGHT or write_timeout, or raise the cooldown",
			m.Config.Kafka.MaxInFlight, cfg.BreakerCooldown, unansweredFor, maxUnanswered, most)
	}
	rcfg.MaxUnanswered = maxUnanswered
	rs, err := redis.New(rcfg)
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

// storeConfig is the Redis store's configuration from the worker's.
func storeConfig(c config.Config) (redis.Config, error) {
	i := c.Idempotency
	format, err := redis.ParseFormat(i.KeyFormat)
	if err != nil {
		return redis.Config{}, err
	}
	return redis.Config{
		URL:           i.RedisURL.Reveal(),
		Format:        format,
		CompactPrefix: i.CompactPrefix,
		KeyPrefix:     i.KeyPrefix,
		ReadBoth:      i.ReadBothFormats,
		Timeout:       i.Timeout,
		KeepAbandoned: i.TTL,
		MinReplicas:   i.MinReplicas,
		WaitAOF:       i.WaitAOF,

		SentinelAddrs:    i.SentinelAddrs,
		SentinelMaster:   i.SentinelMaster,
		SentinelUsername: i.SentinelUsername,
		SentinelPassword: i.SentinelPassword.Reveal(),
	}, nil
}

func (m *Main) openTwilio() (ports.Notifier, error) {
	cfg := m.Config
	return twilio.New(twilio.Config{
		AccountSID:          cfg.Twilio.AccountSID,
		AuthToken:           cfg.Twilio.AuthToken.Reveal(),
		From:                cfg.Twilio.FromNumber,
		MessagingServiceSID: cfg.Twilio.MessagingServiceSID,
		APIURL:              cfg.Twilio.APIURL,
		Timeout:             cfg.SendTimeout,
		ListLag:             cfg.Twilio.ListLag,
		// At most one SMS per record in flight: a connection each.
		MaxConns: cfg.Kafka.MaxInFlight,
	})
}

func (m *Main) openSMTP() (ports.Notifier, error) {
	s := m.Config.SMTP
	return smtp.New(smtp.Config{
		Host:      s.Host,
		Port:      s.Port,
		Username:  s.Username,
		Password:  s.Password.Reveal(),
		From:      s.From,
		TLSPolicy: s.TLSPolicy,
		// No Timeout: the domain bounds every send with SEND_TIMEOUT.
	})
}

func (m *Main) openConsole() (ports.Notifier, error) { return console.New(m.Stdout), nil }
