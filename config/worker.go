package config

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// LoadWorker is Load for the worker itself: it checks each variable as Load
// does and, in the same pass, how they combine into a running worker. It
// resolves the adapter each port gets (Config.Adapters: no field is left
// empty but the notifier of a channel that is off) and refuses a choice
// that is half-configured, contradictory or unsafe, or a Redis store whose
// ring could not hold its unanswered calls (redisRing). The returned
// *Error lists every problem at once.
//
// Unlike Load it reads TEMPLATES_DIR, whose templates must load (for the
// built-in channels; a provider's channel is checked when the worker
// opens).
//
// The commands that run no worker (key, publish, the demo) call Load: they
// need some of the settings, not a worker's whole set.
//
// more are providers besides Providers, read and resolved as they are.
func LoadWorker(lookup func(string) (string, bool), more ...ports.Provider) (Config, error) {
	return loadWorker(lookup, nil, more)
}

// loadWorker is LoadWorker, which also checks the names of env when it is
// not nil (LoadWorkerEnviron).
func loadWorker(lookup func(string) (string, bool), env map[string]string, more []ports.Provider) (Config, error) {
	l, c := load(lookup, more)
	if env != nil {
		c.UnknownVariables = l.names(env)
	}
	l.adapters(&c, slices.Concat(Providers, more))
	l.redisRing(&c)
	if c.TemplatesDir != "" {
		if _, err := domain.LoadTemplates(os.DirFS(c.TemplatesDir)); err != nil {
			l.Fail("TEMPLATES_DIR", "want a readable directory of templates: "+err.Error())
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
//   - IDEMPOTENCY_STORE empty is the shared store that is configured
//     (redis, when REDIS_URL is set), and memory only when no notifier
//     that reaches customers is configured or meant (the development
//     run): beside one, an in-memory store would resend on every restart
//     what the replay brings, so REDIS_URL is then required. An empty
//     Secret value passes a Kubernetes secretKeyRef, which makes this a
//     configuration an operator can reach by accident.
//   - A notifier left empty is its provider when configured, else console
//     for SMS and email (AlwaysOn), refused beside a shared store unless
//     chosen explicitly, since its sent records would suppress the real
//     notifications for IDEMPOTENCY_TTL once the provider is configured;
//     else the channel is off.
//
// Values already reported bad by load are left alone ("" in c).
func (l *loader) adapters(c *Config, providers []ports.Provider) {
	l.source(c, providers)
	var real []string
	for _, p := range providers {
		if v := c.Adapters.Notifiers[p.Variable]; notifier(p) && (v == p.Name || v == "" && l.meant(p)) {
			real = append(real, p.Name)
		}
	}
	shared := l.store(c, providers, real)
	for _, p := range providers {
		if notifier(p) {
			l.notifier(c, p, shared)
		}
	}
}

// source checks EVENT_SOURCE against the event source's settings.
func (l *loader) source(c *Config, providers []ports.Provider) {
	const v = ports.SourceVariable
	for _, p := range providers {
		switch chosen := c.Adapters.EventSource; {
		case p.Variable != v:
		case chosen == p.Name && !l.configured[p.Name]:
			l.Fail(key(p), fmt.Sprintf("required with %s=%s (the default); for an in-process broker that keeps nothing across a restart, set %s=embedded", v, p.Name, v))
		case chosen == "embedded" && l.configured[p.Name]:
			l.Fail(v, "contradicts "+key(p)+", which is set; unset one of them")
		}
	}
}

// store resolves IDEMPOTENCY_STORE, beside the notifiers real that reach
// customers, and reports whether the store is shared by the replicas.
func (l *loader) store(c *Config, providers []ports.Provider, real []string) (shared bool) {
	const v = ports.StoreVariable
	var durable, set, chosen ports.Provider // the first shared; the first shared configured; the one named
	for _, p := range providers {
		if p.Variable != v {
			continue
		}
		if p.Name == c.Adapters.Store {
			chosen = p
		}
		if p.Shared && durable.Name == "" {
			durable = p
		}
		if p.Shared && l.configured[p.Name] && set.Name == "" {
			set = p
		}
	}
	switch a := &c.Adapters; {
	case l.bad(v):
	case a.Store == "" && set.Name != "":
		a.Store, chosen = set.Name, set
	case a.Store == "" && len(real) > 0:
		l.Fail(key(durable), fmt.Sprintf("required: a notifier that reaches customers is configured (%s), and the in-memory store forgets every sent record on restart, so each replay would send again; set %s (check that its Secret is not empty), or %s=memory for a test lab", strings.Join(real, ", "), key(durable), v))
	case a.Store == "":
		a.Store = "memory"
	case set.Name != "" && set.Name != a.Store:
		l.Fail(v, "contradicts "+key(set)+", which is set; unset one of them")
	case !l.configured[a.Store] && !slices.ContainsFunc(chosen.Settings, func(s Var) bool { return l.bad(s.Name) }):
		l.Fail(key(chosen), fmt.Sprintf("required with %s=%s", v, a.Store))
	}
	return chosen.Shared || c.Adapters.Store == "" && set.Name != ""
}

// notifier resolves the notifier p's variable chooses (see adapters): the
// provider when configured; console when asked for, or for an AlwaysOn
// channel unconfigured. A provider asked for by name must be configured,
// and "console" contradicts a configured one.
func (l *loader) notifier(c *Config, p ports.Provider, shared bool) {
	pick, configured, meant := c.Adapters.Notifiers[p.Variable], l.configured[p.Name], l.meant(p)
	switch {
	case l.bad(p.Variable):
	case pick == "" && configured:
		pick = p.Name
	case pick == "" && (!p.AlwaysOn || meant):
		// Off; or half-configured or bad: reported against its settings.
	case pick == "" && shared:
		l.Fail(p.Variable, fmt.Sprintf("unset, and %s is unset while the store is %s: notifications would go to the console and their sent records into the shared store, suppressing the real ones for IDEMPOTENCY_TTL once %s is configured; configure %s, or set %s=console for a test lab",
			key(p), c.Adapters.Store, p.Name, p.Name, p.Variable))
	case pick == "":
		pick = "console"
	case pick == p.Name && !configured && !meant:
		l.Fail(key(p), fmt.Sprintf("required with %s=%s", p.Variable, p.Name))
	case pick == "console" && configured:
		l.Fail(p.Variable, "contradicts "+key(p)+", which is set; unset one of them")
	}
	c.Adapters.Notifiers[p.Variable] = pick
}

// meant reports whether p's settings configure it, or the operator set one
// that has no default: a provider meant, whose problems, if it is not
// configured, are reported against its settings.
func (l *loader) meant(p ports.Provider) bool {
	return l.configured[p.Name] || slices.ContainsFunc(p.Settings, func(s Var) bool { return s.Default == "" && l.Set(s.Name) })
}

// key is the setting that configures p, its first: the one named when p
// is required ("" for a provider without settings).
func key(p ports.Provider) string {
	if len(p.Settings) == 0 {
		return ""
	}
	return p.Settings[0].Name
}

// redisRing refuses, for the redis store, a combination whose unanswered
// calls could outgrow the largest ring the store makes: the circuit
// breaker bounds them (MAX_IN_FLIGHT handlers and the ledger's writer,
// IDEMPOTENCY_BREAKER_FAILURES, IDEMPOTENCY_BREAKER_COOLDOWN) over the time
// the URL's write_timeout lets rueidis keep a command unanswered. It asks
// the adapters themselves (redis.Config, breaker.ForCallers), as the worker
// does when it builds them, so the rule is written once.
func (l *loader) redisRing(c *Config) {
	i := c.Idempotency
	rcfg := redis.LoadSettings(c.Settings())
	if c.Adapters.Store != redis.Provider.Name || rcfg.URL == "" || c.MaxInFlight == 0 || i.BreakerFailures == 0 || i.BreakerCooldown == 0 {
		return // not the redis store, or a value already reported bad
	}
	unansweredFor, err := rcfg.UnansweredFor()
	if err != nil {
		l.Fail("REDIS_URL", "the Redis store refuses it: "+err.Error())
		return
	}
	most, err := rcfg.MaxCalls()
	if err != nil {
		l.Fail("REDIS_URL", "the Redis store refuses it: "+err.Error())
		return
	}
	_, maxUnanswered := breaker.ForCallers(breaker.Config{Failures: i.BreakerFailures, Cooldown: i.BreakerCooldown},
		c.MaxInFlight+1, unansweredFor)
	if maxUnanswered > most {
		l.Fail("MAX_IN_FLIGHT", fmt.Sprintf("with IDEMPOTENCY_BREAKER_COOLDOWN=%v and REDIS_URL's write_timeout (a command may wait %v for its answer) up to %d calls could await Redis; the store holds at most %d: lower MAX_IN_FLIGHT or write_timeout, or raise the cooldown",
			i.BreakerCooldown, unansweredFor, maxUnanswered, most))
	}
}

// bad reports whether a problem has been recorded against any of names.
func (l *loader) bad(names ...string) bool {
	return slices.ContainsFunc(l.problems, func(p Problem) bool { return slices.Contains(names, p.Var) })
}
