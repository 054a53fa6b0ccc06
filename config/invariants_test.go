package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/config"
)

func TestConfig_Check(t *testing.T) {
	c := MustLoad(t, nil)
	if err := c.Check(); err != nil {
		t.Fatalf("Check of a loaded Config: %v", err)
	}
	c.SendTimeout = time.Hour
	var cerr *config.Error
	if err := c.Check(); !errors.As(err, &cerr) {
		t.Fatalf("Check: %v, want a *config.Error", err)
	}
	named := map[string]string{}
	for _, p := range cerr.Problems {
		named[p.Var] = p.Value
	}
	if named["IDEMPOTENCY_CLAIM_TTL"] == "" || named["SHUTDOWN_TIMEOUT"] != "30s" || len(named) != 2 {
		t.Fatalf("problems %v, want IDEMPOTENCY_CLAIM_TTL and SHUTDOWN_TIMEOUT=30s", cerr.Problems)
	}
}
