package push

import (
	"crypto/x509"
	"os"
	"strings"

	"github.com/harborlight/notification-worker/ports"
)

// Provider is the gateway's notifier as the worker offers it on the push
// channel: PUSH_NOTIFIER=push (or console), configured by PUSH_API_URL and
// PUSH_API_KEY together, PUSH_CA_FILE optional.
var Provider = ports.Provider{
	Name:     "push",
	Variable: "PUSH_NOTIFIER",
	Settings: []ports.Setting{
		{Name: "PUSH_API_URL", Meaning: "Base `https://` URL of the push gateway; with `PUSH_API_KEY`, push is configured."},
		{Name: "PUSH_API_KEY", Meaning: "The push gateway's API key.", Secret: true},
		{Name: "PUSH_CA_FILE", Meaning: "PEM file of the CA that signed the gateway's certificate. Empty: the system roots."},
	},
	Load: func(s ports.Settings) bool {
		_, configured := load(s)
		return configured
	},
	Open: func(s ports.Settings, env ports.NotifierEnv) (ports.Notifier, error) {
		cfg, _ := load(s)
		cfg.Timeout, cfg.MaxConns = env.SendTimeout, env.MaxConns
		return New(cfg)
	},
}

// load reads the settings into a Config, reporting each bad one, and
// whether they configure the gateway.
func load(s ports.Settings) (Config, bool) {
	cfg := Config{URL: s.URL("PUSH_API_URL"), APIKey: s.String("PUSH_API_KEY")}
	if cfg.URL != "" && !strings.HasPrefix(cfg.URL, "https://") {
		s.Fail("PUSH_API_URL", "want an https:// URL: the API key travels with every push")
		cfg.URL = ""
	}
	switch url, key := s.Set("PUSH_API_URL"), s.Set("PUSH_API_KEY"); {
	case url && !key:
		s.Fail("PUSH_API_KEY", "required when PUSH_API_URL is set")
	case key && !url:
		s.Fail("PUSH_API_URL", "required when PUSH_API_KEY is set")
	}
	if f := s.String("PUSH_CA_FILE"); f != "" {
		pem, err := os.ReadFile(f)
		pool := x509.NewCertPool()
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			s.Fail("PUSH_CA_FILE", "want a readable PEM file of the gateway's CA")
		} else {
			cfg.RootCAs = pool
		}
	}
	return cfg, cfg.URL != "" && cfg.APIKey != ""
}
