package smtp

import (
	"net"
	"net/mail"
	"strings"

	"github.com/harborlight/notification-worker/ports"
)

// Provider is the SMTP relay as the worker offers it on the email channel:
// EMAIL_NOTIFIER=smtp (or console), configured by SMTP_HOST. It sets no
// Timeout: the domain bounds every send with SEND_TIMEOUT.
var Provider = ports.Provider{
	Name:     "smtp",
	Variable: "EMAIL_NOTIFIER",
	AlwaysOn: true,
	Settings: []ports.Setting{
		{Name: "SMTP_HOST", Meaning: "SMTP server host name, without the port; required with `EMAIL_NOTIFIER=smtp`."},
		{Name: "SMTP_PORT", Default: "587", Meaning: "SMTP server port."},
		{Name: "SMTP_USERNAME", Meaning: "SMTP user name. Empty: no authentication."},
		{Name: "SMTP_PASSWORD", Meaning: "SMTP password; needs `SMTP_USERNAME`.", Secret: true},
		{Name: "SMTP_FROM", Meaning: "Sender address, display name allowed (`Harborlight <noreply@example.com>`). Required with `SMTP_HOST`."},
		{Name: "SMTP_TLS_POLICY", Default: "mandatory", Meaning: "`mandatory` (STARTTLS or fail), `opportunistic` (STARTTLS when offered) or `none`."},
	},
	Load: func(s ports.Settings) bool { return LoadSettings(s).Host != "" },
	Open: func(s ports.Settings, _ ports.NotifierEnv) (ports.Notifier, error) {
		return New(LoadSettings(s))
	},
}

// LoadSettings reads the Provider's settings through s into a Config, the
// one place their rules are written: each variable is checked, and a bad
// one reported with s.Fail (and left zero); so is a partial set. Host is
// empty when SMTP is not configured (email goes to the console). A Config
// it returns with no problem reported passes New's checks. It sets no
// Timeout.
//
// With some of SMTP_HOST, SMTP_FROM, SMTP_USERNAME and SMTP_PASSWORD set,
// the operator expects email through SMTP, and silently printing it to
// the console instead would lose every email: a partial set is refused.
// SMTP_PORT and SMTP_TLS_POLICY have defaults, so setting them alone
// configures nothing and is not an error.
func LoadSettings(s ports.Settings) Config {
	cfg := Config{
		Host:     host(s, "SMTP_HOST"),
		Port:     s.Int("SMTP_PORT", 1, 65535),
		Username: s.String("SMTP_USERNAME"),
		Password: s.String("SMTP_PASSWORD"),
		From:     address(s, "SMTP_FROM"),
	}
	cfg.TLSPolicy = s.OneOf("SMTP_TLS_POLICY", "mandatory", "opportunistic", "none")
	if s.Set("SMTP_HOST") {
		if !s.Set("SMTP_FROM") {
			s.Fail("SMTP_FROM", "required when SMTP_HOST is set")
		}
	} else {
		for _, given := range []string{"SMTP_FROM", "SMTP_USERNAME", "SMTP_PASSWORD"} {
			if s.Set(given) {
				s.Fail("SMTP_HOST", "required when "+given+" is set (without it, email goes to the console)")
				break
			}
		}
	}
	// Authentication takes both halves; one alone fails at the first send.
	if s.Set("SMTP_PASSWORD") && !s.Set("SMTP_USERNAME") {
		s.Fail("SMTP_USERNAME", "required when SMTP_PASSWORD is set")
	}
	if s.Set("SMTP_USERNAME") && !s.Set("SMTP_PASSWORD") {
		s.Fail("SMTP_PASSWORD", "required when SMTP_USERNAME is set")
	}
	return cfg
}

// host checks a host name or IP address, the port being SMTP_PORT's
// business. A "host:port" here is a common slip worth naming.
func host(s ports.Settings, name string) string {
	v := s.String(name)
	switch {
	case v == "" || net.ParseIP(v) != nil:
		return v
	case strings.Contains(v, "://"):
		s.Fail(name, "want a host name, not a URL")
	case strings.Contains(v, ":"):
		s.Fail(name, "want a host name without a port; put the port in SMTP_PORT")
	case strings.ContainsAny(v, " /@"):
		s.Fail(name, "want a host name or IP address")
	default:
		return v
	}
	return ""
}

// address checks the sender with net/mail, so a display name
// ("Harborlight <noreply@example.com>") is allowed; the address must have a
// domain, which every Message-ID takes. The value is kept as given.
func address(s ports.Settings, name string) string {
	v := s.String(name)
	if v == "" {
		return ""
	}
	if a, err := mail.ParseAddress(v); err != nil || a.Address[strings.LastIndexByte(a.Address, '@')+1:] == "" {
		s.Fail(name, "want an email address, display name allowed: noreply@example.com or \"Harborlight <noreply@example.com>\"")
		return ""
	}
	return v
}
