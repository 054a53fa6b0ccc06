package ports

import (
	"sync"
	"time"
)

// Deliveries remembers which notifications of one record were delivered, so
// that a later attempt at the same record never sends them again, whatever
// the idempotency store can confirm; and which were sent with an outcome
// still unknown, so that a later attempt reconciles them instead.
//
// An event source that retries records makes one Deliveries per record,
// before the first attempt, and passes the same one in Record.Deliveries to
// every attempt. A Handler adds each notification it delivered, by
// idempotency key, and skips the keys already there. Deliveries is safe for
// concurrent use; a nil *Deliveries remembers nothing and holds nothing.
type Deliveries struct {
	mu      sync.Mutex
	done    map[string]Receipt
	unknown map[string]Unknown
}

// Unknown is a send whose outcome an attempt could not learn.
type Unknown struct {
	Token string // the claim it was sent under, which the attempt kept
	// Since and Until bound the window in which the provider may have
	// accepted it: from the send's start to when it gave up waiting (or to
	// the lease's end, for a claim taken over).
	Since, Until time.Time
	// Digest is the digest of the text sent (see Lease.Digest); empty when
	// unknown, for a claim taken over that carried none.
	Digest string
	First  time.Time // when its outcome was first found unknown
}

// NewDeliveries returns an empty Deliveries.
func NewDeliveries() *Deliveries { return &Deliveries{} }

// Add remembers that the notification under key was delivered with r.
func (d *Deliveries) Add(key string, r Receipt) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done == nil {
		d.done = make(map[string]Receipt)
	}
	d.done[key] = r
	delete(d.unknown, key)
}

// SetUnknown remembers that the send under key ended unknown, as u.
func (d *Deliveries) SetUnknown(key string, u Unknown) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.unknown == nil {
		d.unknown = make(map[string]Unknown, 1)
	}
	d.unknown[key] = u
}

// Unknown returns the unknown send under key, if an attempt left one.
func (d *Deliveries) Unknown(key string) (Unknown, bool) {
	if d == nil {
		return Unknown{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	u, ok := d.unknown[key]
	return u, ok
}

// ForgetUnknown drops key's unknown send, once it is reconciled.
func (d *Deliveries) ForgetUnknown(key string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.unknown, key)
}

// Lookup returns the receipt of the notification under key, and whether an
// earlier attempt delivered it.
func (d *Deliveries) Lookup(key string) (Receipt, bool) {
	if d == nil {
		return Receipt{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.done[key]
	return r, ok
}
