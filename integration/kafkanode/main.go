// Command kafkanode is the entry program of the notification-worker/kafka
// image: it starts one Apache Kafka node the way Kafka's own scripts do.
// It writes server.properties for a KRaft node that is both broker and
// controller, formats the data directory with Kafka's storage tool when it
// is not formatted yet (so a restarted container keeps its topics and
// offsets), and then replaces itself with the JVM running kafka.Kafka.
//
// Listeners bind 127.0.0.1 only: the container uses host networking and the
// harness hands each node free loopback ports.
//
// One node (no -voters) is a dynamic quorum of one, formatted with
// --standalone. Several nodes share -cluster-id and list each other in
// -voters ("1@127.0.0.1:9093,2@127.0.0.1:9095,..."), a static quorum.
//
// Flags:
//
//	-node-id N             node.id (default 1)
//	-port P                the client listener (PLAINTEXT) on 127.0.0.1
//	-controller-port P     the controller listener on 127.0.0.1
//	-voters LIST           the controller quorum, id@host:port, comma-separated
//	-cluster-id ID         shared by every node of a cluster (default: a new one)
//	-replication N         replication factor of internal and auto-created topics (default 1)
//	-min-isr N             min.insync.replicas (default 1)
//	-partitions N          partitions of auto-created topics (default 4)
//	-heap SIZE             the JVM's -Xmx (default 512m)
//	-set KEY=VALUE         any other server property; repeatable, wins over the above
package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The image's layout, fixed by scripts/build-images.sh.
const (
	javaBin   = "/opt/java/bin/java"
	libs      = "/opt/kafka/libs/*"
	configDir = "/opt/kafka/config"
	dataDir   = "/data/kafka"
)

type setFlags map[string]string

func (s setFlags) String() string { return fmt.Sprint(map[string]string(s)) }

func (s setFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", v)
	}
	s[k] = val
	return nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("kafkanode: ")
	if err := run(os.Args[1:]); err != nil {
		log.Fatal(err)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kafkanode", flag.ContinueOnError)
	nodeID := fs.Int("node-id", 1, "node.id")
	port := fs.Int("port", 9092, "client listener port on 127.0.0.1")
	ctrlPort := fs.Int("controller-port", 9093, "controller listener port on 127.0.0.1")
	voters := fs.String("voters", "", "static controller quorum: id@host:port,...; empty: a quorum of this node alone")
	clusterID := fs.String("cluster-id", "", "cluster id, shared by every node (default: a new one)")
	replication := fs.Int("replication", 1, "replication factor of internal and auto-created topics")
	minISR := fs.Int("min-isr", 1, "min.insync.replicas")
	partitions := fs.Int("partitions", 4, "partitions of auto-created topics")
	heap := fs.String("heap", "512m", "the JVM's maximum heap")
	extra := setFlags{}
	fs.Var(extra, "set", "KEY=VALUE server property (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	props := map[string]string{
		"node.id":                        strconv.Itoa(*nodeID),
		"process.roles":                  "broker,controller",
		"listeners":                      fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", *port, *ctrlPort),
		"advertised.listeners":           fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", *port),
		"controller.listener.names":      "CONTROLLER",
		"inter.broker.listener.name":     "PLAINTEXT",
		"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                       dataDir,
		"num.partitions":                 strconv.Itoa(*partitions),
		"auto.create.topics.enable":      "true",
		"default.replication.factor":     strconv.Itoa(*replication),
		"min.insync.replicas":            strconv.Itoa(*minISR),
		// The internal topics default to 3 replicas, which one node cannot
		// hold: the offsets topic would never be created and no group would
		// get a coordinator.
		"offsets.topic.replication.factor": strconv.Itoa(*replication),
		// Fewer than the default 50: the offsets topic is created when the
		// first group appears, and 50 partitions take seconds to create.
		"offsets.topic.num.partitions":                     "8",
		"transaction.state.log.replication.factor":         strconv.Itoa(*replication),
		"transaction.state.log.min.isr":                    strconv.Itoa(min(*minISR, *replication)),
		"share.coordinator.state.topic.replication.factor": strconv.Itoa(*replication),
		"share.coordinator.state.topic.min.isr":            strconv.Itoa(min(*minISR, *replication)),
		// Kafka delays a new group's first rebalance by 3 s, waiting for more
		// members; every scenario starts a group, so that would be 3 s each.
		"group.initial.rebalance.delay.ms": "0",
	}
	if *voters == "" {
		props["controller.quorum.bootstrap.servers"] = fmt.Sprintf("127.0.0.1:%d", *ctrlPort)
	} else {
		props["controller.quorum.voters"] = *voters
	}
	for k, v := range extra {
		props[k] = v
	}
	cfg := filepath.Join(configDir, "server.properties")
	if err := writeProperties(cfg, props); err != nil {
		return err
	}

	if err := formatOnce(cfg, *clusterID, *voters == "", *nodeID); err != nil {
		return err
	}

	// exec, not a child: the JVM becomes PID 1 and gets docker's SIGTERM
	// (an orderly shutdown) and SIGKILL directly.
	argv := append([]string{javaBin}, jvmArgs(*heap)...)
	argv = append(argv, "kafka.Kafka", cfg)
	log.Printf("starting node %d: client 127.0.0.1:%d, controller 127.0.0.1:%d", *nodeID, *port, *ctrlPort)
	return syscall.Exec(javaBin, argv, os.Environ())
}

// formatOnce formats the data directory with Kafka's storage tool, for
// clusterID (a new one when empty), unless it is formatted already (a
// restarted container keeps its data). A standalone node is a quorum of one.
func formatOnce(cfg, clusterID string, standalone bool, nodeID int) error {
	_, err := os.Stat(filepath.Join(dataDir, "meta.properties"))
	switch {
	case err == nil:
		log.Printf("%s is formatted already; starting on it", dataDir)
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	id := clusterID
	if id == "" {
		if id, err = newClusterID(); err != nil {
			return err
		}
	}
	format := []string{"kafka.tools.StorageTool", "format", "-t", id, "-c", cfg}
	if standalone {
		format = append(format, "--standalone")
	}
	log.Printf("formatting %s for cluster %s (node %d)", dataDir, id, nodeID)
	cmd := exec.Command(javaBin, append(jvmArgs("256m"), format...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("storage format: %w", err)
	}
	return nil
}

// jvmArgs are the JVM options of Kafka's own kafka-run-class.sh, with a
// small heap for tests sharing one machine.
func jvmArgs(heap string) []string {
	return []string{
		"-Xmx" + heap, "-Xms64m",
		"-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
		"-XX:+ExplicitGCInvokesConcurrent", "-XX:-UsePerfData",
		"-Djava.awt.headless=true",
		"-Dlog4j2.configurationFile=" + filepath.Join(configDir, "log4j2.properties"),
		"-cp", libs,
	}
}

func writeProperties(path string, props map[string]string) error {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// newClusterID is what `kafka-storage.sh random-uuid` prints: 16 random
// bytes, base64url without padding, never starting with '-' (the storage
// tool would read it as an option).
func newClusterID() (string, error) {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id, nil
		}
	}
}
