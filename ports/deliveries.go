package ports

import "sync/atomic"

var lastDeliveryID atomic.Uint64

// NewDeliveryID returns a Record.DeliveryID no other call in this process
// returns, and never zero. An event source (or the retry policy, for a
// record its source left without one) takes a record's id from here, once,
// before the first attempt. Safe for concurrent use.
func NewDeliveryID() uint64 { return lastDeliveryID.Add(1) }
