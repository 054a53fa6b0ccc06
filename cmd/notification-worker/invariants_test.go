package main

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/config"
)

// TestOpen_RefusesAConfigWhoseSettingsDoNotCombine: a Config built or
// changed by hand does not skip what LoadWorker checks of how settings
// combine. A SHUTDOWN_TIMEOUT shorter than a send and its two store calls
// would cut a send off after the provider took it; Open refuses it, as a
// configuration error, before building anything.
func TestOpen_RefusesAConfigWhoseSettingsDoNotCombine(t *testing.T) {
	cfg := MustLoadConfig(t, map[string]string{"EVENT_SOURCE": "embedded", "HTTP_ADDR": "off"})
	cfg.ShutdownTimeout = time.Millisecond
	m := &Main{Config: cfg, Stdout: io.Discard}
	defer m.Close()
	err := m.Open(context.Background())
	var cerr *config.Error
	if !errors.As(err, &cerr) || len(cerr.Problems) != 1 || cerr.Problems[0].Var != "SHUTDOWN_TIMEOUT" || cerr.Problems[0].Value != "1ms" {
		t.Fatalf("Open: %v, want a *config.Error naming SHUTDOWN_TIMEOUT=\"1ms\"", err)
	}
}
