package domain

import (
	"container/list"
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// journal is this process's memory of what it delivered, by idempotency
// key, besides the store. It holds two kinds of entry:
//
//   - a delivered notification (delivered): its receipt, whether its sent
//     record is still owed to the store, and the deliveries
//     (ports.Record.DeliveryID) that delivered it and have not finished;
//   - a send whose outcome is unknown (unknownSend), per key and delivery.
//
// It answers three questions. Was key delivered by this same delivery? Then
// a retry of the record skips it silently, whatever the store can confirm.
// Is key's record owed? Then any other delivery this process handles is a
// duplicate (the store cannot tell it). Did this delivery leave an unknown
// send under key? Then its next attempt reconciles it.
//
// A delivered entry whose record is written and whose deliveries have all
// finished leaves the journal; so does an unknown send when its delivery
// finishes or it is reconciled. A delivery finishes with its record's last
// attempt, or when its event source ends it (see watch). Each entry is
// kept at most maxAge from when it was entered. Nothing else drops an
// entry: a debt is kept until the store takes it, and what an unfinished
// delivery needs is kept for its retries, so a delivery that delivered a
// notification always skips it on its retries. The owed records are bounded
// by admission instead (see admits): once max are owed, no new record is
// taken until the store takes some, while the deliveries already taken go
// on, so at most max plus what those deliver are owed. A delivery id of
// zero shares nothing between attempts: only an owed record is kept for
// it. It is safe for concurrent use.
//
// Its owed records are what the operator's documents call the ledger
// (IDEMPOTENCY_LEDGER_SIZE, notification_worker_ledger_owed). The journal
// protects only this process: a replay handled by another worker sees the
// store alone.
type journal struct {
	max    int
	maxAge time.Duration
	now    func() time.Time

	owedLen atomic.Int64 // owedList.Len(), readable without the lock

	mu       sync.Mutex
	sent     map[string]*delivered
	unknown  map[unknownKey]*unknownEntry
	owedList list.List           // of *delivered whose record is owed, oldest first
	watched  map[uint64]struct{} // the deliveries whose end watch waits for
	seq      uint64
}

// delivered is a notification this process delivered.
type delivered struct {
	key     string
	receipt ports.Receipt
	owed    bool          // the store has not confirmed its sent record
	by      []uint64      // the unfinished deliveries that delivered it
	at      time.Time     // when it was entered
	seq     uint64        // tells one entry of a key from a later one
	elem    *list.Element // in owedList, while owed
}

// owed is a delivered entry's debt as the drain and a duplicate see it: a
// copy, so that settling it is refused once the key was entered again.
type owed struct {
	key     string
	receipt ports.Receipt
	seq     uint64
}

// unknownSend is a send whose outcome an attempt could not learn, and
// where its reconciliation stands.
type unknownSend struct {
	// Token is the claim the attempt keeps for it: the one it was sent
	// under, or the one that took it over.
	Token string
	// Since and Until bound the window in which the provider may have
	// accepted it, fixed by the send: from its start to when it gave up
	// waiting, or, for a claim taken over, its history's first claim's
	// lease (ports.Lease.First, FirstUntil; a zero Until: now).
	Since, Until time.Time
	// Digest and Sender are the digest of the text sent and the sender it
	// used (see ports.Lease); empty when unknown, for a claim taken over
	// that carried none.
	Digest, Sender string
	// Ours says the send was the delivery's own; else it was made under a
	// claim the delivery took over.
	Ours bool
	// AtOnce says it is asked about at once, before its listing is final:
	// it is the delivery's own send, or the delivery took over the claim
	// it was made under. (A taker of a takeover waits for the final
	// listing: its predecessor may have asked at once.)
	AtOnce bool
	// Asked is when the delivery last asked the provider about it; zero:
	// never.
	Asked time.Time
}

type unknownKey struct {
	key      string
	delivery uint64
}

type unknownEntry struct {
	unknownKey
	send unknownSend
	at   time.Time
}

func newJournal(max int, maxAge time.Duration, now func() time.Time) *journal {
	return &journal{max: max, maxAge: maxAge, now: now, sent: map[string]*delivered{}, unknown: map[unknownKey]*unknownEntry{}, watched: map[uint64]struct{}{}}
}

// deliver enters key as delivered by delivery with r, its record owed or
// written, and drops delivery's unknown send of key. An earlier entry of
// key takes the new receipt and state.
func (j *journal) deliver(key string, delivery uint64, r ports.Receipt, isOwed bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropUnknownLocked(unknownKey{key, delivery})
	e := j.sent[key]
	if e == nil {
		if !isOwed && delivery == 0 {
			return // nobody would ask
		}
		e = &delivered{key: key}
		j.sent[key] = e
	} else {
		j.unlinkLocked(e)
	}
	j.seq++
	e.receipt, e.owed, e.at, e.seq = r, isOwed, j.now(), j.seq
	if delivery != 0 && !contains(e.by, delivery) {
		e.by = append(e.by, delivery)
	}
	j.linkLocked(e)
}

// known is what the journal knows of one key, for one delivery.
type known struct {
	earlier    bool        // the delivery (non-zero) delivered it
	owed       owed        // its debt, when isOwed
	isOwed     bool        // its sent record is owed
	unknown    unknownSend // the delivery's send of unknown outcome, when hasUnknown
	hasUnknown bool
}

// lookup returns what the journal knows of key for delivery.
func (j *journal) lookup(key string, delivery uint64) known {
	j.mu.Lock()
	defer j.mu.Unlock()
	var k known
	if e := j.liveLocked(key); e != nil {
		k.earlier = delivery != 0 && contains(e.by, delivery)
		if e.owed {
			k.owed, k.isOwed = owed{key: e.key, receipt: e.receipt, seq: e.seq}, true
		}
	}
	if delivery != 0 {
		if u, ok := j.unknown[unknownKey{key, delivery}]; ok {
			if j.now().Sub(u.at) >= j.maxAge {
				j.dropUnknownLocked(u.unknownKey)
			} else {
				k.unknown, k.hasUnknown = u.send, true
			}
		}
	}
	return k
}

// owedRecord returns key's debt, if its record is owed.
func (j *journal) owedRecord(key string) (owed, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e := j.liveLocked(key); e != nil && e.owed {
		return owed{key: e.key, receipt: e.receipt, seq: e.seq}, true
	}
	return owed{}, false
}

// settle marks o's record written. The entry stays while a delivery that
// delivered it may retry; an entry of the same key entered after o is left
// alone.
func (j *journal) settle(o owed) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e := j.sent[o.key]
	if e == nil || e.seq != o.seq || !e.owed {
		return
	}
	j.dropDebtLocked(e)
}

// setUnknown enters delivery's send of key whose outcome is unknown.
func (j *journal) setUnknown(key string, delivery uint64, u unknownSend) {
	if delivery == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	k := unknownKey{key, delivery}
	j.dropUnknownLocked(k)
	j.unknown[k] = &unknownEntry{unknownKey: k, send: u, at: j.now()}
}

// forgetUnknown drops delivery's unknown send of key, once reconciled.
func (j *journal) forgetUnknown(key string, delivery uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropUnknownLocked(unknownKey{key, delivery})
}

// finish forgets what delivery left under key, once its record is finished:
// the delivery no longer vouches for key, and an entry whose record is
// written leaves. An owed entry stays until its record is written.
func (j *journal) finish(key string, delivery uint64) {
	if delivery == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropUnknownLocked(unknownKey{key, delivery})
	e := j.sent[key]
	if e == nil {
		return
	}
	for i, d := range e.by {
		if d == delivery {
			e.by = append(e.by[:i], e.by[i+1:]...)
			break
		}
	}
	if len(e.by) == 0 && !e.owed {
		j.removeLocked(e)
	}
}

// oldest returns up to n owed records, oldest first, dropping those past
// maxAge (their records would have expired in the store by now).
func (j *journal) oldest(n int) []owed {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := j.now()
	out := make([]owed, 0, min(n, j.owedList.Len()))
	for el := j.owedList.Front(); el != nil && len(out) < n; {
		next := el.Next()
		e := el.Value.(*delivered)
		if now.Sub(e.at) >= j.maxAge {
			j.removeLocked(e)
		} else {
			out = append(out, owed{key: e.key, receipt: e.receipt, seq: e.seq})
		}
		el = next
	}
	return out
}

// owedCount returns how many records are owed, without taking the lock.
func (j *journal) owedCount() int { return int(j.owedLen.Load()) }

// admits reports whether an attempt by delivery at a record of msgs may go
// on: while fewer than max records are owed, or when delivery holds an
// entry under one of their keys (an earlier attempt delivered it or left
// it an unknown send), so that a delivery is never refused the room it
// holds. An attempt not admitted must send nothing.
func (j *journal) admits(delivery uint64, msgs []ports.Message) bool {
	if j.owedCount() < j.max {
		return true
	}
	if delivery == 0 {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, m := range msgs {
		if e := j.liveLocked(m.IdempotencyKey); e != nil && contains(e.by, delivery) {
			return true
		}
		if _, ok := j.unknown[unknownKey{m.IdempotencyKey, delivery}]; ok {
			return true
		}
	}
	return false
}

// watch finishes delivery under the key of each of msgs once ended is
// closed, the event source's word that no attempt carrying it follows (see
// ports.Delivery.Ended): a record given up unfinished (its retries spent,
// its partition revoked) leaves nothing behind. One goroutine per delivery
// waits, however often it is called; a nil ended is never closed, and what
// such a delivery leaves is kept until it expires.
func (j *journal) watch(delivery uint64, msgs []ports.Message, ended <-chan struct{}) {
	if delivery == 0 || ended == nil {
		return
	}
	j.mu.Lock()
	_, ok := j.watched[delivery]
	j.watched[delivery] = struct{}{}
	j.mu.Unlock()
	if ok {
		return
	}
	go func() {
		<-ended
		for _, m := range msgs {
			j.finish(m.IdempotencyKey, delivery)
		}
		j.mu.Lock()
		delete(j.watched, delivery)
		j.mu.Unlock()
	}()
}

// liveLocked returns key's delivered entry, dropping it once past maxAge.
func (j *journal) liveLocked(key string) *delivered {
	e := j.sent[key]
	if e != nil && j.now().Sub(e.at) >= j.maxAge {
		j.removeLocked(e)
		return nil
	}
	return e
}

// dropDebtLocked makes owed entry e no longer owed: it leaves the journal,
// or stays for the unfinished deliveries that delivered it.
func (j *journal) dropDebtLocked(e *delivered) {
	j.unlinkLocked(e)
	e.owed = false
	if len(e.by) == 0 {
		delete(j.sent, e.key)
	}
}

func (j *journal) linkLocked(e *delivered) {
	if e.owed {
		e.elem = j.owedList.PushBack(e)
		j.owedLen.Store(int64(j.owedList.Len()))
	}
}

func (j *journal) unlinkLocked(e *delivered) {
	if e.owed {
		j.owedList.Remove(e.elem)
		j.owedLen.Store(int64(j.owedList.Len()))
	}
}

func (j *journal) removeLocked(e *delivered) {
	j.unlinkLocked(e)
	delete(j.sent, e.key)
}

func (j *journal) dropUnknownLocked(k unknownKey) {
	delete(j.unknown, k)
}

func contains(ids []uint64, id uint64) bool {
	for _, d := range ids {
		if d == id {
			return true
		}
	}
	return false
}

// record writes the sent record of key, living ttl, with the store timeout.
// It runs even when ctx is cancelled: the send it records has happened.
func (s *Service) record(ctx context.Context, key string, r ports.Receipt, ttl time.Duration) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StoreTimeout)
	defer cancel()
	return s.cfg.Store.Record(rctx, key, r, ttl)
}

// pay writes the record the journal owes for o, with what is left of its TTL
// since the send, and settles o once the store took it.
func (s *Service) pay(ctx context.Context, o owed) error {
	ttl := s.cfg.TTL - s.cfg.Now().Sub(o.receipt.SentAt)
	if ttl > 0 {
		if err := s.record(ctx, o.key, o.receipt, min(ttl, s.cfg.TTL)); err != nil {
			return err
		}
	}
	s.journal.settle(o)
	return nil
}

// payOwed writes o's owed record now, logging a write the store refused
// (the drain tries again).
func (s *Service) payOwed(ctx context.Context, log noteLog, o owed) {
	if err := s.pay(ctx, o); err != nil {
		s.logLimited(ctx, s.recordFail, log, slog.LevelWarn, "idempotency_record_failed",
			slog.String("error", err.Error()))
	}
}

// drainBatch is how many owed records one look at the journal takes,
// drainRetry how long the drain waits after a write the store refused, and
// finalRetry how long Close's final attempt waits after one.
const (
	drainBatch = 64
	drainRetry = time.Second
	finalRetry = 100 * time.Millisecond
)

// drainSoon makes sure a goroutine writes the journal's owed records while
// there are any: oldest first, waiting drainRetry after a write the store
// refused. At most one runs; it ends when nothing is owed or at Close.
func (s *Service) drainSoon() {
	if s.journal.owedCount() == 0 || !s.draining.CompareAndSwap(false, true) {
		return
	}
	s.drains.Add(1)
	go s.drain()
}

func (s *Service) drain() {
	defer s.drains.Done()
	for {
		for s.payOldest(s.closed) {
		}
		if s.journal.owedCount() > 0 {
			select {
			case <-s.closed:
				s.draining.Store(false)
				return
			case <-time.After(drainRetry):
				continue
			}
		}
		// Empty. A debt entered after the look above would find draining
		// still set and start no drain: look again once it is cleared.
		s.draining.Store(false)
		if s.journal.owedCount() == 0 || !s.draining.CompareAndSwap(false, true) {
			return
		}
	}
}

// payOldest writes one batch of owed records and reports whether all were
// written and more may be owed. It stops at the first write the store
// refuses, and before each write once stop is closed (nil: never).
func (s *Service) payOldest(stop <-chan struct{}) bool {
	batch := s.journal.oldest(drainBatch)
	for _, o := range batch {
		select {
		case <-stop:
			return false
		default:
		}
		if s.pay(context.Background(), o) != nil {
			return false
		}
	}
	return len(batch) > 0
}

// Close is CloseBy with no time to spare: one pass at the owed records.
func (s *Service) Close() { s.CloseBy(time.Time{}) }

// CloseBy stops the writing of owed records in the background, waits for
// it, and then makes a final attempt at the records still owed: oldest
// first, each write bounded by the store timeout, a pass ending at the
// first write the store refuses; passes repeat every finalRetry until
// nothing is owed or deadline has passed. A deadline already past still
// gets one pass, so CloseBy may end up to one store timeout after it.
//
// What is still owed then is lost with the process: a replay of it is
// protected by the store alone, and is sent again if the store has no
// record. So is every send still under way (a Handle that outlived the
// shutdown, in a notifier ignoring its context): the process may exit
// before it ends, and nothing writes a record after CloseBy. CloseBy
// logs owed_records_lost (error level, with count, and sending: those of
// them still under way), tells Config.OwedLost, and returns the count.
// A send it counted is not counted again however it ends, so the count
// may exceed what was lost (a send under way that then fails, or whose
// record the store takes), never fall below it. A Handle still running
// that owes a record it did not count (its send started after the count)
// reports it when it owes it: owed_records_lost with count 1, and
// Config.OwedLost(1).
//
// Handle must not be called after Close or CloseBy (one still running
// may end); only the first call does anything, later ones return 0.
func (s *Service) CloseBy(deadline time.Time) (lost int) {
	first := false
	s.closeOnce.Do(func() { close(s.closed); first = true })
	s.drains.Wait()
	if !first {
		return 0
	}
	for {
		for s.payOldest(nil) {
		}
		left := deadline.Sub(s.cfg.Now())
		if s.journal.owedCount() == 0 || left <= 0 {
			break
		}
		time.Sleep(min(finalRetry, left))
	}
	// oldest drops the entries past their TTL, whose records need no write.
	s.tally.Lock()
	lost = len(s.journal.oldest(math.MaxInt))
	sending := len(s.tally.sending)
	for n := range s.tally.sending {
		n.counted = true
	}
	s.tally.done = true
	s.tally.Unlock()
	s.reportLost(lost+sending, sending, "the store did not take these sent records before shutdown, or their sends were still under way; a replay of each is sent again unless the store holds its record")
	return lost + sending
}

// reportLost logs owed_records_lost with count n, of which sending were
// sends still under way, and tells Config.OwedLost; nothing when n is 0.
func (s *Service) reportLost(n, sending int, why string) {
	if n == 0 {
		return
	}
	s.cfg.Logger.Error("owed_records_lost",
		slog.Int("count", n),
		slog.Int("sending", sending),
		slog.String("error", why))
	s.cfg.OwedLost(n)
}
