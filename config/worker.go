package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/smtp"
	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// LoadWorker is Load for the worker itself: it checks each variable as Load
// does and, in the same pass, how they combine into a running worker. It
// resolves the adapter each port gets (Config.Adapters: no field is left
// empty) and refuses a choice that is half-configured, contradictory or
// unsafe. Each notifier adapter's settings are read and checked by the
// adapter itself (twilio.LoadSettings, smtp.LoadSettings, a Provider's
// Load), in Load as here: config composes them, and checks only how they
// combine with the worker's (RECONCILE_TIMEOUT and TWILIO_LIST_LAG, clear
// text to TWILIO_API_URL). The returned *Error lists every problem at once.
//
// Unlike Load it reads files: KAFKA_TLS_CA_FILE, which must hold a PEM
// certificate, and TEMPLATES_DIR, whose templates must load (for the
// built-in channels; a provider's channel is checked when the worker
// opens).
//
// The commands that run no worker (key, publish, the demo) call Load: they
// need some of the settings, not a worker's whole set.
//
// providers are the adapters that declare and read their own settings
// (ports.Provider): a notifier per channel that has one, a store per
// IDEMPOTENCY_STORE value that has one. LoadWorker reads each one's
// settings through its Load, resolves the choice, and keeps the settings
// for Config.Settings.
func LoadWorker(lookup func(string) (string, bool), providers ...ports.Provider) (Config, error) {
	return loadWorker(lookup, nil, providers)
}

// loadWorker is LoadWorker, which also checks the names of env when it is
// not nil (LoadWorkerEnviron).
func loadWorker(lookup func(string) (string, bool), env map[string]string, providers []ports.Provider) (Config, error) {
	l, c := load(lookup, providers)
	if env != nil {
		c.UnknownVariables = l.names(env)
	}
	l.declaredProviders(&c, providers)
	l.adapters(&c)
	l.redisRing(&c)
	if c.Kafka.TLS && c.Kafka.TLSCAFile != "" && !l.bad("KAFKA_TLS_CA_FILE") {
		if _, err := c.kafkaTLS(); err != nil {
			l.fail("KAFKA_TLS_CA_FILE", "want a readable PEM file of the CA: "+err.Error())
		}
	}
	if c.TemplatesDir != "" {
		if _, err := domain.LoadTemplates(os.DirFS(c.TemplatesDir)); err != nil {
			l.fail("TEMPLATES_DIR", "want a readable directory of templates: "+err.Error())
		}
	}
	if len(l.problems) > 0 {
		return Config{}, &Error{Problems: l.problems, LogFormat: c.LogFormat}
	}
	return c, nil
}

// adapters resolves c.Adapters as the worker will build them:
//
//   - EVENT_SOURCE=kafka needs KAFKA_BROKERS; embedded refuses them.
//   - IDEMPOTENCY_STORE empty is redis when REDIS_URL is set, and memory
//     only when no real provider is configured (the development run): with
//     Twilio or SMTP configured, an in-memory store would resend on every
//     restart what the replay brings, so REDIS_URL is then required. An
//     empty Secret value passes a Kubernetes secretKeyRef, which makes this
//     a configuration an operator can reach by accident.
//   - A notifier left empty is its provider when configured, else console;
//     console beside the redis store is refused unless chosen explicitly,
//     since its sent records would suppress the real notifications for
//     IDEMPOTENCY_TTL once the provider is configured.
//
// Values already reported bad by load are left alone ("" in c).
func (l *loader) adapters(c *Config) {
	a := &c.Adapters
	switch brokers := l.set("KAFKA_BROKERS"); {
	case a.EventSource == "kafka" && !brokers:
		l.fail("KAFKA_BROKERS", "required with EVENT_SOURCE=kafka (the default); for an in-process broker that keeps nothing across a restart, set EVENT_SOURCE=embedded")
	case a.EventSource == "embedded" && brokers:
		l.fail("EVENT_SOURCE", "contradicts KAFKA_BROKERS, which is set; unset one of them")
	}

	// A provider whose variables are set but bad (reported already) is
	// taken as meant: its notifier is not also reported as unconfigured.
	notifiers := []struct {
		name, provider, providerVar string
		configured, meant           bool
		pick                        *string
	}{
		{"SMS_NOTIFIER", "twilio", "TWILIO_ACCOUNT_SID", c.TwilioEnabled(),
			l.firstSet("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM_NUMBER", "TWILIO_MESSAGING_SERVICE_SID") != "", &a.SMS},
		{"EMAIL_NOTIFIER", "smtp", "SMTP_HOST", c.SMTPEnabled(), l.firstSet("SMTP_HOST", "SMTP_FROM") != "", &a.Email},
	}
	realProvider := l.provided
	for _, n := range notifiers {
		realProvider = realProvider || *n.pick == n.provider || *n.pick == "" && n.meant
	}

	redisSet := c.Redis.URL != "" || l.set("REDIS_URL")
	provider, declared := l.stores[a.Store]
	switch {
	case l.bad("IDEMPOTENCY_STORE"):
	case (declared || a.Store == "memory") && redisSet:
		l.fail("IDEMPOTENCY_STORE", "contradicts REDIS_URL, which is set; unset one of them")
	case declared && !provider.configured:
		if !l.bad(provider.vars...) {
			l.fail("IDEMPOTENCY_STORE", fmt.Sprintf("the %s store is not configured: set %s", a.Store, strings.Join(provider.vars, ", ")))
		}
	case a.Store == "" && redisSet:
		a.Store = "redis"
	case a.Store == "" && realProvider:
		l.fail("REDIS_URL", "required: a real provider is configured (TWILIO_* or SMTP_*), and the in-memory store forgets every sent record on restart, so each replay would send again; set REDIS_URL (check that its Secret is not empty), or IDEMPOTENCY_STORE=memory for a test lab")
	case a.Store == "":
		a.Store = "memory"
	case a.Store == "redis" && !redisSet:
		l.fail("REDIS_URL", "required with IDEMPOTENCY_STORE=redis")
	}
	shared := a.Store == "redis" || a.Store == "" && redisSet || provider.shared

	for _, n := range notifiers {
		switch v := *n.pick; {
		case l.bad(n.name):
		case v == "" && n.configured:
			*n.pick = n.provider
		case !n.configured && n.meant:
			// Half-configured or bad: reported against its variables.
		case v == "" && shared:
			l.fail(n.name, fmt.Sprintf("unset, and %s is unset while the store is %s: notifications would go to the console and their sent records into the shared store, suppressing the real ones for IDEMPOTENCY_TTL once %s is configured; configure %s, or set %s=console for a test lab", n.providerVar, a.Store, n.provider, n.provider, n.name))
		case v == "":
			*n.pick = "console"
		case v == n.provider && !n.configured:
			l.fail(n.providerVar, fmt.Sprintf("required with %s=%s", n.name, n.provider))
		case v == "console" && n.configured:
			l.fail(n.name, fmt.Sprintf("contradicts %s, which is set; unset one of them", n.providerVar))
		}
	}
}

// redisRing refuses, for the redis store, a combination whose unanswered
// calls could outgrow the largest ring the store makes: the circuit
// breaker bounds them (MAX_IN_FLIGHT handlers and the ledger's writer,
// IDEMPOTENCY_BREAKER_FAILURES, IDEMPOTENCY_BREAKER_COOLDOWN) over the time
// the URL's write_timeout lets rueidis keep a command unanswered. It asks
// the adapters themselves (redis.Config, breaker.ForCallers), as the worker
// does when it builds them, so the rule is written once.
func (l *loader) redisRing(c *Config) {
	i, k := c.Idempotency, c.Kafka
	if c.Adapters.Store != "redis" || c.Redis.URL == "" || k.MaxInFlight == 0 || i.BreakerFailures == 0 || i.BreakerCooldown == 0 {
		return // not the redis store, or a value already reported bad
	}
	// Only the URL and ReadBothFormats size the ring: the key format,
	// reported already if bad, does not.
	rcfg := redis.Config{URL: c.Redis.URL.Reveal(), ReadBoth: c.Redis.ReadBothFormats}
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		l.fail("REDIS_URL", "the Redis store refuses it: "+err.Error())
		return
	}
	most, err := rcfg.MaxCalls()
	if err != nil {
		l.fail("REDIS_URL", "the Redis store refuses it: "+err.Error())
		return
	}
	_, maxUnanswered := breaker.ForCallers(breaker.Config{Failures: i.BreakerFailures, Cooldown: i.BreakerCooldown},
		k.MaxInFlight+1, unansweredFor)
	if maxUnanswered > most {
		l.fail("MAX_IN_FLIGHT", fmt.Sprintf("with IDEMPOTENCY_BREAKER_COOLDOWN=%v and REDIS_URL's write_timeout (a command may wait %v for its answer) up to %d calls could await Redis; the store holds at most %d: lower MAX_IN_FLIGHT or write_timeout, or raise the cooldown",
			i.BreakerCooldown, unansweredFor, maxUnanswered, most))
	}
}

// Notifier returns the notifier chosen by variable, the variable of a
// channel's notifier (SMS_NOTIFIER, EMAIL_NOTIFIER, a Provider's
// Variable), as LoadWorker resolved it; "" for a provider's channel that is
// off, and for a variable that names no notifier.
func (c Config) Notifier(variable string) string {
	switch variable {
	case "SMS_NOTIFIER":
		return c.Adapters.SMS
	case "EMAIL_NOTIFIER":
		return c.Adapters.Email
	}
	return c.Adapters.Provided[variable]
}

// declaredProviders reads each provider's settings through its Load and resolves
// the notifier its Variable chooses (see ports.Provider): the provider
// when configured, else off; "console" when asked for. A provider asked
// for by name must be configured, and "console" contradicts a configured
// one. The values read are kept for Settings.
func (l *loader) declaredProviders(c *Config, providers []ports.Provider) {
	c.Adapters.Provided = map[string]string{}
	c.declared = l.declared
	c.values = map[string]Secret{}
	l.stores = map[string]storeProvided{}
	for _, p := range providers {
		if p.OpenStore != nil {
			sp := storeProvided{configured: p.Load(settings{l}), shared: p.Shared}
			for _, s := range p.Settings {
				sp.vars = append(sp.vars, s.Name)
				c.values[s.Name] = Secret(l.value(s.Name))
			}
			l.stores[p.Name] = sp
			continue
		}
		v := l.oneOf(p.Variable, false, p.Name, "console")
		configured := p.Load(settings{l})
		meant := false
		for _, s := range p.Settings {
			meant = meant || l.set(s.Name)
			c.values[s.Name] = Secret(l.value(s.Name))
		}
		switch {
		case l.bad(p.Variable):
		case v == "" && configured:
			v = p.Name
		case v == p.Name && !configured && !meant:
			l.fail(p.Variable, fmt.Sprintf("%s=%s, but none of the %s provider's variables is set", p.Variable, p.Name, p.Name))
		case v == "console" && configured:
			l.fail(p.Variable, fmt.Sprintf("contradicts the %s provider's variables, which are set; unset one or the other", p.Name))
		}
		l.provided = l.provided || v == p.Name || v == "" && meant
		c.Adapters.Provided[p.Variable] = v
	}
}

// storeProvided is what LoadWorker learnt of a store's provider.
type storeProvided struct {
	configured, shared bool
	vars               []string // its settings
}

// Settings returns the settings the providers given to LoadWorker read,
// with the values LoadWorker accepted, for their Open.
func (c Config) Settings() ports.Settings {
	values := c.values
	return settings{&loader{
		lookup:   func(name string) (string, bool) { v, ok := values[name]; return v.Reveal(), ok },
		declared: c.declared,
	}}
}

// settings is ports.Settings over a loader.
type settings struct{ l *loader }

func (s settings) Set(name string) bool            { return s.l.set(name) }
func (s settings) String(name string) string       { return s.l.str(name) }
func (s settings) Int(name string, lo, hi int) int { return s.l.intIn(name, lo, hi) }
func (s settings) Bool(name string) bool           { return s.l.boolean(name) }
func (s settings) HostPorts(name string) []string  { return s.l.hostPorts(name) }
func (s settings) Fail(name, reason string)        { s.l.fail(name, reason) }
func (s settings) URL(name string) string          { return s.l.optionalHTTPURL(name) }
func (s settings) Duration(name string, lo time.Duration) time.Duration {
	return s.l.duration(name, lo)
}

// declared returns the variables providers declare (ProviderVars), by
// name.
func declared(providers []ports.Provider) map[string]Var {
	out := map[string]Var{}
	for _, v := range ProviderVars(providers...) {
		out[v.Name] = v
	}
	return out
}

// ProviderVars returns the variables providers declare, in their order:
// a notifier's Variable, then each one's Settings. LoadWorker reads them
// beside Reference; the worker's README lists them after Reference's own
// provider settings (ReferenceWith).
func ProviderVars(providers ...ports.Provider) []Var {
	var out []Var
	for _, p := range providers {
		if p.OpenStore == nil {
			out = append(out, Var{Name: p.Variable, Meaning: "How the " + p.Name + " channel's notifications are sent: `" + p.Name + "` or `console`; unset, `" + p.Name + "` when configured, else the channel is off."})
		}
		out = append(out, vars(p.Settings)...)
	}
	return out
}

// bad reports whether a problem has been recorded against any of names.
func (l *loader) bad(names ...string) bool {
	for _, p := range l.problems {
		for _, n := range names {
			if p.Var == n {
				return true
			}
		}
	}
	return false
}

// TwilioConfig is the Twilio adapter's configuration, as the worker builds
// it when SMS_NOTIFIER resolves to twilio.
func (c Config) TwilioConfig() twilio.Config {
	return twilio.Config{
		AccountSID:          c.Twilio.AccountSID,
		AuthToken:           c.Twilio.AuthToken.Reveal(),
		From:                c.Twilio.FromNumber,
		MessagingServiceSID: c.Twilio.MessagingServiceSID,
		APIURL:              c.Twilio.APIURL,
		Timeout:             c.SendTimeout,
		ListLag:             c.Twilio.ListLag,
		// At most one SMS per record in flight: a connection each.
		MaxConns: c.Kafka.MaxInFlight,
	}
}

// RedisConfig is the Redis store's configuration from its settings, as
// the worker builds it when IDEMPOTENCY_STORE resolves to redis. It sets
// neither Timeout nor KeepAbandoned, MaxUnanswered or the Health watch's
// logger: the worker does, from its own settings. It fails when
// KeyFormat names no format (a Config built by hand).
func (c Config) RedisConfig() (redis.Config, error) {
	r := c.Redis
	format, err := redis.ParseFormat(r.KeyFormat)
	if err != nil {
		return redis.Config{}, err
	}
	return redis.Config{
		URL:           r.URL.Reveal(),
		Format:        format,
		CompactPrefix: r.CompactPrefix,
		KeyPrefix:     r.KeyPrefix,
		ReadBoth:      r.ReadBothFormats,
		Health:        redis.HealthConfig{AllowEviction: r.AllowEviction},
		MinReplicas:   r.MinReplicas,
		WaitAOF:       r.WaitAOF,

		SentinelAddrs:    r.SentinelAddrs,
		SentinelMaster:   r.SentinelMaster,
		SentinelUsername: r.SentinelUsername,
		SentinelPassword: r.SentinelPassword.Reveal(),
	}, nil
}

// SMTPConfig is the SMTP adapter's configuration, as the worker builds it
// when EMAIL_NOTIFIER resolves to smtp. It sets no Timeout: the domain
// bounds every send with SEND_TIMEOUT.
func (c Config) SMTPConfig() smtp.Config {
	s := c.SMTP
	return smtp.Config{
		Host:      s.Host,
		Port:      s.Port,
		Username:  s.Username,
		Password:  s.Password.Reveal(),
		From:      s.From,
		TLSPolicy: s.TLSPolicy,
	}
}

// KafkaTLS returns the TLS settings KAFKA_TLS and KAFKA_TLS_CA_FILE ask
// for, or nil for plaintext. It reads the CA file, and fails, naming
// KAFKA_TLS_CA_FILE, when it cannot be read or holds no PEM certificate;
// LoadWorker has checked that once.
func (c Config) KafkaTLS() (*tls.Config, error) {
	t, err := c.kafkaTLS()
	if err != nil {
		return nil, fmt.Errorf("KAFKA_TLS_CA_FILE %s: %w", c.Kafka.TLSCAFile, err)
	}
	return t, nil
}

func (c Config) kafkaTLS() (*tls.Config, error) {
	if !c.Kafka.TLS {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := c.Kafka.TLSCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("holds no PEM certificate")
		}
		t.RootCAs = pool
	}
	return t, nil
}
