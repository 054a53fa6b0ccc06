package kafka_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/IBM/sarama"
)

// testBrokersEnv names a running Kafka cluster ("host:port,...") for the
// tests that take one; unset, they run on an embedded broker. The
// integration suite sets it to run them on Apache Kafka.
const testBrokersEnv = "KAFKA_TEST_BROKERS"

// testBrokers returns the brokers a test runs on, with topic created with
// the given partition count: the cluster KAFKA_TEST_BROKERS names, or else
// an embedded broker, closed when the test ends. Tests that take it assert
// only what any broker must do; the cluster must accept their 2 s consumer
// sessions (group.min.session.timeout.ms at most 2000).
func testBrokers(tb testing.TB, partitions int32, topic string) []string {
	tb.Helper()
	env := os.Getenv(testBrokersEnv)
	if env == "" {
		return MustStartEmbedded(tb, partitions, topic).Brokers()
	}
	brokers := strings.Split(env, ",")
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_4_0_0
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		tb.Fatalf("%s=%s: %v", testBrokersEnv, env, err)
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		tb.Fatalf("create topic %s on %s: %v", topic, env, err)
	}
	tb.Logf("broker: %s=%s", testBrokersEnv, env)
	return brokers
}
