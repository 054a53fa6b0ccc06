// Command kfakebroker runs the embedded broker (internal/devbroker:
// franz-go's kfake, an in-memory Kafka broker that speaks the real
// protocol) as a process of its own, for the benchmarks that measure a
// worker process apart from its broker. It listens on 127.0.0.1 only.
//
// Flags:
//
//	-port        listen port (default 9092)
//	-partitions  partitions of seeded and auto-created topics (default 4)
//	-topics      comma-separated topics to create at start
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
	if err := fs.Parse(args); err != nil {
		return err
	}

	// Topics are comma-separated; spaces around the commas are no part of
	// a name.
	seeded := strings.FieldsFunc(*topics, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	b, err := devbroker.Start(int32(*partitions), seeded, kfake.Ports(*port))
	if err != nil {
		return err
	}
	// The benchmarks wait for this line.
	log.Printf("kfake listening on %s", strings.Join(b.Brokers(), ","))

	// SIGTERM or an interrupt closes the broker.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	log.Printf("kfake shutting down")
	b.Close()
	return nil
}
