// Package policy holds what the worker does with a record whose handling
// failed: small middlewares over ports.Handler (Recover, MaxBytes, Retry,
// DeadLetter), composed by Chain. An event source delivers, orders,
// commits and bounds the handler calls in flight; these decide retry,
// dead-lettering and panic recovery, the same for every source. The
// package imports only ports and the standard library.
//
// Logs, with the record's topic, partition and offset, and written with the
// context the record is handled with: record_retry_scheduled
// (at debug for a Paced failure, else warn), handler_panicked,
// event_dead_lettered, and dead_letter_failed (at most once per 5s per
// DeadLetter middleware, with a failures count).
package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Defaults applied to zero Config fields.
const (
	DefaultMaxRecordBytes      = 1 << 20
	DefaultRetryMaxAttempts    = 12
	DefaultRetryInitialBackoff = 200 * time.Millisecond
	DefaultRetryMaxBackoff     = 10 * time.Second
)

// deadLetterLogEvery is the least time between two dead_letter_failed logs:
// a dead letter outage retries every backoff, and a log per attempt would
// drown everything else.
const deadLetterLogEvery = 5 * time.Second

// ErrInvalidConfig is wrapped by Config.Validate's error.
var ErrInvalidConfig = errors.New("policy: invalid config")

// Config holds the rules the middlewares apply. Zero fields take the
// defaults documented on each.
type Config struct {
	// MaxRecordBytes: a record whose value is larger is dead-lettered
	// unhandled; default 1 MiB.
	MaxRecordBytes int
	// RetryMaxAttempts is how many times a record failing with a Retryable
	// error is tried before it is dead-lettered; default 12, with the
	// default backoff about a minute of provider errors.
	RetryMaxAttempts int
	// RetryInitialBackoff and RetryMaxBackoff shape the capped exponential
	// backoff (with jitter) between attempts at a record, and between
	// attempts to write its dead letter; defaults 200ms and 10s.
	RetryInitialBackoff, RetryMaxBackoff time.Duration
	// Logger receives the middlewares' logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics is told about retries, panics and dead letters; nil: none.
	Metrics Metrics
}

// Metrics receives the middlewares' instrumentation. Implementations must be
// safe for concurrent use and must not block.
type Metrics interface {
	RecordDeadLettered(topic string, kind ports.Kind)
	HandlerPanicked(topic string)
	// RecordRetried counts a retry scheduled after a handler failed with an
	// error of kind (Retryable, Unavailable or Paced).
	RecordRetried(topic string, kind ports.Kind)
}

type noMetrics struct{}

func (noMetrics) RecordDeadLettered(string, ports.Kind) {}
func (noMetrics) HandlerPanicked(string)                {}
func (noMetrics) RecordRetried(string, ports.Kind)      {}

// WithDefaults returns a copy of cfg with every zero field set to its
// default.
func (cfg Config) WithDefaults() Config {
	cfg.MaxRecordBytes = cmp.Or(cfg.MaxRecordBytes, DefaultMaxRecordBytes)
	cfg.RetryMaxAttempts = cmp.Or(cfg.RetryMaxAttempts, DefaultRetryMaxAttempts)
	cfg.RetryInitialBackoff = cmp.Or(cfg.RetryInitialBackoff, DefaultRetryInitialBackoff)
	cfg.RetryMaxBackoff = cmp.Or(cfg.RetryMaxBackoff, DefaultRetryMaxBackoff)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return cfg
}

// Validate reports every problem at once, each naming its field; the error
// wraps ErrInvalidConfig.
func (cfg Config) Validate() error {
	var bad []error
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxRecordBytes", int64(cfg.MaxRecordBytes)},
		{"RetryMaxAttempts", int64(cfg.RetryMaxAttempts)},
		{"RetryInitialBackoff", int64(cfg.RetryInitialBackoff)},
		{"RetryMaxBackoff", int64(cfg.RetryMaxBackoff)},
	} {
		if f.v < 0 {
			bad = append(bad, fmt.Errorf("%s must not be negative (got %d)", f.name, f.v))
		}
	}
	if err := CheckBackoff(cfg.RetryInitialBackoff, cfg.RetryMaxBackoff); err != nil {
		bad = append(bad, fmt.Errorf("RetryMaxBackoff: %w", err))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(bad...))
	}
	return nil
}

// Chain returns h wrapped in mws, the first outermost: a record meets them
// in the order they are listed, and h last.
func Chain(h ports.Handler, mws ...ports.Middleware) ports.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// finished reports whether err leaves nothing for policy to do: nil, or the
// record given up because its source is stopping or its context ended (the
// source cancels it only at the end of a shutdown, never for the record's
// own fault).
func finished(ctx context.Context, err error) bool {
	return err == nil || errors.Is(err, ports.ErrStopping) || ctx.Err() != nil
}

func recordAttrs(rec ports.Record) []any {
	return []any{"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset}
}

// Recover turns a panic in next into a Permanent error ("panic: ..."), logs
// it with its stack as handler_panicked and counts it, so one bad record is
// dead-lettered instead of killing the worker.
func Recover(cfg Config) ports.Middleware {
	cfg = cfg.WithDefaults()
	return func(next ports.Handler) ports.Handler {
		return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = ports.MarkPermanent(fmt.Errorf("panic: %v", r))
					cfg.Metrics.HandlerPanicked(rec.Topic)
					cfg.Logger.ErrorContext(ctx, "handler_panicked", append(recordAttrs(rec), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))...)
				}
			}()
			return next.Handle(ctx, rec)
		})
	}
}

// MaxBytes fails a record whose value is over cfg.MaxRecordBytes with a
// Permanent error, without calling next.
func MaxBytes(cfg Config) ports.Middleware {
	limit := cfg.WithDefaults().MaxRecordBytes
	return func(next ports.Handler) ports.Handler {
		return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			if len(rec.Value) > limit {
				return ports.MarkPermanent(fmt.Errorf("record too large: value is %d bytes, MaxRecordBytes is %d", len(rec.Value), limit))
			}
			return next.Handle(ctx, rec)
		})
	}
}

// Retry calls next again, after a backoff, while it fails with a Retryable
// error, up to cfg.RetryMaxAttempts calls, or with an Unavailable or Paced
// error, for as long as the source delivers (an outage or a sender's pace
// never spends the budget). The backoff doubles with each Retryable or
// Unavailable failure, from cfg.RetryInitialBackoff up to
// cfg.RetryMaxBackoff; after a Paced failure it is the first step's
// (cfg.RetryInitialBackoff, jittered) and does not grow, added to the wait
// the error carries (ports.PacedFor), if any: the handler has already
// waited what the pace asked, or said when the record is due, and the
// record is tried again about as soon as it is due; a later failure of
// another kind backs off as if the paced attempts had not been. It returns nil on
// success; a Permanent error at once; after the budget, an
// error wrapping the last one whose message says so; and ErrStopping when
// the source stopped during a backoff. Every attempt at one record carries
// the same rec.DeliveryID: Retry takes one from ports.NewDeliveryID when
// the source gave the record none, and then ends that delivery
// (ports.Delivery.Ended) as it returns.
func Retry(cfg Config) ports.Middleware {
	cfg = cfg.WithDefaults()
	return func(next ports.Handler) ports.Handler {
		return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			if rec.DeliveryID == 0 {
				rec.DeliveryID = ports.NewDeliveryID()
				ended := make(chan struct{})
				defer close(ended)
				d := ports.DeliveryOf(ctx)
				d.Ended = ended
				ctx = ports.WithDelivery(ctx, d)
			}
			stopping := ports.DeliveryOf(ctx).Stopping
			retryable, backoffs := 0, 0
			for attempt := 1; ; attempt++ {
				err := next.Handle(ctx, rec)
				if finished(ctx, err) {
					return err
				}
				kind := ports.KindOf(err)
				if kind == ports.Permanent {
					return err
				}
				if kind == ports.Retryable {
					retryable++
					if retryable >= cfg.RetryMaxAttempts {
						return fmt.Errorf("retries exhausted after %d attempts: %w", retryable, err)
					}
				}
				step := 1
				if kind != ports.Paced {
					backoffs++
					step = backoffs
				}
				wait := Backoff(step, cfg.RetryInitialBackoff, cfg.RetryMaxBackoff)
				if kind == ports.Paced {
					wait += ports.PacedFor(err)
				}
				cfg.Metrics.RecordRetried(rec.Topic, kind)
				// A record waiting for its sender's pace is the normal
				// course of a backlog, not a warning.
				level := slog.LevelWarn
				if kind == ports.Paced {
					level = slog.LevelDebug
				}
				cfg.Logger.Log(ctx, level, "record_retry_scheduled", append(recordAttrs(rec), "attempt", attempt,
					"kind", kind.String(), "backoff", wait, "error", err)...)
				if !ports.Sleep(stopping, wait) {
					return ports.ErrStopping
				}
			}
		})
	}
}

// DeadLetter writes a record that next failed to sink, with the error's
// kind and message, and returns nil once it is written, so the source
// acknowledges the record. A write that fails is tried again with backoff
// for as long as the source delivers: a record is only acknowledged once
// its dead letter is safe. A nil error, ErrStopping and a context that
// ended pass through unchanged; so does ErrStopping when the source stops
// while a write keeps failing.
func DeadLetter(sink ports.DeadLetterSink, cfg Config) ports.Middleware {
	cfg = cfg.WithDefaults()
	logs := &ports.LogLimit{Every: deadLetterLogEvery}
	return func(next ports.Handler) ports.Handler {
		return ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
			err := next.Handle(ctx, rec)
			if finished(ctx, err) {
				return err
			}
			kind, reason := ports.KindOf(err), err.Error()
			stopping := ports.DeliveryOf(ctx).Stopping
			for attempt := 1; ; attempt++ {
				// The first write goes out even when stopping: the record
				// is in hand and this finishes it.
				werr := sink.DeadLetter(ctx, rec, kind, reason)
				if werr == nil {
					cfg.Metrics.RecordDeadLettered(rec.Topic, kind)
					cfg.Logger.WarnContext(ctx, "event_dead_lettered", append(recordAttrs(rec), "reason", reason, "kind", kind.String())...)
					return nil
				}
				wait := Backoff(attempt, cfg.RetryInitialBackoff, cfg.RetryMaxBackoff)
				if held, ok := logs.Allow(time.Now()); ok {
					cfg.Logger.ErrorContext(ctx, "dead_letter_failed", append(recordAttrs(rec), "attempt", attempt,
						"failures", held+1, "backoff", wait, "error", werr)...)
				}
				if !ports.Sleep(stopping, wait) || ctx.Err() != nil {
					return ports.ErrStopping
				}
			}
		})
	}
}

// CheckBackoff returns an error when max is below initial: the doubling
// waits of Backoff would start above their cap. It is the one statement of
// that rule, for every configuration that has both.
func CheckBackoff(initial, max time.Duration) error {
	if max < initial {
		return fmt.Errorf("the maximum backoff %s is below the initial backoff %s", max, initial)
	}
	return nil
}

// Backoff returns the wait before retry number attempt (1-based): initial
// doubled per attempt, capped at max, with jitter over its upper half so
// many records failing together do not retry in lockstep.
func Backoff(attempt int, initial, max time.Duration) time.Duration {
	d := initial
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + rand.N(d-half+1)
}
