package domain

import (
	"container/list"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// owed is a delivery this process made whose sent record the store has not
// confirmed: the record write failed, or the store could not be asked.
type owed struct {
	key     string
	receipt ports.Receipt
	at      time.Time // when the debt was entered
	seq     uint64    // tells one entry of a key from a later one
}

// ledger is the bounded memory of this process's owed deliveries. While an
// entry is in it, a replay of that notification handled by this process is
// suppressed, and the record write is retried from it. It holds at most max
// entries, each for at most maxAge; when full, the oldest entry is dropped
// (counted by evictions). It is safe for concurrent use.
//
// The ledger protects only this process: a replay handled by another worker
// sees the store alone. It exists so that the worker's own retries and
// replays do not turn a store that cannot confirm into a second message.
type ledger struct {
	max    int
	maxAge time.Duration
	now    func() time.Time

	size atomic.Int64 // order.Len(), readable without the lock

	mu      sync.Mutex
	entries map[string]*list.Element // of *owed, oldest at the front of order
	order   list.List
	seq     uint64
	evicted int64
}

func newLedger(max int, maxAge time.Duration, now func() time.Time) *ledger {
	return &ledger{max: max, maxAge: maxAge, now: now, entries: map[string]*list.Element{}}
}

// owe enters a delivery of key, replacing an earlier entry of the same key.
func (l *ledger) owe(key string, r ports.Receipt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[key]; ok {
		l.removeLocked(e)
	}
	l.seq++
	l.entries[key] = l.order.PushBack(&owed{key: key, receipt: r, at: l.now(), seq: l.seq})
	for l.order.Len() > l.max {
		l.removeLocked(l.order.Front())
		l.evicted++
	}
	l.size.Store(int64(l.order.Len()))
}

// lookup returns the entry of key, if there is one younger than maxAge.
func (l *ledger) lookup(key string) (owed, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	if !ok {
		return owed{}, false
	}
	o := e.Value.(*owed)
	if l.now().Sub(o.at) >= l.maxAge {
		l.removeLocked(e)
		return owed{}, false
	}
	return *o, true
}

// settle removes o once its record is written. An entry of the same key
// entered after o stays.
func (l *ledger) settle(o owed) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries[o.key]; ok && e.Value.(*owed).seq == o.seq {
		l.removeLocked(e)
	}
}

// oldest returns up to n entries, oldest first, dropping those past maxAge.
func (l *ledger) oldest(n int) []owed {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	out := make([]owed, 0, min(n, l.order.Len()))
	for e := l.order.Front(); e != nil && len(out) < n; {
		next := e.Next()
		o := e.Value.(*owed)
		if now.Sub(o.at) >= l.maxAge {
			l.removeLocked(e)
		} else {
			out = append(out, *o)
		}
		e = next
	}
	return out
}

// len returns how many entries the ledger holds, without taking its lock.
func (l *ledger) len() int { return int(l.size.Load()) }

// evictions returns how many entries were dropped because the ledger was full.
func (l *ledger) evictions() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evicted
}

func (l *ledger) removeLocked(e *list.Element) {
	delete(l.entries, e.Value.(*owed).key)
	l.order.Remove(e)
	l.size.Store(int64(l.order.Len()))
}
