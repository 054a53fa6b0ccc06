package twilio

import (
	"regexp"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Provider is Twilio as the worker offers it on the SMS channel:
// SMS_NOTIFIER=twilio (or console), configured by the account SID, the
// auth token and a sender together (Config.Configured).
var Provider = ports.Provider{
	Name:     "twilio",
	Variable: "SMS_NOTIFIER",
	AlwaysOn: true,
	Settings: []ports.Setting{
		{Name: "TWILIO_ACCOUNT_SID", Meaning: "Twilio account SID (letters and digits). With `TWILIO_AUTH_TOKEN` and a sender, Twilio is configured (see `SMS_NOTIFIER`); a partial set is an error."},
		{Name: "TWILIO_AUTH_TOKEN", Meaning: "Twilio auth token (letters and digits).", Secret: true},
		{Name: "TWILIO_FROM_NUMBER", Meaning: "Sender phone number, E.164 (`+15551234567`). Set it or `TWILIO_MESSAGING_SERVICE_SID`."},
		{Name: "TWILIO_MESSAGING_SERVICE_SID", Meaning: "Twilio Messaging Service SID, the alternative to `TWILIO_FROM_NUMBER`."},
		{Name: "TWILIO_API_URL", Default: "https://api.twilio.com", Meaning: "Absolute `http(s)` base URL of the Twilio API (a proxy, a test double), without user info, query or fragment."},
		{Name: "TWILIO_LIST_LAG", Default: "1m", Meaning: "How long Twilio's Messages list may lag the messages Twilio accepted. Reconciling an SMS whose send outcome was unknown answers \"not delivered\" only once its attempt ended this long ago; before, a message not listed is \"cannot tell\". Twilio is asked at once, then once this long after the send (docs/reconciliation.md)."},
	},
	Load: func(s ports.Settings) bool { return LoadSettings(s).Configured() },
	Open: func(s ports.Settings, env ports.NotifierEnv) (ports.Notifier, error) {
		cfg := LoadSettings(s)
		// At most one SMS per record in flight: a connection each.
		cfg.Timeout, cfg.MaxConns = env.SendTimeout, env.MaxConns
		return New(cfg)
	},
}

// e164 is the E.164 format Twilio requires of a sender: "+", a country
// code that does not start with 0, at most 15 digits in all.
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

// LoadSettings reads the Provider's settings through s into a Config, the
// one place their rules are written: each variable is checked, and a bad
// one reported with s.Fail (and left zero); so is a partial set. It sets
// neither Timeout nor MaxConns, which are the worker's. Twilio is
// configured when AccountSID, AuthToken and a sender are all set
// (Configured).
//
// With some credentials given, the operator expects SMS through Twilio,
// and silently printing them to the console instead would lose every SMS:
// a partial set is refused.
func LoadSettings(s ports.Settings) Config {
	cfg := Config{
		AccountSID:          alnum(s, "TWILIO_ACCOUNT_SID"),
		AuthToken:           alnum(s, "TWILIO_AUTH_TOKEN"),
		From:                sender(s, "TWILIO_FROM_NUMBER"),
		MessagingServiceSID: alnum(s, "TWILIO_MESSAGING_SERVICE_SID"),
		APIURL:              strings.TrimRight(s.URL("TWILIO_API_URL"), "/"),
		ListLag:             s.Duration("TWILIO_LIST_LAG", time.Nanosecond),
	}
	given := ""
	for _, n := range []string{"TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM_NUMBER", "TWILIO_MESSAGING_SERVICE_SID"} {
		if s.Set(n) {
			given = n
			break
		}
	}
	if given == "" {
		return cfg
	}
	for _, name := range []string{"TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN"} {
		if !s.Set(name) {
			s.Fail(name, "required when "+given+" is set")
		}
	}
	if !s.Set("TWILIO_FROM_NUMBER") && !s.Set("TWILIO_MESSAGING_SERVICE_SID") {
		s.Fail("TWILIO_FROM_NUMBER", "required (or TWILIO_MESSAGING_SERVICE_SID) when "+given+" is set")
	}
	return cfg
}

// Configured reports whether cfg, from LoadSettings, sends SMS through
// Twilio: the account SID, the auth token and a sender are all set.
func (cfg Config) Configured() bool {
	return cfg.AccountSID != "" && cfg.AuthToken != "" && (cfg.From != "" || cfg.MessagingServiceSID != "")
}

// alnum checks a Twilio identifier: Twilio answers anything but letters
// and digits with error 21222 (invalid credentials) at the first send,
// long after start.
func alnum(s ports.Settings, name string) string {
	v := s.String(name)
	if v != "" && !alphanumeric.MatchString(v) {
		s.Fail(name, "want letters and digits only (Twilio rejects anything else with error 21222); look for stray quotes or white space")
		return ""
	}
	return v
}

func sender(s ports.Settings, name string) string {
	v := s.String(name)
	if v != "" && !e164.MatchString(v) {
		s.Fail(name, "want an E.164 phone number such as +15551234567")
		return ""
	}
	return v
}
