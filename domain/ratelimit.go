package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Pace is the rate limit of one channel: every send on it takes a turn of
// Sender's pace under Limit from Config.RateLimiter. Sender names who
// sends, as the provider paces it: the Twilio From number or Messaging
// Service SID, the SMTP relay's host.
type Pace struct {
	Sender string
	Limit  ports.Limit
}

// DefaultRateWaitMax is Config.RateWaitMax's default: the longest one
// notification waits for its sender's turn before its record is given back
// to wait as Paced.
const DefaultRateWaitMax = 5 * time.Second

// rateWaitMax is the longest a held notification waits for its turn: at
// most Config.RateWaitMax, and at most half of what the claim's lease
// leaves after everything else it guards (see CheckClaimTTL) and the
// turn's own round trip to the limiter (a store timeout), so that a send
// made at the end of the wait is still recorded within the lease.
func rateWaitMax(c *Config) time.Duration {
	spare := c.ClaimTTL - MinClaimTTL(c.SendTimeout, c.StoreTimeout) - c.StoreTimeout
	return min(c.RateWaitMax, spare/2)
}

// validatePaces checks the rate limits of c.
func (c *Config) validatePaces() []error {
	var errs []error
	if len(c.Paces) > 0 && c.RateLimiter == nil {
		errs = append(errs, errors.New("rate limits without a rate limiter"))
	}
	for ch, p := range c.Paces {
		if p.Sender == "" || !p.Limit.Valid() {
			errs = append(errs, fmt.Errorf("rate limit of channel %q: sender %q, limit %v: want a sender and a valid limit", ch, p.Sender, p.Limit))
		}
	}
	if len(c.Paces) > 0 && rateWaitMax(c) <= 0 {
		errs = append(errs, fmt.Errorf("claim TTL %v leaves no time to wait for a rate limit's turn: it must exceed %v", c.ClaimTTL, MinClaimTTL(c.SendTimeout, c.StoreTimeout)+c.StoreTimeout))
	}
	return errs
}

// pace takes n's turn at its channel's pace before the send, waiting for
// it up to rateWaitMax, and reports whether n may send. A channel without
// a Pace sends at once. When the turn is not granted within the wait, n
// gives its claim back and ends throttled: nothing was sent, and the record
// waits as Paced, spending no retry budget. When the limiter cannot answer
// (it failed within the store timeout: its Redis does not answer, and the
// fallback to this replica's share had no time to step in), n ends
// throttled the same way but its record waits as Unavailable: a dependency
// is down, not a pace being kept. When ctx ends, the record stays
// Retryable: the source is stopping.
func (s *Service) pace(ctx context.Context, n *notification) bool {
	p, ok := s.cfg.Paces[n.m.Channel]
	if !ok {
		return true
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.StoreTimeout)
	r, err := s.cfg.RateLimiter.Take(tctx, p.Sender, p.Limit, rateWaitMax(&s.cfg))
	cancel()
	switch {
	case err != nil:
		s.throttle(ctx, n, ports.Unavailable, fmt.Errorf("rate limit of %s: %w", p.Sender, err), 0)
		return false
	case !r.OK:
		n.log.Debug("rate_limit_no_turn", slog.String("sender", p.Sender), slog.Duration("next_turn_in", r.Wait))
		s.throttle(ctx, n, ports.Paced, fmt.Errorf("%w: no turn of sender %s within %v (next in %v)", errNoTurn, p.Sender, rateWaitMax(&s.cfg), r.Wait), r.Wait)
		return false
	}
	s.cfg.RateWaited(n.m.Channel, r.Wait)
	if r.Wait > 0 && !ports.Sleep(ctx.Done(), r.Wait) {
		// The turn is lost: a reservation left unused only slows the
		// sender.
		s.throttle(ctx, n, ports.Paced, ctx.Err(), 0)
		return false
	}
	return true
}

// errNoTurn says a notification found no turn of its sender's pace within
// the wait allowed.
var errNoTurn = errors.New("rate limited: the sender's pace is taken")

// throttle ends n, which did not send, as throttled with err: its claim
// (even one the store may have taken without answering) is given back and
// the record waits as kind, Paced or Unavailable (a done ctx stays
// retryable: the source is stopping). Holding no claim, it then waits
// until the sender's next turn may be free, wait, but at most
// rateWaitMax, so that a backlog's records do not claim, ask and release
// again and again while the sender is busy: the source retries a Paced
// record without a backoff of its own.
func (s *Service) throttle(ctx context.Context, n *notification, kind ports.Kind, err error, wait time.Duration) {
	switch {
	case n.held:
		s.release(ctx, n.log, n.m.IdempotencyKey, n.token)
		n.held = false
	case n.state == stateUnchecked:
		// The claim failed at this end, but may have landed in the store
		// (a timeout after the server took it): left there, it would hold
		// off the next attempt until it expired, and then be taken over as
		// a send to reconcile. Only a claim under n.token is deleted; the
		// store is likely still down, so a failure here is expected.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		_ = s.cfg.Store.Release(rctx, n.m.IdempotencyKey, n.token)
		cancel()
	}
	n.state = stateThrottled
	n.err = fmt.Errorf("send %s: %w", n.m.IdempotencyKey, err)
	if ctx.Err() != nil {
		return
	}
	n.err = mark(kind, n.err)
	if wait = min(wait, rateWaitMax(&s.cfg)); wait > 0 {
		ports.Sleep(ctx.Done(), wait)
	}
}

// rateLimited handles a send the provider refused for its sender's pace
// (ports.ErrRateLimited): nothing was sent, so the claim is given back;
// the sender is paused for every record by the wait the provider asked
// (when the channel has a Pace), and the record waits as Paced.
func (s *Service) rateLimited(ctx context.Context, n *notification, err error) {
	after, _ := ports.RetryAfter(err)
	s.cfg.RateLimited(n.m.Channel)
	attrs := []slog.Attr{slog.String("to", n.m.ToMasked), slog.Duration("retry_after", after), slog.String("error", err.Error())}
	if p, ok := s.cfg.Paces[n.m.Channel]; ok {
		attrs = append(attrs, slog.String("sender", p.Sender))
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
		perr := s.cfg.RateLimiter.Pause(pctx, p.Sender, p.Limit, after)
		cancel()
		if perr != nil {
			attrs = append(attrs, slog.String("pause_error", perr.Error()))
		}
	}
	s.logLimited(ctx, s.throttled, n.log, slog.LevelWarn, "notification_rate_limited", attrs...)
	s.throttle(ctx, n, ports.Paced, err, after)
}

// logLimited logs msg through log unless l holds it back (see
// ports.LogLimit), adding how many were held back since the last one let
// through as suppressed_since_last. It keeps a warning that an outage
// repeats for every record (idempotency_check_unavailable,
// idempotency_record_failed, notification_rate_limited) to one per
// Config.LogEvery.
func (s *Service) logLimited(ctx context.Context, l *ports.LogLimit, log noteLog, level slog.Level, msg string, attrs ...slog.Attr) {
	held, ok := l.Allow(s.cfg.Now())
	if !ok {
		return
	}
	log.LogAttrs(ctx, level, msg, append(attrs, slog.Int("suppressed_since_last", held))...)
}
