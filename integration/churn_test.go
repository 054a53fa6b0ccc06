//go:build integration

package integration_test

import (
	"testing"

	"github.com/harborlight/notification-worker/integration"
)

// TestChurn_GroupKeepsConsuming runs three worker processes on Apache Kafka
// through a minute of SIGKILLs, graceful leaves and joins every few seconds
// (integration.RunChurn): the group must keep committing during it, and
// handle every event published during it soon after. The fast tests run
// the same scenario on the in-process broker.
//
// Not parallel: its bound on a pause between commits must not measure
// other scenarios' load. It kills workers, never the broker, and its topic
// and group are its own, so it takes the shared broker: started here, in
// the serial part of the run, it is ready when the parallel scenarios
// begin.
func TestChurn_GroupKeepsConsuming(t *testing.T) {
	k := integration.SharedKafka(t)
	if !k.Apache {
		t.Logf("broker: WARNING: %s is not Apache Kafka; the scenario runs on it all the same", k.Impl)
	}
	integration.RunChurn(t, k, integration.ChurnOptions{})
}
