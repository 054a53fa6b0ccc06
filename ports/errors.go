package ports

import "errors"

// Kind classifies an error by what the event source should do with the record
// that produced it. Errors are classified at the edge that understands them
// (a Notifier knows a Twilio 21211 is final) and acted on at the edge that
// owns the record (the consumer acks, retries or dead-letters).
type Kind int

const (
	// Retryable: try the record again with backoff; after the retry budget,
	// dead-letter it. The default for any unclassified error.
	Retryable Kind = iota
	// Permanent: the same input fails the same way every time (poison record,
	// invalid number, rejected address). Dead-letter it now.
	Permanent
	// Unavailable: a dependency the operator chose to wait for is down (the
	// store, in the closed failure mode). Retry with backoff for as long as it
	// takes; never dead-letter for it.
	Unavailable
	// Paced: nothing is wrong, the record waits for a time it was given:
	// its sender's pace (no rate-limit turn within the wait allowed, or the
	// provider refused the send until later), or the next time the provider
	// is asked about a send of unknown outcome. Retry as soon as the source
	// allows, for as long as it takes, spending no retry budget and growing
	// no backoff: the wait was taken, as far as one attempt may, before the
	// error was returned. Never dead-letter for it.
	Paced
)

// String returns the kind's name, as the dead letter headers carry it.
func (k Kind) String() string {
	switch k {
	case Permanent:
		return "permanent"
	case Unavailable:
		return "unavailable"
	case Paced:
		return "paced"
	}
	return "retryable"
}

type classified struct {
	kind Kind
	err  error
}

func (e *classified) Error() string { return e.err.Error() }
func (e *classified) Unwrap() error { return e.err }

// MarkPermanent wraps err as Permanent. It returns nil for a nil err.
func MarkPermanent(err error) error { return mark(Permanent, err) }

// MarkUnavailable wraps err as Unavailable. It returns nil for a nil err.
func MarkUnavailable(err error) error { return mark(Unavailable, err) }

// MarkPaced wraps err as Paced. It returns nil for a nil err.
func MarkPaced(err error) error { return mark(Paced, err) }

func mark(k Kind, err error) error {
	if err == nil {
		return nil
	}
	return &classified{kind: k, err: err}
}

// KindOf returns the kind of the outermost classified error in err's chain,
// or Retryable when there is none.
func KindOf(err error) Kind {
	var c *classified
	if errors.As(err, &c) {
		return c.kind
	}
	return Retryable
}
