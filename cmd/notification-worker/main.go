// Command notification-worker consumes shipment events from Kafka and sends
// each customer notification once, however often the event is replayed.
//
//	notification-worker            run the worker (configured by environment)
//	notification-worker demo       the 2026-04-02 incident, replayed on an embedded broker
//	notification-worker publish    publish events (JSON lines, or -sample N) to KAFKA_BROKERS
//
// main only handles signals and exit codes; the work is in Main.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"syscall"

	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/memlimit"
)

// version is the worker's release, set at link time
// (-ldflags "-X main.version=..."; see the Makefile), "dev" otherwise. The
// start-up line, notification_worker_build_info and the traces carry it.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run returns the process exit code: 0 success, 1 a failure at run time,
// 2 bad usage or configuration.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := "worker"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	cfg, err := config.Load(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	switch cmd {
	case "worker", "run":
		err = runWorker(ctx, cfg, stdout)
	case "demo":
		err = runDemo(ctx, cfg, stdout)
	case "publish":
		err = runPublish(ctx, cfg, args, stdin, stdout)
	case "key":
		err = runKey(cfg, args, stdout)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n%s\n", cmd, usage)
		return 2
	}
	var usageErr *usageError
	var configErr *config.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "%v\n%s\n", err, usage)
		return 2
	case errors.As(err, &configErr):
		// Found once the adapters are chosen or connected: a half-set
		// adapter choice, a Redis that can evict sent records.
		fmt.Fprintln(stderr, err)
		return 2
	}
	fmt.Fprintln(stderr, "notification-worker:", err)
	return 1
}

const usage = `usage:
  notification-worker [worker]        run the worker, configured by environment (see README)
  notification-worker demo            replay the 2026-04-02 incident on an embedded broker
  notification-worker publish [flags] [file]
                                      publish events to KAFKA_BROKERS: JSON lines from file
                                      or stdin, or -sample N generated sample events
  notification-worker key EVENT_ID...  print the Redis keys of each event's notifications`

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func runWorker(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	// Before anything allocates much: the collector should know the
	// container's limit from the first fetch on.
	limit := memlimit.Apply(memlimit.DefaultRatio)
	m := &Main{Config: cfg, Stdout: stdout}
	defer m.Close()
	if err := m.Open(ctx); err != nil {
		return err
	}
	logMemoryLimit(m.logger, limit, cfg.Kafka.MaxBufferedBytes)
	return m.Run(ctx)
}

// logMemoryLimit says which soft memory limit the Go runtime runs with and
// why (memory_limit): the operator's GOMEMLIMIT, a share of the container's
// cgroup limit, or none.
func logMemoryLimit(log *slog.Logger, l memlimit.Limit, buffered int64) {
	attrs := []any{slog.String("source", l.Source), slog.Int64("max_buffered_bytes", buffered)}
	if l.Bytes != math.MaxInt64 {
		attrs = append(attrs, slog.Int64("limit_bytes", l.Bytes))
	}
	if l.Cgroup > 0 {
		attrs = append(attrs, slog.Int64("cgroup_limit_bytes", l.Cgroup))
	}
	if l.Source == memlimit.SourceCgroup {
		attrs = append(attrs, slog.Float64("ratio", memlimit.DefaultRatio))
	}
	log.Info("memory_limit", attrs...)
}
