// Command kfakebroker runs franz-go's kfake, an in-memory Kafka broker that
// speaks the real protocol, as a standalone process. The integration suite
// runs it as a container when no Kafka image can be pulled: it starts in
// milliseconds and honours consumer groups, commits and rebalances the way
// the worker relies on.
//
// It listens on 127.0.0.1 only (kfake binds loopback), so its container must
// use host networking.
//
// Flags (each also read from the environment variable named in brackets):
//
//	-port        [KFAKE_PORT]        listen port (default 9092)
//	-partitions  [KFAKE_PARTITIONS]  partitions of seeded and auto-created topics (default 4)
//	-topics      [KFAKE_TOPICS]      comma-separated topics to create at start
//	-data-dir    [KFAKE_DATA_DIR]    keep topics and offsets on disk across restarts
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harborlight/notification-worker/adapters/kafka"
)

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	if err := run(os.Args[1:]); err != nil {
		log.Fatalf("kfakebroker: %v", err)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kfakebroker", flag.ContinueOnError)
	port := fs.Int("port", envInt("KFAKE_PORT", 9092), "listen port on 127.0.0.1")
	partitions := fs.Int("partitions", envInt("KFAKE_PARTITIONS", 4), "partitions per topic")
	topics := fs.String("topics", os.Getenv("KFAKE_TOPICS"), "comma-separated topics to create at start")
	dataDir := fs.String("data-dir", os.Getenv("KFAKE_DATA_DIR"), "persist state here across restarts")
	if err := fs.Parse(args); err != nil {
		return err
	}

	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(*port),
		// Without this kfake rejects sessions under 6 s, and tests that
		// exercise rebalances would spend most of their time waiting.
		kfake.GroupMinSessionTimeout(100 * time.Millisecond),
		// The worker's dead letter topic and per-test topics appear on first
		// use, as they would on a broker with auto-creation enabled.
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
	}
	if ts := splitList(*topics); len(ts) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(*partitions), ts...))
	}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}

	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return fmt.Errorf("start cluster: %w", err)
	}
	// kfake alone drops a group member that waits in JoinGroup past its
	// session timeout; Kafka keeps it (docs/kafka-brokers.md).
	stopKeeping, err := kafka.KeepWaitingMembers(c)
	if err != nil {
		c.Close()
		return fmt.Errorf("start cluster: %w", err)
	}
	// The harness waits for this exact line.
	log.Printf("kfake listening on %s", strings.Join(c.ListenAddrs(), ","))

	// As PID 1 in a container, the kernel installs no default handlers: a
	// SIGTERM is ignored unless we catch it, and `docker stop` would wait for
	// its timeout and then SIGKILL, losing the data dir's last writes.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	log.Printf("kfake shutting down")
	stopKeeping()
	c.Close()
	return nil
}

// envInt reads an integer default from the environment. A value that does
// not parse stops the broker: a typo must not silently become port 9092.
func envInt(name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		log.Fatalf("kfakebroker: %s=%q: %v", name, s, err)
	}
	return v
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
