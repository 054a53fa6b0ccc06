//go:build integration

package integration_test

import (
	"os"
	"testing"

	"github.com/harborlight/notification-worker/integration"
)

// TestMain removes the broker the scenarios share (integration.SharedKafka)
// once every test ended, keeping its log when any test failed.
func TestMain(m *testing.M) {
	code := m.Run()
	integration.StopSharedKafka(code != 0)
	os.Exit(code)
}
