package ports

import (
	"context"
	"errors"
)

// Middleware wraps a Handler with one rule of record policy (retry, dead
// letters, panic recovery, size limits). It returns a Handler with the same
// contract as the one it wraps.
type Middleware func(Handler) Handler

// DeadLetterSink keeps the records that cannot be handled, where an operator
// finds them with the reason.
type DeadLetterSink interface {
	// DeadLetter writes rec with its kind and reason. It returns nil once
	// the dead letter is durably written, so the record may be
	// acknowledged; any error means it was not written now, and the caller
	// may try again. It honours ctx, must not modify rec, and must be safe
	// for concurrent use.
	DeadLetter(ctx context.Context, rec Record, kind Kind, reason string) error
}

// ErrStopping is returned by a Handler that gave up on a record because its
// event source is stopping (a revoke or a shutdown): the record is not
// finished, and the source leaves it to be delivered again.
var ErrStopping = errors.New("ports: event source stopping")

// Delivery is what an event source tells the handlers of one record about
// itself, through the handler's context (see WithDelivery).
type Delivery struct {
	// Stopping is closed once the source starts no new work for the
	// record: a wait between attempts ends, and no attempt starts. Nil
	// (never closed) when the source sets no Delivery.
	Stopping <-chan struct{}
	// Ended is closed once the delivery is over: no attempt carrying its
	// Record.DeliveryID is running or follows, however the record ended
	// (finished, dead-lettered, its retries spent, left for replay). A
	// Handler drops then what it kept for the delivery's attempts. Nil when
	// the source does not say: such a Handler keeps it until it expires.
	Ended <-chan struct{}
}

type deliveryKey struct{}

// WithDelivery returns ctx carrying d. Only an event source calls it, or
// the retry policy for a record it gave its DeliveryID.
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// DeliveryOf returns the Delivery in ctx, or the zero Delivery (never
// stopping) when ctx carries none.
func DeliveryOf(ctx context.Context) Delivery {
	d, _ := ctx.Value(deliveryKey{}).(Delivery)
	return d
}
