package ports

import (
	"sync"
	"time"
)

// This file is the shared vocabulary of the ports' users (the domain, the
// middlewares in policy, the adapters) for pacing: how they wait, and how
// they keep a log event that repeats once per record from drowning the
// others. Each rule is stated here once; ports is the one package all of
// them may import.

// Sleep waits d, or until done is closed, and reports whether it waited the
// full d. A nil done never closes. A caller holding a context passes
// ctx.Done() and, on false, returns ctx.Err().
func Sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// LogLimit paces one log event that could otherwise repeat once per record
// (every record failing alike through an outage): it lets one event through
// per Every and counts those it holds back, so the one let through can say
// how many it stands for. A LogLimit with Every set is ready for use; it is
// safe for concurrent use and must not be copied after first use.
type LogLimit struct {
	// Every is the least time between two events let through.
	Every time.Duration

	mu   sync.Mutex
	last time.Time // when the last event was let through; zero: none yet
	held int       // events held back since then
}

// Allow reports whether an event at now may be logged. The first event is
// always let through, and so is one at least Every after the last one let
// through; the others are held back and counted. When ok, held is how many
// events were held back since the last one let through (this one not
// included); when not ok, held is 0.
func (l *LogLimit) Allow(now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < l.Every {
		l.held++
		return 0, false
	}
	held, l.held, l.last = l.held, 0, now
	return held, true
}
