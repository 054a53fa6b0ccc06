package kafka

import (
	"context"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// A handler call holds one of the run's MaxInFlight handling slots while it
// runs, and counts among its partition's calls, so that stop can tell how
// many it gave up on (abandoned) and Wedged can see how long each has run.

// call runs one handler call holding a handling slot; it is the
// ports.Delivery.Call of the partition's records. It returns
// ports.ErrStopping when the partition stopped before the call could start.
func (p *partition) call(ctx context.Context, call func(context.Context) error) error {
	slot, ok := p.acquire()
	if !ok {
		return ports.ErrStopping
	}
	p.mu.Lock()
	p.calling++
	if p.abandoned {
		// Started as stop gave up: abandoned too, counted here since
		// stop's count missed it (callDone takes it off either way).
		p.run.abandoned.Add(1)
		p.run.cfg.Metrics.HandlersAbandoned(1)
	}
	p.mu.Unlock()
	defer p.release(slot)
	defer p.callDone()
	return call(ctx)
}

// acquire takes a handling slot and notes when, or reports false once
// stopping. A record that got its slot just as stopping closed gives it
// back: stopping means no new work starts.
func (p *partition) acquire() (slot int, ok bool) {
	if p.isStopping() {
		return 0, false
	}
	select {
	case slot = <-p.run.handling:
	case <-p.stopping:
		return 0, false
	}
	if p.isStopping() {
		p.run.handling <- slot
		return 0, false
	}
	p.run.started[slot].Store(int64(time.Since(p.run.start)) + 1)
	return slot, true
}

// release gives slot back.
func (p *partition) release(slot int) {
	p.run.started[slot].Store(0)
	p.run.handling <- slot
}

// callDone counts a handler call out of the partition's calls, and out of
// the run's abandoned calls if stop gave up on it.
func (p *partition) callDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calling--
	if p.abandoned {
		p.run.abandoned.Add(-1)
		p.run.cfg.Metrics.HandlersAbandoned(-1)
	}
}
