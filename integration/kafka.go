package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultPartitions is the partition count of topics the broker creates on
// first use, and a sensible count for CreateTopic: enough for a rebalance to
// split work between two workers.
const DefaultPartitions = 4

// Kafka is a single-broker Kafka cluster: Apache Kafka in KRaft mode, or
// kfake (franz-go's in-memory broker, same protocol) where that image cannot
// be had. Topics are created on first use with DefaultPartitions.
type Kafka struct {
	// Brokers are "127.0.0.1:port" seed addresses.
	Brokers []string
	// Impl says what runs: the image name, or "kfake (in-process)".
	Impl string

	client *kgo.Client
	admin  *kadm.Client
}

// StartKafka starts a broker and waits until it answers. The image is
// KAFKA_IMAGE (default apache/kafka); when that is not present locally it
// falls back to the local notification-worker/kfake:dev container, and when
// that is missing too, to kfake in the test process. The test log says
// which.
//
// An image whose name contains "kfake" is run as the kfake broker; any
// other as Apache Kafka (KRaft, one combined broker and controller).
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	k := &Kafka{}
	img, ok := pickImage(t, "KAFKA_IMAGE", "apache/kafka", "notification-worker/kfake:dev")
	switch {
	case !ok:
		t.Logf("KAFKA_IMAGE: neither apache/kafka nor notification-worker/kfake:dev is present locally; running kfake in-process")
		k.Brokers, k.Impl = startKfakeInProcess(t), "kfake (in-process)"
	case strings.Contains(img, "kfake"):
		k.Brokers, k.Impl = startKfakeContainer(t, img), img
	default:
		k.Brokers, k.Impl = startApacheKafka(t, img), img
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers...),
		// Publishing to a topic no test created yet creates it, as the
		// worker's dead letter topic is created on first use.
		kgo.AllowAutoTopicCreation(),
	)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	k.client, k.admin = cl, kadm.NewClient(cl)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		err := cl.Ping(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("kafka %s not ready after %v: %v", k.Impl, startTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return k
}

func startKfakeInProcess(t testing.TB) []string {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		// Without this, groups need sessions of 6 s or more and every
		// rebalance test waits that long.
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(DefaultPartitions),
	)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func startKfakeContainer(t testing.TB, img string) []string {
	t.Helper()
	port := strconv.Itoa(FreePort(t))
	addr := "127.0.0.1:" + port
	c := startContainer(t, testcontainers.ContainerRequest{
		Image:        img,
		Cmd:          []string{"-port", port, "-partitions", strconv.Itoa(DefaultPartitions), "-data-dir", "/data"},
		ExposedPorts: []string{port + "/tcp"},
	})
	if err := waitUntil(context.Background(), c, startTimeout, dialCheck(addr)); err != nil {
		t.Fatalf("kafka %s: %v", img, err)
	}
	return []string{addr}
}

// startApacheKafka runs the official image as one KRaft node on two loopback
// ports. The settings are the image's documented single-node ones, with
// replication factors of 1 and no initial rebalance delay (tests would
// otherwise wait 3 s for every group to form).
func startApacheKafka(t testing.TB, img string) []string {
	t.Helper()
	port, ctrl := strconv.Itoa(FreePort(t)), strconv.Itoa(FreePort(t))
	addr := "127.0.0.1:" + port
	c := startContainer(t, testcontainers.ContainerRequest{
		Image: img,
		Env: map[string]string{
			"KAFKA_NODE_ID":                                          "1",
			"KAFKA_PROCESS_ROLES":                                    "broker,controller",
			"KAFKA_LISTENERS":                                        "PLAINTEXT://" + addr + ",CONTROLLER://127.0.0.1:" + ctrl,
			"KAFKA_ADVERTISED_LISTENERS":                             "PLAINTEXT://" + addr,
			"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
			"KAFKA_INTER_BROKER_LISTENER_NAME":                       "PLAINTEXT",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                         "1@127.0.0.1:" + ctrl,
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
			"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
			"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                     "100",
			"KAFKA_NUM_PARTITIONS":                                   strconv.Itoa(DefaultPartitions),
			"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                        "true",
			"KAFKA_LOG_DIRS":                                         "/tmp/kraft-combined-logs",
		},
		ExposedPorts: []string{port + "/tcp"},
	})
	if err := waitUntil(context.Background(), c, startTimeout, dialCheck(addr)); err != nil {
		t.Fatalf("kafka %s: %v", img, err)
	}
	return []string{addr}
}

// Env is the worker's environment for this broker, consuming topic in group.
func (k *Kafka) Env(topic, group string) map[string]string {
	return map[string]string{
		"KAFKA_BROKERS":  strings.Join(k.Brokers, ","),
		"KAFKA_TOPIC":    topic,
		"KAFKA_GROUP_ID": group,
	}
}

// CreateTopic creates topic with the given number of partitions. Create the
// topic before starting a worker when the partition count matters.
func (k *Kafka) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	resp, err := k.admin.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	if resp.Err != nil {
		return fmt.Errorf("create topic %s: %w", topic, resp.Err)
	}
	return nil
}

// Publish produces one record and waits for the broker's acknowledgement.
// The key picks the partition (the worker keys by shipment_id).
func (k *Kafka) Publish(ctx context.Context, topic, key string, value []byte) error {
	return k.PublishRecords(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value})
}

// PublishRecords produces records (each names its topic) and waits for all
// acknowledgements.
func (k *Kafka) PublishRecords(ctx context.Context, recs ...*kgo.Record) error {
	if err := k.client.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// ReadTopic reads topic from the start, outside any consumer group, until it
// has at least n records or ctx is done; it returns what it read either way,
// with an error in the second case. Records of one partition keep their
// order; partitions interleave.
func (k *Kafka) ReadTopic(ctx context.Context, topic string, n int) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(k.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return recs, fmt.Errorf("read %s: got %d of %d records: %w", topic, len(recs), n, ctx.Err())
		}
		// Errors for a topic that does not exist yet are retried by the
		// client; only a fatal one ends the read.
		for _, fe := range fs.Errors() {
			if errors.Is(fe.Err, kgo.ErrClientClosed) {
				return recs, fe.Err
			}
		}
		recs = append(recs, fs.Records()...)
	}
	return recs, nil
}

// ReadDLQ reads the dead letter topic of topic under the worker's default
// name, topic + ".dlq"; see ReadTopic.
func (k *Kafka) ReadDLQ(ctx context.Context, topic string, n int) ([]*kgo.Record, error) {
	return k.ReadTopic(ctx, topic+".dlq", n)
}

// CommittedOffsets returns group's committed offsets for topic by
// partition: the offset of the next record the group will read. Partitions
// with no commit are absent.
func (k *Kafka) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resps, err := k.admin.FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of %s: %w", group, err)
	}
	out := map[int32]int64{}
	for p, r := range resps[topic] {
		if r.Err != nil {
			return nil, fmt.Errorf("fetch offsets of %s: %s/%d: %w", group, topic, p, r.Err)
		}
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out, nil
}

// EndOffsets returns topic's end offset by partition (one past the last
// record): a group that handled everything has committed exactly these.
func (k *Kafka) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := k.admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for p, o := range listed[topic] {
		if o.Err != nil {
			return nil, fmt.Errorf("end offsets of %s/%d: %w", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out, nil
}
