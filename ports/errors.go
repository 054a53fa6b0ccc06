package ports

import (
	"errors"
	"time"
)

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
	// is asked about a send of unknown outcome. Retry after the wait the
	// error carries (PacedFor; none: the wait was taken before the error
	// was returned), or as soon as the source allows, for as long as it
	// takes, spending no retry budget and growing no backoff. Never
	// dead-letter for it.
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

// MarkPacedFor wraps err as Paced, due again d from now: the record's
// next attempt comes no sooner, and its handler need not wait in the
// meantime. It returns nil for a nil err.
func MarkPacedFor(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &pacedFor{err: MarkPaced(err), d: max(d, 0)}
}

// PacedFor returns how long from now the record that failed with err is
// due again: the d of MarkPacedFor, found through wrapping; for errors
// joined together (errors.Join, the failures of a record's several
// notifications), the least of theirs, and 0 if any of them carries none:
// a record is due once the first of its failures is.
func PacedFor(err error) time.Duration {
	switch e := err.(type) {
	case *pacedFor:
		return e.d
	case interface{ Unwrap() []error }:
		least := time.Duration(-1)
		for _, one := range e.Unwrap() {
			if d := PacedFor(one); least < 0 || d < least {
				least = d
			}
		}
		return max(least, 0)
	case interface{ Unwrap() error }:
		return PacedFor(e.Unwrap())
	}
	return 0
}

type pacedFor struct {
	err error
	d   time.Duration
}

func (e *pacedFor) Error() string { return e.err.Error() }
func (e *pacedFor) Unwrap() error { return e.err }

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
