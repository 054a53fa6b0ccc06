package domain

import (
	"errors"
	"fmt"
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
