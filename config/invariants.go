package config

import (
	"time"

	"github.com/harborlight/notification-worker/adapters/twilio"
	"github.com/harborlight/notification-worker/domain"
)

// invariants returns the rules c breaks among those that relate settings
// of different groups, each a Problem without its Value: each is written
// here once, and checked by Load (on the variables) and by Check (on a
// Config built by other means). A zero duration means the value itself was
// bad and has been reported already, so a rule on it is not checked.
func (c Config) invariants() []Problem {
	var out []Problem
	i := c.Idempotency
	if i.ClaimTTL > 0 && c.SendTimeout > 0 && i.Timeout > 0 && domain.CheckClaimTTL(i.ClaimTTL, c.SendTimeout, i.Timeout) != nil {
		out = append(out, Problem{Var: "IDEMPOTENCY_CLAIM_TTL", Reason: "must exceed SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT + " + domain.LeaseClockSkew.String() + " (" + domain.MinClaimTTL(c.SendTimeout, i.Timeout).String() +
			"): a claim must outlive its own round trip, the send, the round trip of the write that records it, and the clock skew between workers, or another worker may claim the notification and send it again before the first send is recorded"})
	}
	if c.ShutdownTimeout > 0 && c.SendTimeout > 0 && i.Timeout > 0 && c.ShutdownTimeout < c.SendTimeout+2*i.Timeout {
		out = append(out, Problem{Var: "SHUTDOWN_TIMEOUT", Reason: "must be at least SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT (" + (c.SendTimeout + 2*i.Timeout).String() +
			"): a send in hand at shutdown must be able to claim, send and be recorded, or it is cut off after the provider may have taken it, and sent again on replay"})
	}
	if lag := twilio.LoadSettings(c.Settings()).ListLag; c.ReconcileTimeout > 0 && lag > 0 && c.ReconcileTimeout <= lag {
		out = append(out, Problem{Var: "RECONCILE_TIMEOUT", Reason: "must exceed TWILIO_LIST_LAG (" + lag.String() +
			"): until the list has caught up Twilio can only answer \"cannot tell\", and every unknown SMS would fall to UNKNOWN_OUTCOME_POLICY"})
	}
	if i.TTL > 0 && i.ClaimTTL > 0 && i.TTL < i.ClaimTTL {
		out = append(out, Problem{Var: "IDEMPOTENCY_TTL", Reason: "must be at least IDEMPOTENCY_CLAIM_TTL (" + i.ClaimTTL.String() +
			"): a sent record must suppress replays for longer than a send may take"})
	}
	return out
}

// Check reports, for a Config built otherwise than by LoadWorker (by hand,
// or changed after), the rules on how its settings combine that LoadWorker
// checks (invariants): a *Error naming every variable whose rule is
// broken, with its value as c holds it, or nil. The worker's Main calls it
// when it opens, so no Config reaches a running worker without them.
func (c Config) Check() error {
	values := map[string]time.Duration{
		"IDEMPOTENCY_CLAIM_TTL": c.Idempotency.ClaimTTL,
		"SHUTDOWN_TIMEOUT":      c.ShutdownTimeout,
		"RECONCILE_TIMEOUT":     c.ReconcileTimeout,
		"IDEMPOTENCY_TTL":       c.Idempotency.TTL,
	}
	problems := c.invariants()
	if len(problems) == 0 {
		return nil
	}
	for n, p := range problems {
		problems[n].Value = durationText(values[p.Var])
	}
	return &Error{Problems: problems, LogFormat: c.LogFormat}
}
