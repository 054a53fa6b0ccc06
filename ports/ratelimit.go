package ports

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Limit is the pace of one sender: Rate sends per second on average, and
// at most Burst sends at once after the sender was idle.
type Limit struct {
	Rate  float64
	Burst int
}

// Valid reports whether l is a limit a RateLimiter accepts: a Rate of at
// most a million a second (an Interval of at least a microsecond), a
// Burst of at least 1, and Burst Intervals within maxPace, so that every
// duration a limiter computes from them fits a time.Duration.
func (l Limit) Valid() bool {
	return l.Rate > 0 && l.Rate <= 1e6 && l.Burst >= 1 && float64(l.Burst)/l.Rate <= maxPace.Seconds()
}

// maxPace bounds Burst Intervals: ten years.
const maxPace = 10 * 365 * 24 * time.Hour

// Interval is the time between two sends at Rate (a second divided by
// Rate), to the microsecond: the resolution every RateLimiter keeps.
func (l Limit) Interval() time.Duration {
	return time.Duration(math.Round(1e6/l.Rate)) * time.Microsecond
}

// Tolerance is how far ahead of its pace a sender may go: Burst-1
// Intervals. A send is due Tolerance before its turn at the steady pace.
func (l Limit) Tolerance() time.Duration {
	return time.Duration(l.Burst-1) * l.Interval()
}

// Share is l divided among replicas that each enforce it alone, without
// a shared store: Rate/replicas, and Burst/replicas but at least 1 (so
// several replicas' bursts together may exceed Burst). replicas below 1
// counts as 1.
func (l Limit) Share(replicas int) Limit {
	if replicas <= 1 {
		return l
	}
	return Limit{Rate: l.Rate / float64(replicas), Burst: max(1, l.Burst/replicas)}
}

func (l Limit) String() string {
	return fmt.Sprintf("%g/s burst %d", l.Rate, l.Burst)
}

// Reservation is a RateLimiter's answer to Take.
type Reservation struct {
	// OK: a send was reserved for the caller; it goes Wait after the
	// answer (Wait 0: now), and not before. Not OK: nothing was reserved,
	// because the sender's next turn is more than the caller's maxWait
	// away (the sender is busy, or paused); Take again no sooner than Wait
	// from now, when a turn within maxWait may be free.
	OK   bool
	Wait time.Duration
}

// RateLimiter paces sends per sender (a sender is any string naming who
// sends: a phone number, a Messaging Service, an SMTP relay), for every
// caller that shares it: on one store, every replica of the worker shares
// one pace per sender.
//
// The pace is GCRA (a leaky bucket, as a scheduler): a sender idle for
// Burst Intervals may send Burst at once, and then one per Interval. A
// sender idle long enough holds no state: a limiter forgets it.
//
// Every method costs at most one round trip to the limiter's store, is
// safe for concurrent use, and returns promptly when ctx is done. Any
// error means the limiter could not answer (its store is down or slow, or
// ctx is done): nothing is known of the sender's pace, and the caller
// paces itself by its own share of the limit (Limit.Share) on an
// in-process limiter instead. A call that failed may still have been
// applied (a reservation made, a pause set); that only slows the sender.
type RateLimiter interface {
	// Take reserves the sender's next turn under limit if it comes within
	// maxWait, and reports when it is (see Reservation). A reservation is
	// the caller's to use: the limiter does not know whether the send
	// happened, and a reservation left unused is a turn lost. A Take that
	// is not OK reserves nothing. limit must be Valid (an error otherwise);
	// callers sharing a sender should give the same limit.
	Take(ctx context.Context, sender string, limit Limit, maxWait time.Duration) (Reservation, error)
	// Pause reserves nothing for sender sooner than d from now, for every
	// caller: a provider asked to wait d (a Retry-After). After it the
	// sender resumes at limit's pace, one send per Interval, without a
	// burst. A pause never shortens an earlier pause or the turns already
	// reserved, and does not recall them: a caller holding a reservation
	// sends at its turn. d <= 0 is a no-op.
	Pause(ctx context.Context, sender string, limit Limit, d time.Duration) error
}

// ErrRateLimited is wrapped by a Notifier's error when the provider
// refused the message until later because the sender or the account is
// over the provider's pace (Twilio's 429, its sender queue full): nothing
// was sent, and the same message will be accepted once the pace allows.
// It is backpressure, not a failure of the message: the caller slows the
// sender for every message (RateLimiter.Pause, by RetryAfter) and tries
// again. The error's Kind is Retryable unless marked otherwise.
var ErrRateLimited = errors.New("rate limited: the provider refused the message until later")

// RateLimited wraps err so that it matches ErrRateLimited (errors.Is) and
// carries retryAfter, the wait the provider asked for (or the caller's
// default when it named none). It returns nil for a nil err.
func RateLimited(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &rateLimited{err: err, after: max(retryAfter, 0)}
}

// RetryAfter returns the wait carried by the first error in err's chain
// made by RateLimited, and whether there is one.
func RetryAfter(err error) (time.Duration, bool) {
	var r *rateLimited
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

type rateLimited struct {
	err   error
	after time.Duration
}

func (e *rateLimited) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.err, e.after)
}
func (e *rateLimited) Unwrap() error        { return e.err }
func (e *rateLimited) Is(target error) bool { return target == ErrRateLimited }
