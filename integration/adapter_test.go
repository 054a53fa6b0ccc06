//go:build integration

package integration_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
)

// adapterTestsOnABroker are the adapters/kafka tests that take a broker
// address (KAFKA_TEST_BROKERS): the rebalance and commit tests, which
// assert what any broker must give the consumer.
const adapterTestsOnABroker = "^(TestConsumer_RebalanceLosesNothingSendsNothingTwice|TestConsumer_PerKeyOrder|" +
	"TestConsumer_MaxInFlightOneIsSequential|TestConsumer_RebalanceDuringConcurrentHandling|TestConsumer_CancelCommitsExactlyHandled|" +
	"TestConsumer_StaticMemberRestartKeepsPartitions|TestConsumer_CooperativeRebalanceKeepsHandlersRunning|" +
	"TestConsumer_MigrationFromRangeMixedGroups|TestConsumer_LagGrowsWhileHeldOnUnavailable|TestConsumer_RollingDeploy|" +
	"TestBroker_KeepsAMemberWaitingInJoinGroup|TestBroker_RemovesASilentMemberDuringARebalance|TestBroker_RemovesANewMemberThatDiedInItsFirstJoinGroup|" +
	"TestBroker_KeepsAMemberWaitingInSyncGroup|TestBroker_RemovesAMemberThatDiedInSyncGroup)$"

// adapterTestsOnABrokerCount is how many tests adapterTestsOnABroker names.
const adapterTestsOnABrokerCount = 15

// TestKafkaAdapterOnApacheKafka runs the kafka adapter's rebalance and
// commit tests, which otherwise run on kfake, on Apache Kafka. Their
// consumers use 2 s sessions, below Kafka's default minimum of 6 s, so this
// broker allows 1 s (a broker with the default refuses them and the
// consumers never join). Not parallel: the tests wait on deadlines of tens
// of seconds, and a child `go test -race` beside the suite's parallel
// scenarios on 2 CPUs missed them once in four runs.
func TestKafkaAdapterOnApacheKafka(t *testing.T) {
	k := integration.StartKafkaWithSettings(t, map[string]string{"group.min.session.timeout.ms": "1000"})
	if !k.Apache {
		t.Skipf("broker: WARNING: SKIPPED, these tests run on kfake already; Apache Kafka's image is missing (run scripts/build-images.sh kafka)")
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-race", "-count=1", "-v", "-run", adapterTestsOnABroker, "./adapters/kafka/")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd.Env = append(os.Environ(), "KAFKA_TEST_BROKERS="+strings.Join(k.Brokers, ","))
	out, err := cmd.CombinedOutput()
	var results []string
	for _, line := range strings.Split(string(out), "\n") {
		// The test lines, and the tables some tests print (rolling deploy).
		if strings.Contains(line, "--- ") || strings.HasPrefix(line, "ok") || strings.HasPrefix(line, "FAIL") ||
			strings.HasPrefix(strings.TrimSpace(line), "|") {
			results = append(results, line)
		}
	}
	if err != nil {
		t.Fatalf("go test ./adapters/kafka on %s: %v\n%s", k.Impl, err, out)
	}
	passed := strings.Count(string(out), "--- PASS: TestConsumer_") + strings.Count(string(out), "--- PASS: TestBroker_")
	if passed < adapterTestsOnABrokerCount {
		t.Fatalf("%d of %d adapter tests passed on %s:\n%s", passed, adapterTestsOnABrokerCount, k.Impl, out)
	}
	t.Logf("adapters/kafka on %s:\n%s", k.Impl, strings.Join(results, "\n"))
}
