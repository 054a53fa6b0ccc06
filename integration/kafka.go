package integration

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/internal/devbroker"
	"github.com/harborlight/notification-worker/internal/wait"
)

// DefaultPartitions is the partition count of topics the broker creates on
// first use, and a sensible count for CreateTopic: enough for a rebalance to
// split work between two workers.
const DefaultPartitions = 4

// KafkaVersion is the Apache Kafka release the suite runs, the version that
// integration/pom.xml resolves; KafkaImage is the local image
// scripts/build-images.sh builds from it.
const (
	KafkaVersion = "4.4.0"
	KafkaImage   = "notification-worker/kafka:" + KafkaVersion
)

// Kafka is a Kafka cluster for one test: Apache Kafka in KRaft mode (one
// node, or several for StartKafkaCluster), or kfake (franz-go's in-memory
// broker, same protocol) where the Apache Kafka image cannot be had. Topics
// are created on first use with DefaultPartitions.
type Kafka struct {
	// Brokers are "127.0.0.1:port" seed addresses.
	Brokers []string
	// Impl says what runs: "Apache Kafka 4.4.0 (image)" or "kfake
	// (in-process)".
	Impl string
	// Apache is true when Impl is Apache Kafka, false for kfake.
	Apache bool

	// replication is the replication factor CreateTopic asks for.
	replication int16
	// settings are server properties every Apache Kafka node gets.
	settings map[string]string
	// nodes are the Apache Kafka containers, nodes[i] with node.id i+1.
	nodes  []*kafkaNode
	client *kgo.Client
	admin  *kadm.Client
	// trace records the group requests an in-process kfake received; nil
	// on other brokers.
	trace *groupTrace
}

// kafkaNode is one Apache Kafka container: a broker and a controller.
type kafkaNode struct {
	id   int32
	addr string
	c    testcontainers.Container
}

// StartKafka starts a one-node broker and waits until it answers. The image
// is KAFKA_IMAGE, by default KafkaImage (Apache Kafka, built by
// scripts/build-images.sh kafka), run through the entry program of
// integration/kafkanode. When that image is missing it falls back to kfake
// in the test process (devbroker), and says so loudly: such a run proves
// nothing about a real broker. KAFKA_IMAGE=kfake asks for kfake. Every
// test logs the broker it ran on ("broker: ...").
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	return StartKafkaWithSettings(t, nil)
}

// StartKafkaWithSettings is StartKafka with server properties that differ
// from the harness's (see integration/kafkanode), such as
// group.min.session.timeout.ms for clients with short sessions. kfake,
// where the harness falls back to it, ignores them.
func StartKafkaWithSettings(t testing.TB, settings map[string]string) *Kafka {
	t.Helper()
	k := &Kafka{replication: 1, settings: settings}
	img, fallback := kafkaImage(t)
	if img == "" {
		k.startKfake(t)
	} else {
		k.startApache(t, img, 1)
	}
	k.connect(t)
	if fallback {
		t.Logf("broker: %s -- WARNING: FALLBACK, NOT Apache Kafka: %s is missing (run scripts/build-images.sh kafka)", k.Impl, KafkaImage)
	} else {
		t.Logf("broker: %s on %s", k.Impl, strings.Join(k.Brokers, ","))
	}
	return k
}

// StartKfake starts kfake, franz-go's in-memory broker, in the test
// process, whatever KAFKA_IMAGE says: for the scenarios that run on both
// brokers and need no Docker engine on this one.
func StartKfake(t testing.TB) *Kafka {
	t.Helper()
	k := &Kafka{replication: 1}
	k.startKfake(t)
	k.connect(t)
	t.Logf("broker: %s on %s", k.Impl, strings.Join(k.Brokers, ","))
	return k
}

// StartKafkaCluster starts n Apache Kafka nodes, each a broker and a voter
// of one controller quorum, and waits until every broker has registered.
// Auto-created and CreateTopic topics are replicated to all n with
// min.insync.replicas n-1 (2 for 3 nodes). The test is skipped, loudly, when
// only kfake can be had: kfake has no replicas to fail over.
func StartKafkaCluster(t testing.TB, n int) *Kafka {
	t.Helper()
	img, _ := kafkaImage(t)
	if img == "" {
		t.Skipf("broker: WARNING: SKIPPED, a %d-node cluster needs the Apache Kafka image %s (run scripts/build-images.sh kafka); have kfake only", n, KafkaImage)
	}
	k := &Kafka{replication: int16(n)}
	k.startApache(t, img, n)
	k.connect(t)
	wait.For(t, startTimeout, fmt.Sprintf("kafka cluster: %d brokers registered", n), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		bs, err := k.admin.ListBrokers(ctx)
		return err == nil && len(bs) == n, fmt.Sprintf("%d registered (%v)", len(bs), err)
	})
	t.Logf("broker: %s on %s", k.Impl, strings.Join(k.Brokers, ","))
	return k
}

// kafkaImage picks the Apache Kafka image: KAFKA_IMAGE if set, else
// KafkaImage; "" is kfake in the test process (KAFKA_IMAGE=kfake, or
// KafkaImage missing: fallback).
func kafkaImage(t testing.TB) (img string, fallback bool) {
	t.Helper()
	switch v := os.Getenv("KAFKA_IMAGE"); {
	case v == "kfake":
		return "", false
	case v != "":
		return v, false
	case imagePresent(t, KafkaImage):
		return KafkaImage, false
	}
	return "", true
}

// connect opens the harness's own client and waits until the cluster
// answers.
func (k *Kafka) connect(t testing.TB) {
	t.Helper()
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

	wait.For(t, startTimeout, "kafka "+k.Impl+" ready", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	})
}

// startKfake starts kfake in the test process (devbroker), tracing its
// group requests, closed when t ends.
func (k *Kafka) startKfake(t testing.TB) {
	t.Helper()
	b, err := devbroker.Start(DefaultPartitions, nil)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(b.Close)
	k.Brokers, k.Impl, k.trace = b.Brokers(), "kfake (in-process)", &groupTrace{began: time.Now()}
	b.TraceGroups(k.trace.add)
}

// apacheStarts lets one Apache Kafka cluster of this process start at a
// time (see startApache).
var apacheStarts sync.Mutex

// startApache runs n Apache Kafka nodes of img, each on two free loopback
// ports (clients, controller), all voters of one static quorum when n > 1.
// The settings that differ from Kafka's defaults are in
// integration/kafkanode and docs/kafka-brokers.md.
//
// One cluster starts at a time: a node's start is two JVM starts and tens
// of CPU-seconds, and parallel scenarios starting clusters at once on two
// cores took each other past startTimeout (a three-node cluster was still
// electing a controller after 3 minutes). The wait for the turn does not
// count against startTimeout.
func (k *Kafka) startApache(t testing.TB, img string, n int) {
	t.Helper()
	apacheStarts.Lock()
	defer apacheStarts.Unlock()
	type ports struct{ client, ctrl string }
	ps := make([]ports, n)
	var voters []string
	for i := range ps {
		ps[i] = ports{strconv.Itoa(FreePort(t)), strconv.Itoa(FreePort(t))}
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%s", i+1, ps[i].ctrl))
	}
	clusterID := newClusterID()
	minISR := max(1, n-1)
	for i, p := range ps {
		cmd := []string{
			"-node-id", strconv.Itoa(i + 1), "-port", p.client, "-controller-port", p.ctrl,
			"-cluster-id", clusterID, "-replication", strconv.Itoa(n), "-min-isr", strconv.Itoa(minISR),
			"-partitions", strconv.Itoa(DefaultPartitions),
		}
		if n > 1 {
			cmd = append(cmd, "-voters", strings.Join(voters, ","))
		}
		for key, v := range k.settings {
			cmd = append(cmd, "-set", key+"="+v)
		}
		c := startContainer(t, testcontainers.ContainerRequest{
			Image:        img,
			Cmd:          cmd,
			ExposedPorts: []string{p.client + "/tcp"},
		})
		keepLogsOnFailure(t, c, fmt.Sprintf("kafka-%d", i+1))
		node := &kafkaNode{id: int32(i + 1), addr: "127.0.0.1:" + p.client, c: c}
		k.nodes = append(k.nodes, node)
		k.Brokers = append(k.Brokers, node.addr)
	}
	// The nodes start together, so a quorum can form while each waits.
	for _, node := range k.nodes {
		if err := waitUntil(context.Background(), node.c, startTimeout, dialCheck(node.addr)); err != nil {
			t.Fatalf("kafka %s node %d: %v", img, node.id, err)
		}
	}
	k.Apache = true
	k.Impl = fmt.Sprintf("Apache Kafka %s (%s, KRaft, %d combined broker+controller node(s))", KafkaVersion, img, n)
	if v := os.Getenv("KAFKA_IMAGE"); v != "" && v != KafkaImage {
		k.Impl = fmt.Sprintf("Apache Kafka from KAFKA_IMAGE=%s (KRaft, %d node(s))", img, n)
	}
}

// newClusterID is a KRaft cluster id: 16 random bytes, base64url without
// padding, never starting with '-' (the storage tool would take it for a flag).
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// KillNode sends SIGKILL to the node with node.id id (1-based) and returns
// once it is dead: no orderly shutdown, no leadership handed over.
func (k *Kafka) KillNode(ctx context.Context, id int32) error {
	return k.onNode(id, "kill", func(c testcontainers.Container) error { return killContainer(ctx, c) })
}

// StartNode starts a killed or stopped node again on its data (its topics,
// offsets and quorum state) and ports, and waits until it accepts clients.
func (k *Kafka) StartNode(ctx context.Context, id int32) error {
	return k.onNode(id, "start", func(c testcontainers.Container) error {
		if err := c.Start(ctx); err != nil {
			return err
		}
		return waitUntil(ctx, c, startTimeout, dialCheck(k.nodes[id-1].addr))
	})
}

// PauseNode stops the node with node.id id where it stands: its JVM (the
// container's only process, PID 1) gets SIGSTOP, its connections stay
// open, and it answers nothing, like a broker stalled by a long pause of
// its JVM or its disk. UnpauseNode lets it go on. A signal, not the cgroup
// freezer of docker pause: the freezer is not there, or fails to freeze,
// on some Docker hosts, and one process stopped is the same stall.
func (k *Kafka) PauseNode(ctx context.Context, id int32) error {
	return k.onNode(id, "pause", func(c testcontainers.Container) error { return signalContainer(ctx, c, "SIGSTOP") })
}

// UnpauseNode lets a node stopped by PauseNode go on (SIGCONT).
func (k *Kafka) UnpauseNode(ctx context.Context, id int32) error {
	return k.onNode(id, "unpause", func(c testcontainers.Container) error { return signalContainer(ctx, c, "SIGCONT") })
}

// onNode runs op on the container of the node with node.id id; what names
// op in its error.
func (k *Kafka) onNode(id int32, what string, op func(c testcontainers.Container) error) error {
	if id < 1 || int(id) > len(k.nodes) {
		return fmt.Errorf("kafka node %d: the cluster has %d Apache Kafka node(s)", id, len(k.nodes))
	}
	if err := op(k.nodes[id-1].c); err != nil {
		return fmt.Errorf("%s kafka node %d: %w", what, id, err)
	}
	return nil
}

// Leader returns the node id leading topic's partition, and its in-sync
// replicas, as the cluster's metadata says now.
func (k *Kafka) Leader(ctx context.Context, topic string, partition int32) (leader int32, isr []int32, err error) {
	md, err := k.admin.Metadata(ctx, topic)
	if err != nil {
		return 0, nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return 0, nil, fmt.Errorf("metadata of %s: %v", topic, td.Err)
	}
	p, ok := td.Partitions[partition]
	if !ok || p.Err != nil {
		return 0, nil, fmt.Errorf("metadata of %s/%d: %v", topic, partition, p.Err)
	}
	return p.Leader, p.ISR, nil
}

// keepLogsOnFailure saves c's whole output to a file when the test failed,
// before the container is removed, and logs its path and last lines. The
// folder is $NW_TEST_LOGS, or notification-worker-test-logs in the
// system's temporary folder.
func keepLogsOnFailure(t testing.TB, c testcontainers.Container, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := containerOutput(ctx, c.GetContainerID())
		if err != nil {
			t.Logf("%s: no logs: %v", name, err)
			return
		}
		file := keepLog(t, name, out)
		t.Logf("%s: whole log in %s; last lines:\n  %s", name, file, strings.Join(lastLines(splitLines(out), 30), "\n  "))
	})
}

// keepLog writes out to a file named after t and name in $NW_TEST_LOGS, or
// notification-worker-test-logs in the system's temporary folder, and
// returns the file's path, or "(not kept)" after logging why to t.
func keepLog(t testing.TB, name string, out []byte) string {
	dir := os.Getenv("NW_TEST_LOGS")
	dir = cmp.Or(dir, filepath.Join(os.TempDir(), "notification-worker-test-logs"))
	file := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-"+name+".log")
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(file, out, 0o644)
	}
	if err != nil {
		t.Logf("%s: could not keep its log: %v", name, err)
		return "(not kept)"
	}
	return file
}

// DescribeGroup returns group's state, protocol and members with the
// partitions of topic assigned to each, one line per member, for a test's
// failure report.
func (k *Kafka) DescribeGroup(ctx context.Context, group string) (string, error) {
	described, err := k.admin.DescribeGroups(ctx, group)
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", group, err)
	}
	g, ok := described[group]
	if !ok {
		return "", fmt.Errorf("describe %s: not in the answer", group)
	}
	if g.Err != nil {
		return "", fmt.Errorf("describe %s: %w", group, g.Err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "group %s: state %s, protocol %s, %d members", group, g.State, g.Protocol, len(g.Members))
	for _, m := range g.Members {
		fmt.Fprintf(&b, "\n  %s (%s, %s)", m.MemberID, m.ClientID, m.ClientHost)
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				fmt.Fprintf(&b, " %s%v", tp.Topic, tp.Partitions)
			}
		}
	}
	return b.String(), nil
}

// Env is the worker's environment for this broker, consuming topic in group.
func (k *Kafka) Env(topic, group string) map[string]string {
	return map[string]string{
		"KAFKA_BROKERS":  strings.Join(k.Brokers, ","),
		"KAFKA_TOPIC":    topic,
		"KAFKA_GROUP_ID": group,
	}
}

// CreateTopic creates topic with the given number of partitions, replicated
// to every node of the cluster. Create the topic before starting a worker
// when the partition count matters.
func (k *Kafka) CreateTopic(ctx context.Context, topic string, partitions int32) error {
	resp, err := k.admin.CreateTopic(ctx, partitions, k.replication, nil, topic)
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
