package ports

import "time"

// Passed reports whether the lease has run out at now: Until is set and now
// is not before it. A pending claim whose lease has passed is abandoned, and
// the next Claim of its key takes it over (TakenOver); until then it is
// live, and Claim reports it InFlight. A lease whose Until is zero (a claim
// written before leases) never passes: it lives as long as its key.
//
// This is the one statement of the lease rule: every IdempotencyStore
// judges the claims it finds by it, with its own clock's now.
func (l Lease) Passed(now time.Time) bool {
	return !l.Until.IsZero() && !now.Before(l.Until)
}
