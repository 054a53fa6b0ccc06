package domain

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// FailureMode says what to do when the idempotency store cannot answer.
type FailureMode string

const (
	// FailOpen sends anyway and warns: a rare duplicate beats a lost
	// notification (ADR-0006).
	FailOpen FailureMode = "open"
	// FailClosed sends nothing and reports the record Unavailable, so the
	// consumer waits for the store to return.
	FailClosed FailureMode = "closed"
)

// The defaults of Config's durations, which the configuration reference
// (and so the README) shows.
const (
	DefaultTTL          = 48 * time.Hour
	DefaultClaimTTL     = 60 * time.Second
	DefaultStoreTimeout = 200 * time.Millisecond
	DefaultSendTimeout  = 10 * time.Second
	DefaultReconcileFor = 2 * time.Minute
)

// Config configures a Service. Zero durations take the Default values.
type Config struct {
	Store     ports.IdempotencyStore           // required
	Notifiers map[ports.Channel]ports.Notifier // one per channel events may use
	Templates *Templates                       // nil: the embedded templates
	// Reconcilers ask a channel's provider whether a send whose outcome is
	// unknown went out. A channel without one cannot be asked: its unknown
	// sends go straight to UnknownPolicy.
	Reconcilers map[ports.Channel]ports.Reconciler
	// ReconcileFor is when, after a send's window ended, a provider whose
	// list could not tell once final is asked a last time, before
	// UnknownPolicy applies (2m); the record waits as Paced meanwhile (see
	// Service.nextAsk).
	ReconcileFor time.Duration
	// UnknownPolicy is what to do with a send whose outcome nobody can tell
	// (PolicyResend unless set).
	UnknownPolicy UnknownPolicy
	// Reconciled, when set, is told the result of every reconciliation.
	Reconciled func(ch ports.Channel, r ports.ReconcileResult)
	// OwedLost, when set, is told how many sent records were lost with the
	// process: by CloseBy, those still owed to the store when it gave up
	// on them and the sends still under way; after it, each record owed by
	// a send CloseBy did not count (see CloseBy). Only with n > 0.
	OwedLost func(n int)

	TTL time.Duration // lifetime of a sent record (48h)
	// MaxEventAge is the age past which an event is stale: skipped, before
	// any claim or send, and acknowledged (TTL unless set). At most TTL, a
	// replay after the store forgot an event's record cannot send it again.
	MaxEventAge time.Duration
	// MaxEventAgeByType overrides MaxEventAge for the event types it names
	// (an "out for delivery" SMS is worthless hours later). Each value must
	// be positive.
	MaxEventAgeByType map[string]time.Duration
	ClaimTTL          time.Duration // lifetime of a pending claim (60s)
	StoreTimeout      time.Duration // bound on each store call (200ms)
	SendTimeout       time.Duration // bound on each provider call (10s)
	FailureMode       FailureMode   // FailOpen unless set

	// ClaimWaitMax caps one wait between looks at another worker's pending
	// claim (1s).
	ClaimWaitMax time.Duration
	// LedgerSize is how many sent records may be owed to the store
	// (DefaultLedgerSize) before Handle stops taking new records: a record
	// then waits, unsent (Unavailable), until the store takes some, while
	// the records already taken go on (see Service.Handle), so the owed
	// records may exceed it by what those deliver. Nothing the journal
	// holds is dropped for room; each entry is kept at most TTL.
	LedgerSize int
	// LogEvery rate-limits the warnings that an outage would repeat for every
	// record (idempotency_check_unavailable, idempotency_record_failed,
	// notification_rate_limited): at most one per LogEvery, carrying the
	// count suppressed since (1s).
	LogEvery time.Duration

	// RateLimiter paces the channels Paces names (see Pace); required
	// when Paces is not empty. A notification claims first, then takes its
	// sender's turn, waiting for it at most RateWaitMax (DefaultRateWaitMax)
	// and at most what the claim's lease leaves; without a turn in that
	// time it gives the claim back and its record waits as Paced.
	// A send the provider refuses for its pace (ports.ErrRateLimited)
	// pauses the sender by the wait asked, and its record waits likewise,
	// on every channel, with or without a Pace.
	RateLimiter ports.RateLimiter
	Paces       map[ports.Channel]Pace
	RateWaitMax time.Duration
	// RateWaited, when set, is told each turn granted and how long it
	// waits; RateLimited each send the provider refused for its pace.
	// Both must be safe for concurrent use and must not block.
	RateWaited  func(ch ports.Channel, wait time.Duration)
	RateLimited func(ch ports.Channel)

	Logger   *slog.Logger   // nil: slog.Default()
	Observer ports.Observer // nil: none
	Now      func() time.Time
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.TTL, DefaultTTL)
	def(&c.ClaimTTL, DefaultClaimTTL)
	def(&c.StoreTimeout, DefaultStoreTimeout)
	def(&c.SendTimeout, DefaultSendTimeout)
	def(&c.ClaimWaitMax, time.Second)
	def(&c.LogEvery, time.Second)
	def(&c.ReconcileFor, DefaultReconcileFor)
	def(&c.MaxEventAge, c.TTL)
	def(&c.RateWaitMax, DefaultRateWaitMax)
	if c.RateWaited == nil {
		c.RateWaited = func(ports.Channel, time.Duration) {}
	}
	if c.RateLimited == nil {
		c.RateLimited = func(ports.Channel) {}
	}
	if c.UnknownPolicy == "" {
		c.UnknownPolicy = PolicyResend
	}
	if c.Reconciled == nil {
		c.Reconciled = func(ports.Channel, ports.ReconcileResult) {}
	}
	if c.OwedLost == nil {
		c.OwedLost = func(int) {}
	}
	if c.LedgerSize <= 0 {
		c.LedgerSize = DefaultLedgerSize
	}
	if c.FailureMode == "" {
		c.FailureMode = FailOpen
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = ports.ObserverFunc(func(ports.Channel, ports.Outcome) {})
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("no idempotency store"))
	}
	if len(c.Notifiers) == 0 {
		errs = append(errs, errors.New("no notifier"))
	}
	for ch, n := range c.Notifiers {
		if !slices.Contains(c.Templates.Channels(), ch) || n == nil {
			errs = append(errs, fmt.Errorf("notifier for channel %q: unknown channel or nil", ch))
		}
	}
	if c.UnknownPolicy != PolicyResend && c.UnknownPolicy != PolicyDeadLetter {
		errs = append(errs, fmt.Errorf("unknown-outcome policy %q: want %q or %q", c.UnknownPolicy, PolicyResend, PolicyDeadLetter))
	}
	if c.FailureMode != FailOpen && c.FailureMode != FailClosed {
		errs = append(errs, fmt.Errorf("failure mode %q: want %q or %q", c.FailureMode, FailOpen, FailClosed))
	}
	for typ, d := range c.MaxEventAgeByType {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("max event age of type %q: %v, want a positive duration", typ, d))
		}
	}
	if err := CheckClaimTTL(c.ClaimTTL, c.SendTimeout, c.StoreTimeout); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validatePaces()...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	return nil
}

// CheckClaimTTL returns an error unless a claim's lease, claimTTL, outlives
// everything it guards, at its slowest: otherwise another worker may take
// the claim over and send again while the first send is still running, or
// before its record lands. It is the one statement of that rule:
//
//	claimTTL > storeTimeout + sendTimeout + storeTimeout + LeaseClockSkew
//
// The lease is counted from before the claim leaves (its start is this
// worker's clock then), so it first pays the claim's round trip (up to the
// store timeout); then the send (up to the send timeout); then the record's
// round trip, which may land on the server as late as the store timeout
// after it left. Another worker judges the lease by its own clock, which
// may run ahead by up to LeaseClockSkew.
func CheckClaimTTL(claimTTL, sendTimeout, storeTimeout time.Duration) error {
	if need := MinClaimTTL(sendTimeout, storeTimeout); claimTTL <= need {
		return fmt.Errorf("claim TTL %v must exceed %v: the claim's round trip (store timeout %v), the send (send timeout %v), the record's round trip (store timeout) and the clock skew allowed between workers (%v), or a slow send loses its claim before it is recorded",
			claimTTL, need, storeTimeout, sendTimeout, LeaseClockSkew)
	}
	return nil
}

// MinClaimTTL is the bound CheckClaimTTL holds a claim TTL to (which it
// must exceed): sendTimeout plus two store timeouts plus LeaseClockSkew.
func MinClaimTTL(sendTimeout, storeTimeout time.Duration) time.Duration {
	return sendTimeout + 2*storeTimeout + LeaseClockSkew
}

// LeaseClockSkew is how far apart the clocks of two workers may be for
// their leases to hold: a worker whose clock runs ahead by more sees
// another's lease end early by the difference. Hosts kept by NTP in one
// network agree within a few milliseconds, and a cloud provider's time
// service within less; 100 ms leaves room for a host whose time sync has
// stumbled. Watch the hosts' clock offset (node_exporter's
// node_timex_offset_seconds) if leases matter more than that.
const LeaseClockSkew = 100 * time.Millisecond

// DefaultLedgerSize is Config.LedgerSize's default: at about 200 bytes an
// entry, a few megabytes, and minutes of a busy worker's sends during a
// store outage before it stops taking records.
const DefaultLedgerSize = 10000
