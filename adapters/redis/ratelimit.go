package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/ports"
)

var _ ports.RateLimiter = (*RateLimiter)(nil)

// DefaultRateKeyPrefix is put before every sender's key of a RateLimiter.
const DefaultRateKeyPrefix = "notification-worker:rate:"

// takeLua is GCRA, reserving a sender's next turn in one step on the
// server's clock. KEYS[1] holds the sender's theoretical arrival time
// (TAT: when its pace reaches its next send), in microseconds of the
// server's clock; ARGV are the limit's Interval and Tolerance and the
// caller's maxWait, in microseconds. A turn is due Tolerance before the
// TAT, and never before now. If it is due within maxWait, the TAT moves
// one Interval on and the answer is {1, wait}; else nothing changes and
// the answer is {0, how much sooner it would have to be}. The key lives
// until the TAT: past it the sender is idle, and no key means exactly
// that. A value that is not a number counts as no key.
//
// The clock is the server's (TIME), so the replicas' clocks do not
// matter; Redis 7 replicates a script by its effects (the SET), so TIME
// in a script that writes is allowed and replicas store what the primary
// did.
const takeLua = `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, tolerance, maxwait = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call("GET", KEYS[1])) or now
if tat < now then tat = now end
local wait = tat - tolerance - now
if wait < 0 then wait = 0 end
if wait > maxwait then return {0, wait - maxwait} end
tat = tat + interval
redis.call("SET", KEYS[1], string.format("%.0f", tat), "PX", math.ceil((tat - now) / 1000))
return {1, wait}
`

// takeScript is not retryable: a take repeated after a connection error
// would reserve a second turn, and the caller would never use it.
var takeScript = rueidis.NewLuaScript(takeLua)

// pauseLua moves KEYS[1]'s TAT to at least now + ARGV[1] (the pause) +
// ARGV[2] (the Tolerance), so no turn is due before the pause ends and
// the next ones an Interval apart; a later TAT stays. Microseconds, the
// server's clock, as takeLua.
const pauseLua = `
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local resume = now + tonumber(ARGV[1]) + tonumber(ARGV[2])
local tat = tonumber(redis.call("GET", KEYS[1])) or 0
if tat < resume then
	redis.call("SET", KEYS[1], string.format("%.0f", resume), "PX", math.ceil((resume - now) / 1000))
end
return 1
`

// pauseScript is retryable: a pause applied twice is the same pause.
var pauseScript = rueidis.NewLuaScriptRetryable(pauseLua)

// RateLimiterConfig configures NewRateLimiter.
type RateLimiterConfig struct {
	// Conn says how to reach Redis, as for New: its URL, TLSConfig,
	// Sentinel fields, Timeout (bounding every call, DefaultTimeout when
	// zero) and MaxUnanswered (sizing the connection's ring) apply; its
	// other fields are ignored.
	Conn Config
	// KeyPrefix is put before every sender's key. Empty:
	// DefaultRateKeyPrefix.
	KeyPrefix string
}

// RateLimiter is the fleet-wide ports.RateLimiter on Redis: every worker
// on the same server (and KeyPrefix) shares one pace per sender. Each Take
// and Pause is one Lua script run by its SHA (EVALSHA; the script is sent
// in full only when the server answers NOSCRIPT, once after a restart),
// one key per call, so it works on Redis Cluster as the Store does. Redis
// must be 7.0 or later. An ACL user needs "+evalsha +eval" and, for what
// the scripts run, "+time +get +set" on "~<KeyPrefix>*".
//
// Every method returns an error when Redis does not answer within the
// Timeout or before ctx is done; the error names the key. It is safe for
// concurrent use, and reconnects by itself after an outage.
type RateLimiter struct {
	client  rueidis.Client
	prefix  string
	timeout time.Duration
}

// NewRateLimiter connects to the server in cfg.Conn on a connection of its
// own (the Store's pipeline and ring stay the Store's) and returns a
// RateLimiter. It fails if the configuration is invalid or the server
// cannot be reached within the dial timeout. Errors never carry the
// password.
func NewRateLimiter(cfg RateLimiterConfig) (*RateLimiter, error) {
	conn := cfg.Conn
	conn.Timeout = cmp.Or(conn.Timeout, DefaultTimeout)
	cfg.KeyPrefix = cmp.Or(cfg.KeyPrefix, DefaultRateKeyPrefix)
	if conn.Timeout < 0 {
		return nil, fmt.Errorf("redis rate limiter: negative timeout %v", conn.Timeout)
	}
	if conn.URL == "" {
		return nil, errors.New("redis rate limiter: empty URL")
	}
	// One command a call: the Store's ReadBoth does not apply.
	conn.ReadBoth = false
	client, _, err := conn.connect("redis rate limiter")
	if err != nil {
		return nil, err
	}
	return &RateLimiter{client: client, prefix: cfg.KeyPrefix, timeout: conn.Timeout}, nil
}

// Close closes the connections. Calls made after Close return an error.
func (l *RateLimiter) Close() { l.client.Close() }

// Key returns the Redis key that holds sender's pace.
func (l *RateLimiter) Key(sender string) string { return l.prefix + sender }

// Take implements ports.RateLimiter with takeLua: one round trip, on the
// server's clock. Waits are whole microseconds.
func (l *RateLimiter) Take(ctx context.Context, sender string, limit ports.Limit, maxWait time.Duration) (ports.Reservation, error) {
	k := l.Key(sender)
	if err := checkLimit(ctx, limit); err != nil {
		return ports.Reservation{}, fmt.Errorf("redis rate limit take %s: %w", k, err)
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	res, err := takeScript.Exec(ctx, l.client, []string{k}, []string{
		micros(limit.Interval()), micros(limit.Tolerance()), micros(max(maxWait, 0)),
	}).AsIntSlice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected answer %v", res)
	}
	if err != nil {
		return ports.Reservation{}, fmt.Errorf("redis rate limit take %s: %w", k, err)
	}
	return ports.Reservation{OK: res[0] == 1, Wait: time.Duration(res[1]) * time.Microsecond}, nil
}

// Pause implements ports.RateLimiter with pauseLua: one round trip, on the
// server's clock, so the pause ends at the same instant for every worker.
func (l *RateLimiter) Pause(ctx context.Context, sender string, limit ports.Limit, d time.Duration) error {
	k := l.Key(sender)
	if err := checkLimit(ctx, limit); err != nil {
		return fmt.Errorf("redis rate limit pause %s: %w", k, err)
	}
	if d <= 0 {
		return nil
	}
	ctx, cancel := l.bound(ctx)
	defer cancel()
	if err := pauseScript.Exec(ctx, l.client, []string{k}, []string{micros(d), micros(limit.Tolerance())}).Error(); err != nil {
		return fmt.Errorf("redis rate limit pause %s: %w", k, err)
	}
	return nil
}

// bound returns ctx bounded by the limiter's timeout, unless the caller's
// bound is tighter.
func (l *RateLimiter) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= l.timeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, l.timeout)
}

func checkLimit(ctx context.Context, limit ports.Limit) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !limit.Valid() {
		return fmt.Errorf("invalid limit %v: want a rate above 0 and at most 1e6 a second, a burst of at least 1, and a burst of intervals within ten years", limit)
	}
	return nil
}

// micros is d in whole microseconds, as the scripts count.
func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
