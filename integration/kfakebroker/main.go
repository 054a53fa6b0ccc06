// Command kfakebroker runs the embedded broker (internal/devbroker:
// franz-go's kfake, an in-memory Kafka broker that speaks the real
// protocol) as a standalone process. The integration suite
// runs it as a container when no Kafka image can be pulled: it starts in
// milliseconds and honours consumer groups, commits and rebalances the way
// the worker relies on.
//
// It listens on 127.0.0.1 only (kfake binds loopback), so its container must
// use host networking.
//
// Flags:
//
//	-port        listen port (default 9092)
//	-partitions  partitions of seeded and auto-created topics (default 4)
//	-topics      comma-separated topics to create at start
//	-data-dir    keep topics and offsets on disk across restarts
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harborlight/notification-worker/internal/devbroker"
)

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	if err := run(os.Args[1:]); err != nil {
		log.Fatalf("kfakebroker: %v", err)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("kfakebroker", flag.ContinueOnError)
	port := fs.Int("port", 9092, "listen port on 127.0.0.1")
	partitions := fs.Int("partitions", 4, "partitions per topic")
	topics := fs.String("topics", "", "comma-separated topics to create at start")
	dataDir := fs.String("data-dir", "", "persist state here across restarts")
	if err := fs.Parse(args); err != nil {
		return err
	}

	opts := []kfake.Opt{kfake.Ports(*port)}
	if *dataDir != "" {
		opts = append(opts, kfake.DataDir(*dataDir))
	}
	// Topics are comma-separated; spaces around the commas are no part of
	// a name.
	seeded := strings.FieldsFunc(*topics, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	b, err := devbroker.Start(int32(*partitions), seeded, opts...)
	if err != nil {
		return err
	}
	// The harness waits for this exact line.
	log.Printf("kfake listening on %s", strings.Join(b.Brokers(), ","))

	// As PID 1 in a container, the kernel installs no default handlers: a
	// SIGTERM is ignored unless we catch it, and `docker stop` would wait for
	// its timeout and then SIGKILL, losing the data dir's last writes.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	log.Printf("kfake shutting down")
	b.Close()
	return nil
}
