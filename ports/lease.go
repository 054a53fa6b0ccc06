package ports

import "time"

// Passed reports whether the lease has run out at now: now is not before
// Until. A pending claim whose lease has passed is abandoned, and the next
// Claim of its key takes it over (TakenOver); until then it is live, and
// Claim reports it InFlight.
//
// This is the one statement of the lease rule: every IdempotencyStore
// judges the claims it finds by it, with its own clock's now.
func (l Lease) Passed(now time.Time) bool {
	return !now.Before(l.Until)
}
