package domain

import (
	"slices"
	"sync"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// ledger is this process's memory of its sends, by idempotency key, beside
// the store: what each unfinished delivery (ports.Record.DeliveryID) left
// under a key (it delivered it: its retries skip the key, whatever the
// store can confirm; or a send of unknown outcome, which its next attempt
// reconciles), and whether the key's sent record is owed to the store (any
// other delivery this process handles is then a duplicate).
//
// A delivery is forgotten when its record is finished or its source ends
// it (see watch), an owed record once the store takes it, an entry maxAge
// after it was last entered; nothing else drops anything, so a delivery
// skips what it delivered on every retry, at any size: the owed records
// are bounded by admission instead (see admits). Delivery id zero shares
// nothing: only an owed record is kept for it. The ledger also counts the
// sends under way, for the shutdown's count of what is lost. It is safe
// for concurrent use, and protects only this process.
type ledger struct {
	size   int
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	owed    int                 // entries whose record is owed
	watched map[uint64]struct{} // the deliveries whose end watch waits for
	sending int                 // sends under way
	closed  bool                // close has counted
	counted int                 // sends close counted under way that have not ended
}

// entry is what the ledger holds of one key.
type entry struct {
	receipt ports.Receipt // of the last delivery
	owed    bool          // its sent record not yet taken by the store
	// by holds the unfinished deliveries that left something under the
	// key: nil, the delivery delivered it; else its send of unknown outcome.
	by map[uint64]*unknownSend
	at time.Time // when last entered
}

// owedRecord is a sent record the ledger owes the store.
type owedRecord struct {
	key     string
	receipt ports.Receipt
}

// unknownSend is a send whose outcome an attempt could not learn, and
// where its reconciliation stands. Its window is fixed by the send and
// carried unchanged through every takeover.
type unknownSend struct {
	Token string // the claim kept for it: the one it was sent under, or the one that took it over
	// Since and Until bound when the provider may have accepted it: the
	// send's start and end, or the first lease of a claim's history
	// (ports.Lease.First, FirstUntil; a zero Until: now).
	Since, Until   time.Time
	Digest, Sender string // of the text sent and whom from (see ports.Lease); empty: unknown
	Ours           bool   // the delivery's own send; else made under a claim it took over
	// Asked is when the provider was last asked about it (zero: never), or
	// Since when a taker of a takeover found it: its predecessor may have.
	Asked    time.Time
	Reported bool // its outcome was reported unknown: it was entered in the ledger
}

func newLedger(size int, maxAge time.Duration, now func() time.Time) *ledger {
	return &ledger{size: size, maxAge: maxAge, now: now, entries: map[string]*entry{}, watched: map[uint64]struct{}{}}
}

// known is what the ledger holds of one key for one delivery.
type known struct {
	earlier bool         // the delivery (non-zero) delivered it
	owed    *owedRecord  // its sent record, when owed
	unknown *unknownSend // the delivery's send of unknown outcome
}

// lookup returns what the ledger holds of key for delivery.
func (l *ledger) lookup(key string, delivery uint64) known {
	l.mu.Lock()
	defer l.mu.Unlock()
	var k known
	e := l.liveLocked(key)
	if e == nil {
		return k
	}
	u, ok := e.by[delivery]
	k.earlier = ok && u == nil && delivery != 0
	if u != nil {
		c := *u // the caller's own copy
		k.unknown = &c
	}
	if e.owed {
		k.owed = &owedRecord{key: key, receipt: e.receipt}
	}
	return k
}

// delivered enters key as delivered by delivery with r, its record owed or
// written, replacing delivery's unknown send of key. It reports whether
// the record is owed after close: then nothing writes it.
func (l *ledger) delivered(key string, delivery uint64, r ports.Receipt, owed bool) (afterClose bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entryLocked(key, owed || delivery != 0); e != nil {
		l.setOwedLocked(e, owed)
		e.receipt, e.at = r, l.now()
		if delivery != 0 {
			e.by[delivery] = nil
		}
		l.dropIfEmptyLocked(key, e)
	}
	return owed && l.closed
}

// setUnknown enters delivery's send of key whose outcome is unknown, as
// reported.
func (l *ledger) setUnknown(key string, delivery uint64, u unknownSend) {
	if delivery == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entryLocked(key, true)
	u.Reported = true
	e.by[delivery], e.at = &u, l.now()
}

// written marks o taken by the store, unless its key was entered since
// with another receipt.
func (l *ledger) written(o owedRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[o.key]; e != nil && e.receipt == o.receipt {
		l.setOwedLocked(e, false)
		l.dropIfEmptyLocked(o.key, e)
	}
}

// forget drops what delivery left under key (an owed record stays).
func (l *ledger) forget(key string, delivery uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[key]; e != nil {
		delete(e.by, delivery)
		l.dropIfEmptyLocked(key, e)
	}
}

// owedRecords returns the owed records, oldest first, dropping those past
// maxAge (their records would have expired in the store by now).
func (l *ledger) owedRecords() []owedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]owedRecord, 0, l.owed)
	for key, e := range l.entries {
		if e.owed && l.liveLocked(key) != nil {
			out = append(out, owedRecord{key: key, receipt: e.receipt})
		}
	}
	slices.SortFunc(out, func(a, b owedRecord) int { return a.receipt.SentAt.Compare(b.receipt.SentAt) })
	return out
}

// owedCount returns how many records are owed.
func (l *ledger) owedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owed
}

// admits reports whether an attempt by delivery at a record of msgs may go
// on: while fewer than size records are owed, or when delivery left
// something under one of their keys (it is never refused the room it
// holds). An attempt not admitted must send nothing.
func (l *ledger) admits(delivery uint64, msgs []ports.Message) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owed < l.size {
		return true
	}
	for _, m := range msgs {
		if e := l.liveLocked(m.IdempotencyKey); e != nil && delivery != 0 {
			if _, ok := e.by[delivery]; ok {
				return true
			}
		}
	}
	return false
}

// watch forgets delivery under the key of each of msgs once ended is
// closed, the event source's word that no attempt carrying it follows (see
// ports.Delivery.Ended), so that a record given up unfinished leaves
// nothing behind. One goroutine per delivery waits, however often it is
// called; with a nil ended, what the delivery left expires.
func (l *ledger) watch(delivery uint64, msgs []ports.Message, ended <-chan struct{}) {
	if delivery == 0 || ended == nil {
		return
	}
	l.mu.Lock()
	_, ok := l.watched[delivery]
	l.watched[delivery] = struct{}{}
	l.mu.Unlock()
	if ok {
		return
	}
	go func() {
		<-ended
		for _, m := range msgs {
			l.forget(m.IdempotencyKey, delivery)
		}
		l.mu.Lock()
		delete(l.watched, delivery)
		l.mu.Unlock()
	}()
}

// startSend counts a send under way until endSend: close counts those as
// lost, since the process may exit before they end.
func (l *ledger) startSend() {
	l.mu.Lock()
	l.sending++
	l.mu.Unlock()
}

// endSend ends a send startSend counted, and reports whether close counted
// it lost (or, should several end after close, one like it: the count of
// what is lost never falls below it).
func (l *ledger) endSend() (counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sending--
	if l.counted == 0 {
		return false
	}
	l.counted--
	return true
}

// close returns the owed records left and the sends under way, which the
// shutdown counts as lost.
func (l *ledger) close() (owed, sending int) {
	owed = len(l.owedRecords())
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed, l.counted = true, l.sending
	return owed, l.sending
}

// liveLocked returns key's entry, dropping it once past maxAge.
func (l *ledger) liveLocked(key string) *entry {
	e := l.entries[key]
	if e != nil && l.now().Sub(e.at) >= l.maxAge {
		l.setOwedLocked(e, false)
		delete(l.entries, key)
		return nil
	}
	return e
}

func (l *ledger) setOwedLocked(e *entry, owed bool) {
	switch {
	case owed && !e.owed:
		l.owed++
	case !owed && e.owed:
		l.owed--
	}
	e.owed = owed
}

// entryLocked returns key's entry, made when absent if create is set.
func (l *ledger) entryLocked(key string, create bool) *entry {
	e := l.entries[key]
	if e == nil && create {
		e = &entry{by: map[uint64]*unknownSend{}}
		l.entries[key] = e
	}
	return e
}

func (l *ledger) dropIfEmptyLocked(key string, e *entry) {
	if !e.owed && len(e.by) == 0 {
		delete(l.entries, key)
	}
}
