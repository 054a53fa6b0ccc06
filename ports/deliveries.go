package ports

import "sync"

// Deliveries remembers which notifications of one record were delivered, so
// that a later attempt at the same record never sends them again, whatever
// the idempotency store can confirm.
//
// An event source that retries records makes one Deliveries per record,
// before the first attempt, and passes the same one in Record.Deliveries to
// every attempt. A Handler adds each notification it delivered, by
// idempotency key, and skips the keys already there. Deliveries is safe for
// concurrent use; a nil *Deliveries remembers nothing and holds nothing.
type Deliveries struct {
	mu   sync.Mutex
	done map[string]Receipt
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
		d.done = make(map[string]Receipt, len(Channels))
	}
	d.done[key] = r
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
