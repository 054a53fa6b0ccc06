package ports

import "time"

// Setting declares one environment variable an adapter reads through
// Settings. The worker's configuration takes it into its reference: its
// default applies, a placeholder value is refused, a secret is never shown.
type Setting struct {
	Name string
	// Default is the value when the variable is unset or empty; "" for
	// none. It may refer to another variable's value as ${NAME}.
	Default string
	// Meaning says in a sentence what the variable does.
	Meaning string
	// Secret marks a value never shown in a log line or an error.
	Secret bool
	// MaskURL marks a secret that is a URL whose user info may hold a
	// password (REDIS_URL): the start-up line shows it through MaskURL
	// rather than as "***".
	MaskURL bool
}

// Settings reads the variables an adapter declared (its Provider's
// Settings), as the worker's configuration holds them. The configuration
// implements it; an adapter reads and checks its own settings through it,
// so that each rule is written once, in the adapter, and a bad value stops
// the worker at start with every other bad variable.
//
// Each getter returns the variable's value (the environment's, else its
// default). A getter that refuses the value reports it, as Fail does, and
// returns the zero value. Reading a variable that neither a provider nor
// the worker declares is a bug: it panics. Settings is used by one
// goroutine at a time.
type Settings interface {
	// Set reports whether the environment gives name a non-empty value.
	Set(name string) bool
	// String returns name's value, trimmed of surrounding white space
	// unless it is a secret.
	String(name string) string
	// OneOf returns name's value, refused unless one of allowed; "" when
	// unset without a default.
	OneOf(name string, allowed ...string) string
	// Bool returns name's value, refused unless true or false (as
	// strconv.ParseBool reads it).
	Bool(name string) bool
	// Int returns name's value, refused unless an integer from lo to hi.
	Int(name string, lo, hi int) int
	// Duration returns name's value, refused unless a Go duration of at
	// least lo.
	Duration(name string, lo time.Duration) time.Duration
	// URL returns name's value, refused unless an absolute http:// or
	// https:// URL without user info, query or fragment; "" when unset
	// without a default.
	URL(name string) string
	// HostPorts returns name's value, a comma-separated list of host:port,
	// each refused unless it has a host and a port from 1 to 65535; nil
	// when unset without a default.
	HostPorts(name string) []string
	// Fail reports name's value as refused, for reason (a sentence that
	// never quotes a secret).
	Fail(name, reason string)
}

// The variables whose value chooses a provider of a port other than a
// notifier (see Provider.Variable).
const (
	SourceVariable = "EVENT_SOURCE"
	StoreVariable  = "IDEMPOTENCY_STORE"
)

// Provider is an adapter that declares, reads and checks its own
// settings, and is chosen by name: the event source (Variable
// SourceVariable), an idempotency store (StoreVariable), or a channel's
// notifier (its channel's variable, which also takes "console"). The
// configuration reads every provider's settings through its Load, checks
// them with every other variable's, and resolves each choice.
type Provider struct {
	// Name is the value of Variable that picks this provider ("push").
	Name string
	// Variable is the variable whose value chooses this provider. Unset,
	// a notifier's is Name when Load reports the provider configured;
	// else "console" when AlwaysOn, else the channel is off: the worker
	// does not offer the channel at all (its recipient field and its name
	// are refused in an event, as for a channel it never had).
	Variable string
	// AlwaysOn marks a notifier whose channel the worker offers even
	// unconfigured (SMS, email): the console sends it then, which is
	// refused beside a Shared store unless asked for by name.
	AlwaysOn bool
	// Settings are the variables Load and Open read, in the order the
	// README lists them.
	Settings []Setting
	// Load reads and checks every setting through s, reporting each bad
	// one with s.Fail, and reports whether the settings configure the
	// provider (those it requires are set).
	Load func(s Settings) (configured bool)
	// Open builds the notifier from s, whose settings Load accepted. Its
	// error is a failure at start, not a configuration error.
	Open func(s Settings, env NotifierEnv) (Notifier, error)
	// OpenStore builds the store from s, whose settings Load accepted,
	// for StoreVariable=Name (which must then be configured); nil for a
	// store the worker builds itself from its settings (Redis). A store
	// with a Close method is closed when the worker stops.
	OpenStore func(s Settings, env StoreEnv) (IdempotencyStore, error)
	// Shared is set for a store that outlives the worker and is shared by
	// its replicas (a database): the worker wraps it in the circuit
	// breaker, and refuses a console notifier beside it unless asked for
	// by name, since the console's sent records would suppress the real
	// notifications. Unset: the store forgets on restart, like memory.
	Shared bool
}

// StoreEnv is what the worker tells every store it builds.
type StoreEnv struct {
	// TTL is how long a sent record lives (IDEMPOTENCY_TTL): a store that
	// keeps an abandoned claim to be found keeps it that long too.
	TTL time.Duration
}

// NotifierEnv is what the worker tells every notifier it builds.
type NotifierEnv struct {
	// SendTimeout bounds each send (SEND_TIMEOUT).
	SendTimeout time.Duration
	// MaxConns is the most sends at once (MAX_IN_FLIGHT): a connection
	// pool of this size serves every send.
	MaxConns int
}
