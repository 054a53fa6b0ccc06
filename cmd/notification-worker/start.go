package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/policy"
	"github.com/harborlight/notification-worker/ports"
)

// The process's exit codes (run returns them; the README lists exitCodes).
const (
	exitOK          = 0
	exitFailure     = 1
	exitConfig      = 2
	exitUnreachable = 3
)

var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "A clean shutdown (SIGTERM), or a command that did its work; also a worker stopped while it was starting."},
	{exitFailure, "A command failed at run time; or the worker failed to start for a reason that is neither its configuration nor a dependency (one `worker_start_failed` line without `dependency`)."},
	{exitConfig, "Bad usage or configuration: every bad variable, a misspelt setting among them, named in one line (`config_invalid`), and what a dependency refuses as configured (an evicting Redis, `IDEMPOTENCY_WAIT_AOF` on a Redis without `WAITAOF`); and `EVENT_SOURCE=embedded` or `demo` in a binary without the embedded broker (every build but `make run`'s `-tags devbroker`), in one line."},
	{exitUnreachable, "The worker could not reach a dependency (Redis or Kafka) within `STARTUP_TIMEOUT`: one `worker_start_failed` line names the `dependency`, the `error` of its last attempt and what to `check`."},
}

// dependencies are what the worker must reach at start, and what an
// operator should check when it cannot.
var dependencies = map[string]string{
	"redis": "REDIS_URL (host, port, user and password, rediss:// for TLS) or its Sentinels, that Redis runs, and that the network (a NetworkPolicy, a firewall) lets the worker reach it",
	"kafka": "KAFKA_BROKERS, KAFKA_TLS and the KAFKA_SASL_* settings, that the brokers run, and that the network (a NetworkPolicy, a firewall) lets the worker reach them",
}

// startError is a worker that could not start although its configuration
// was accepted: Dependency names what it could not reach ("" for a failure
// of its own), Err is the cause.
type startError struct {
	Dependency string
	Err        error
	Attempts   int
	Waited     time.Duration
	// LogFormat is LOG_FORMAT, the format of the line that reports it.
	LogFormat string
}

func (e *startError) Error() string {
	if e.Dependency == "" {
		return "start: " + e.Err.Error()
	}
	return fmt.Sprintf("start: %s unreachable after %d attempts in %v: %v", e.Dependency, e.Attempts, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *startError) Unwrap() error { return e.Err }

// exitCode is the code a start failure exits with.
func (e *startError) exitCode() int {
	if e.Dependency == "" {
		return exitFailure
	}
	return exitUnreachable
}

// report writes e to w as one line worker_start_failed, as a log pipeline
// reads every other line: JSON, or text with LOG_FORMAT=text.
func (e *startError) report(w io.Writer) {
	attrs := []any{slog.String("error", e.Err.Error())}
	if e.Dependency != "" {
		attrs = append(attrs, slog.String("dependency", e.Dependency), slog.String("check", dependencies[e.Dependency]),
			slog.Int("attempts", e.Attempts), slog.String("waited", e.Waited.Round(time.Millisecond).String()))
	} else {
		attrs = append(attrs, slog.String("check", "the error: the worker's own environment (files, ports, memory), else file a bug with this line"))
	}
	newLogger(w, slog.LevelInfo, e.LogFormat).Error("worker_start_failed", attrs...)
}

// startFailure returns err, the worker's failure to start or run, as run
// reports it: a *config.Error as it is, nil when ctx was done first (the
// worker was stopped while it started), else a *startError in logFormat.
func startFailure(ctx context.Context, err error, logFormat string) error {
	var cfgErr *config.Error
	var se *startError
	switch {
	case err == nil, errors.As(err, &cfgErr):
		return err
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil
	case !errors.As(err, &se):
		se = &startError{Err: err}
	}
	se.LogFormat = logFormat
	return se
}

// Backoff between attempts to reach a dependency at start.
const (
	reachInitialBackoff = 200 * time.Millisecond
	reachMaxBackoff     = 5 * time.Second
)

// reach calls try until it returns nil or a *config.Error, and returns
// that; or until STARTUP_TIMEOUT from Open's start has passed, and returns
// a *startError naming dependency with try's last cause; or until ctx is
// done, and returns ctx's error. Each failure is logged
// (worker_start_waiting) and tried again after a backoff. try's context
// ends with STARTUP_TIMEOUT; an attempt that ignores it is let finish.
func (m *Main) reach(ctx context.Context, dependency string, try func(ctx context.Context) error) error {
	start := time.Now()
	bounded, cancel := context.WithDeadline(ctx, m.startBy)
	defer cancel()
	var cause error
	for attempt := 1; ; attempt++ {
		err := try(bounded)
		var cfgErr *config.Error
		if err == nil || errors.As(err, &cfgErr) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if cause == nil || bounded.Err() == nil {
			// An attempt the deadline cut short says less than the one before.
			cause = err
		}
		wait := policy.Backoff(attempt, reachInitialBackoff, reachMaxBackoff)
		if bounded.Err() == nil {
			m.logger.Warn("worker_start_waiting", slog.String("dependency", dependency), slog.Int("attempt", attempt),
				slog.String("error", err.Error()), slog.String("retry_in", wait.String()),
				slog.String("gives_up_in", time.Until(m.startBy).Round(time.Millisecond).String()))
		}
		if !ports.Sleep(bounded.Done(), wait) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &startError{Dependency: dependency, Err: cause, Attempts: attempt, Waited: time.Since(start)}
		}
	}
}
