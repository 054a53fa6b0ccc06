package kafka

import (
	"sync"

	"github.com/IBM/sarama"
)

// recordOverhead is what a held record costs besides its key, value and
// headers: the message struct, its queue and tracker entries, allocator
// rounding. It keeps the budget honest for small records, where the bytes
// of the record itself are not most of what it takes.
const recordOverhead = 256

// heldBytes is what msg counts against the byte budget while it is held.
func heldBytes(msg *sarama.ConsumerMessage) int64 {
	n := int64(recordOverhead + len(msg.Key) + len(msg.Value))
	for _, h := range msg.Headers {
		if h != nil {
			n += int64(len(h.Key) + len(h.Value))
		}
	}
	return n
}

// detach returns a copy of msg whose key, value and headers live in one
// allocation of their own. Sarama's records are slices of the fetch
// response they came in, which holds every partition's records of that
// fetch: a held record that shared it would keep the whole response alive,
// and the budget would count a fraction of what memory holds.
func detach(msg *sarama.ConsumerMessage) *sarama.ConsumerMessage {
	size := len(msg.Key) + len(msg.Value)
	for _, h := range msg.Headers {
		if h != nil {
			size += len(h.Key) + len(h.Value)
		}
	}
	buf := make([]byte, 0, size)
	clone := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	out := *msg
	out.Key = clone(msg.Key)
	out.Value = clone(msg.Value)
	if msg.Headers != nil {
		out.Headers = make([]*sarama.RecordHeader, 0, len(msg.Headers))
		for _, h := range msg.Headers {
			if h == nil {
				continue
			}
			out.Headers = append(out.Headers, &sarama.RecordHeader{Key: clone(h.Key), Value: clone(h.Value)})
		}
	}
	return &out
}

// byteBudget bounds the bytes of records held (taken from Sarama and not
// finished) across every partition of a Run. It is safe for concurrent use.
//
// A record is admitted when it fits beside the records held, or alone when
// nothing is held, so one record larger than the whole budget still makes
// progress. Admission is first come, first served once anyone waits: a
// large record at the head of the queue is not overtaken by smaller ones
// that happen to fit, so it is admitted once enough held records finish.
// Held records finish without needing the budget, so waiting always ends.
type byteBudget struct {
	limit int64

	mu    sync.Mutex
	used  int64        // guarded by mu
	queue []*admission // waiting, in arrival order; guarded by mu
}

type admission struct {
	n     int64
	ready chan struct{} // closed once admitted: used already counts n
}

func newByteBudget(limit int64) *byteBudget { return &byteBudget{limit: limit} }

// fits reports whether n bytes may be admitted now. The caller holds mu.
func (b *byteBudget) fits(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

// acquire waits until n bytes are admitted and reports true, or reports
// false once done is closed first, having admitted nothing.
func (b *byteBudget) acquire(n int64, done <-chan struct{}) bool {
	b.mu.Lock()
	if len(b.queue) == 0 && b.fits(n) {
		b.used += n
		b.mu.Unlock()
		return true
	}
	a := &admission{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, a)
	b.mu.Unlock()

	select {
	case <-a.ready:
		return true
	case <-done:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-a.ready:
		// Admitted as done closed: give it back.
		b.used -= n
	default:
		for i, q := range b.queue {
			if q == a {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	// The head may have changed, or room been given back.
	b.admitLocked()
	return false
}

// release gives back n bytes admitted by acquire.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.admitLocked()
}

// admitLocked admits waiting records in order while the head fits. The
// caller holds mu.
func (b *byteBudget) admitLocked() {
	for len(b.queue) > 0 && b.fits(b.queue[0].n) {
		a := b.queue[0]
		b.queue[0] = nil
		b.queue = b.queue[1:]
		b.used += a.n
		close(a.ready)
	}
}

// held returns the bytes admitted and not yet released.
func (b *byteBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
