// Command notification-worker consumes shipment events from Kafka and sends
// each customer notification once, however often the event is replayed.
// Its commands are listed in usage. main only handles signals and exit
// codes; the work is in Main.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"syscall"

	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/buildinfo"
	"github.com/harborlight/notification-worker/internal/memlimit"
)

// version is the worker's release, set at link time
// (-ldflags "-X main.version=..."; see the Makefile). Unset, release takes
// what the Go toolchain stamped.
var version string

// release is the worker's release (buildinfo.Read): the start-up line,
// notification_worker_build_info, the traces and the version command carry
// it.
func release() string { return buildinfo.Read(version).Version }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run returns the process exit code (exitCodes). Each command reads the
// configuration it needs itself, after its arguments, so help and version
// need none.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	name := "worker"
	if len(args) > 0 {
		name, args = args[0], args[1:]
	}
	if name == "help" || name == "-h" || name == "--help" {
		fmt.Fprintln(stdout, usage)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "unknown command %q\n%s\n", name, usage)
		return exitConfig
	}
	err := cmd(ctx, cmdIO{stdin: stdin, stdout: stdout, stderr: stderr, lookup: os.LookupEnv, environ: os.Environ}, args)
	var usageErr *usageError
	var configErr *config.Error
	var startErr *startError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "%v\n%s\n", err, usage)
		return exitConfig
	case errors.As(err, &configErr):
		reportConfigError(stderr, configErr)
		return exitConfig
	case errors.As(err, &startErr):
		startErr.report(stderr)
		return startErr.exitCode()
	case errors.Is(err, errNoEmbeddedBroker):
		fmt.Fprintf(stderr, "notification-worker %s: %v\n", name, err)
		return exitConfig
	}
	fmt.Fprintln(stderr, "notification-worker:", err)
	return exitFailure
}

// A command runs one subcommand on the arguments after its name. It reads
// the configuration it needs through io.lookup. It returns flag.ErrHelp once
// it has printed its help (exit 0), a *usageError for bad arguments or a
// *config.Error for a bad environment (exit 2), a *startError for a worker
// that could not start (exit 3 or 1), any other error for a failure at run
// time (exit 1).
type command func(ctx context.Context, io cmdIO, args []string) error

// cmdIO is what a command reads and writes besides its arguments.
type cmdIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookup         func(string) (string, bool) // os.LookupEnv
	environ        func() []string             // os.Environ
}

// commands are the subcommands by name; "worker" is also what runs with
// none. help, -h and --help are run's own.
var commands = map[string]command{
	"worker":  runWorkerCommand,
	"run":     runWorkerCommand,
	"version": runVersion,
	"demo":    runDemoCommand,
	"publish": runPublish,
	"key":     runKey,
	"redrive": runRedrive,
}

const usage = `usage:
  notification-worker [worker]        run the worker, configured by environment (see README)
  notification-worker version         print the release, VCS revision and Go version
  notification-worker demo            replay the 2026-04-02 incident on an embedded broker
                                      (a development build's: make run)
  notification-worker publish [flags] [file]
                                      publish events to KAFKA_BROKERS: JSON lines from file
                                      or stdin, or -sample N generated sample events
  notification-worker redrive [flags] put dead letters back on the topic they came from,
                                      with key, headers and original timestamp
  notification-worker key [--redis] EVENT_ID...
                                      print the Redis keys of each event's notifications;
                                      with --redis, read them and decode what they hold
  notification-worker help            this text; "COMMAND -h" for a command's flags`

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// reportConfigError writes err to w as one line: a JSON log line
// (msg config_invalid, with each problem) unless LOG_FORMAT is text, so a
// log pipeline reads a refusal to start as it reads every other line.
func reportConfigError(w io.Writer, err *config.Error) {
	if err.LogFormat == "text" {
		fmt.Fprintln(w, err)
		return
	}
	slog.New(slog.NewJSONHandler(w, nil)).Error("config_invalid",
		slog.String("error", err.Error()), slog.Any("problems", err.Problems))
}

// runVersion prints what notification_worker_build_info carries.
func runVersion(_ context.Context, cio cmdIO, args []string) error {
	if err := noArguments("version", "version\n\nPrints the release, the VCS revision and the Go version.", args, cio.stdout); err != nil {
		return err
	}
	bi := buildinfo.Read(version)
	fmt.Fprintf(cio.stdout, "notification-worker %s\nrevision %s\n%s\n", bi.Version, bi.Revision, bi.GoVersion)
	return nil
}

// runWorkerCommand runs the worker on the environment, checked whole
// first, its names included (config.LoadWorkerEnviron).
func runWorkerCommand(ctx context.Context, cio cmdIO, args []string) error {
	if err := noArguments("worker", "worker (the command run when none is named)\n\nRuns the worker, configured by environment only (the README's configuration table).", args, cio.stdout); err != nil {
		return err
	}
	cfg, err := config.LoadWorkerEnviron(cio.environ())
	if err != nil {
		return err
	}
	return runWorker(ctx, cfg, cio.stdout)
}

// runDemoCommand runs the demo, which needs no broker nor store: it
// checks the variables it reads (config.Load), not a worker's whole set.
func runDemoCommand(ctx context.Context, cio cmdIO, args []string) error {
	if err := noArguments("demo", "demo\n\nReplays the 2026-04-02 incident on an embedded broker, with the in-memory store and console notifiers.\nOnly a development build (go build -tags devbroker; make run) has the embedded broker.", args, cio.stdout); err != nil {
		return err
	}
	cfg, err := config.Load(cio.lookup)
	if err != nil {
		return err
	}
	return runDemo(ctx, cfg, cio.stdout)
}

func runWorker(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	// Before anything allocates much: the collector should know the
	// container's limit from the first fetch on.
	limit := memlimit.Apply(memlimit.DefaultRatio)
	m := &Main{Config: cfg, Stdout: stdout}
	defer m.Close()
	err := m.Open(ctx)
	if err == nil {
		logMemoryLimit(m.logger, limit, cfg.MaxBufferedBytes)
		err = m.Run(ctx)
	}
	return startFailure(ctx, err, cfg.LogFormat)
}

// noArguments parses args of a command that takes none but -h, whose help
// is synopsis.
func noArguments(name, synopsis string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	if err := parseFlags(fs, synopsis, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("%s: takes no arguments (got %q)", name, fs.Args())}
	}
	return nil
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
