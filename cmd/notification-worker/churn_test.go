package main

import (
	"testing"

	"github.com/harborlight/notification-worker/integration"
)

// TestChurn_GroupKeepsConsumingOnKfake runs three worker processes on the
// in-process broker through a minute of SIGKILLs, graceful leaves and
// joins every few seconds (integration.RunChurn): the group must keep
// committing during it, every event published during it must reach the
// Twilio double once soon after, and the group must commit to the end.
// The integration suite runs the same scenario on Apache Kafka.
//
// The bound on a pause is RunChurn's: five session timeouts, room for the
// rebalances that kills a few seconds apart chain. The stalls this guards
// against last until the chaos ends and leave records unsent after the
// drain.
func TestChurn_GroupKeepsConsumingOnKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of chaos")
	}
	integration.RunChurn(t, integration.StartKfake(t), integration.ChurnOptions{})
}
