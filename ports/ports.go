// Package ports holds the interfaces the domain depends on (EventSource,
// IdempotencyStore, Notifier, Observer), the plain types that cross them,
// and the rules their users share, each stated once: when a lease has
// passed (Lease.Passed), how to wait and how to pace a repeating log
// (Sleep, LogLimit). It imports nothing of this module, so every adapter
// and the domain can depend on it without a cycle.
package ports

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Channel names the way a notification reaches a customer. What a channel
// is (its recipient field, its address rules, its templates, its
// notifier) is declared where the worker is wired, as one value per
// channel (domain.ChannelSpec); the worker knows the channels it is given.
type Channel string

// The names of the two channels every worker has.
const (
	ChannelSMS   Channel = "sms"
	ChannelEmail Channel = "email"
)

// Record is one message as the event source delivered it, before decoding.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
	// DeliveryID names this delivery of the record, a fact of its event
	// source: every attempt the source (or its retry policy) makes at the
	// record while it holds it carries the same id, and no other record in
	// this process carries it (see NewDeliveryID). A Handler may remember
	// what one attempt did for the next attempts with the same id. Zero:
	// no attempts share anything.
	DeliveryID uint64
	// Headers are the record's headers, in the order the source carried
	// them; nil when it had none. Keys may repeat (Kafka allows it). They
	// carry what the producer passes along besides the event, such as the
	// W3C trace context (traceparent, tracestate). A Handler reads them and
	// must not modify them: the source may share their bytes with its own
	// copy of the record (for a dead letter, say).
	Headers []Header
}

// Header is one header of a Record: a key and its value, as bytes.
type Header struct {
	Key   string
	Value []byte
}

// Origin is "topic/partition@offset", the record's place in the log.
func (r Record) Origin() string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "@" + strconv.FormatInt(r.Offset, 10)
}

// Handler handles one record. The error it returns tells the event source
// what to do with the record; see Permanent, Unavailable, Paced and KindOf.
//
// Handle must be safe for concurrent use: the event source may handle records
// with different keys at the same time. It never sees two records with the
// same key at once, and sees one key's records in log order.
type Handler interface {
	Handle(ctx context.Context, rec Record) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, rec Record) error

// Handle calls f(ctx, rec).
func (f HandlerFunc) Handle(ctx context.Context, rec Record) error { return f(ctx, rec) }

// EventSource is the driving side: it reads records and hands each to a
// Handler, at least once.
type EventSource interface {
	// Run delivers records to h until ctx is cancelled, then stops fetching,
	// lets the records in hand finish, commits what was handled and returns
	// nil. A record is acknowledged (and never redelivered by this source)
	// only after h returned nil for it, or after it was dead-lettered.
	// Any other return is a failure of the source itself.
	Run(ctx context.Context, h Handler) error
}

// Message is one notification, rendered and ready for one channel.
type Message struct {
	// IdempotencyKey identifies the notification across replays: the same
	// (event_id, channel) always yields the same key. A provider may use it
	// to collapse a duplicate downstream (the SMTP Message-ID does).
	IdempotencyKey string
	EventID        string
	Channel        Channel
	// To is the recipient's address on Channel, as the channel normalised
	// it (an E.164 phone number for SMS, a bare address for email).
	To string
	// ToMasked is To as the channel masks it for logs and errors
	// ("+1********67", "a***@example.com"): what anything but the notifier
	// itself shows of the address.
	ToMasked string
	ToName   string
	// Subject is a one-line title: the email's subject. Empty for a
	// channel without one (SMS).
	Subject string
	// Text is the message's body in plain text: the SMS, the email's
	// plain-text part.
	Text string
	// HTML is the body as HTML, for a channel that renders one (email).
	HTML string
	// Fingerprint digests what decided this message (domain.Fingerprint);
	// the sent record keeps it.
	Fingerprint string
}

// Receipt is the provider's word that a message was accepted.
type Receipt struct {
	// ProviderID is the provider's message id (Twilio's SID, the SMTP
	// Message-ID).
	ProviderID string
	SentAt     time.Time
	// Fingerprint is a short digest of what decided the message (see
	// domain.Fingerprint), kept with the sent record so a later event that
	// reuses the event_id for another message is told apart. Empty in a
	// record written before fingerprints existed. A store may keep only its
	// first FingerprintKept characters (see IdempotencyStore.Record).
	Fingerprint string
}

// FingerprintKept is the fewest characters of a Receipt's Fingerprint a
// store keeps: a record's fingerprint that is a prefix of at least this
// many characters of a message's one matches it.
const FingerprintKept = 5

// Notifier sends messages on one channel.
type Notifier interface {
	// Send delivers m and returns the provider's receipt. It honours ctx's
	// deadline. An error that no retry can cure (an invalid number, a
	// rejected address) is wrapped with Permanent; an error after which
	// the provider may have accepted the message (the request was written
	// and no answer came, or a gateway answered in the provider's place)
	// wraps ErrOutcomeUnknown; every other error is retryable and means the
	// message was not accepted. An error wrapping ErrRecipientOptedOut
	// means the provider refused the message because the recipient asked
	// for no more: its Receipt's ProviderID then names the provider's
	// verdict (ProviderIDOptedOut and its code), and is what the sent record
	// keeps. Send must be safe for concurrent use.
	Send(ctx context.Context, m Message) (Receipt, error)
}

// ErrRecipientOptedOut is wrapped by a Notifier's error when the provider
// refused the message because the recipient opted out (replied STOP to an
// SMS). Nothing went out, and nothing ever will to that address until the
// recipient opts in again: it is the customer's choice, not a failure. The
// domain records it like a sent notification (OutcomeOptedOut).
var ErrRecipientOptedOut = errors.New("recipient opted out: the provider refuses to deliver to this address")

// ProviderIDOptedOut is the ProviderID a sent record keeps for a recipient
// who opted out: a Notifier's receipt for ErrRecipientOptedOut names it,
// followed by ":" and the provider's own code ("opted-out:21610" for
// Twilio), and the domain records it bare when the receipt names none.
const ProviderIDOptedOut = "opted-out"

// ErrOutcomeUnknown is wrapped by a Notifier's error when the provider may
// have accepted the message: sending it again could duplicate it, and
// giving up could lose it. The caller keeps the claim and reconciles.
var ErrOutcomeUnknown = errors.New("send outcome unknown: the provider may have accepted the message")

// Reconciler is implemented by a Notifier whose provider can be asked what
// it accepted.
type Reconciler interface {
	// Reconcile reports whether the provider accepted, from w.Sender to
	// m.To, a message whose text w.Sent recognises, in the window
	// [w.Since, w.Until]: Delivered with the provider's receipt, or not. It
	// answers "not delivered" only when asked at least Lag after w.Until.
	// An error means the provider cannot tell now (its API failed, or the
	// window is too recent for its listing to be complete); asking again
	// later may tell. Reconcile must be safe for concurrent use and honour
	// ctx's deadline.
	Reconcile(ctx context.Context, m Message, w Window) (Reconciliation, error)
	// Sender names whom the notifier's sends go out from (a phone number,
	// a messaging service), in the form Window.Sender takes; it never
	// changes while the notifier lives. The domain writes it into a claim
	// before the send, so that the send is asked about under the sender it
	// used, whatever a later process, configured otherwise, sends from.
	Sender() string
	// Lag is how long after a window ends the provider may still not list
	// a message it accepted in it: the time Reconcile waits before it
	// answers "not delivered".
	Lag() time.Duration
}

// Window is a send whose outcome is unknown, as a Reconciler looks for it.
type Window struct {
	// Since and Until bound when the provider may have accepted it.
	Since, Until time.Time
	// Sender is the sender the send used (Reconciler.Sender when it was
	// made); empty when unknown (a claim written before claims kept it):
	// the Reconciler's own sender then.
	Sender string
	// Sent reports whether text, a message's text as the provider lists
	// it, is the text that was sent. It is the caller's rule (the domain
	// compares digests of what was sent, which a template or an event
	// changed since would not match), so a Reconciler never compares
	// texts itself. Safe for concurrent use.
	Sent func(text string) bool
}

// Reconciliation is what a Reconciler found.
type Reconciliation struct {
	Delivered bool
	Receipt   Receipt // when Delivered
}

// ReconcileResult names how one reconciliation ended, for metrics.
type ReconcileResult string

// The results a reconciliation reports.
const (
	ReconciledDelivered    ReconcileResult = "delivered"
	ReconciledNotDelivered ReconcileResult = "not_delivered"
	ReconcileCannotTell    ReconcileResult = "cannot_tell"
)

// ClaimState is what a Claim found under the key.
type ClaimState int

const (
	// Claimed: the key was free and now holds our pending claim.
	Claimed ClaimState = iota + 1
	// AlreadySent: the key holds a sent record; Claim.Receipt is set.
	AlreadySent
	// InFlight: the key holds a pending claim whose lease is live;
	// Claim.Lease is its lease.
	InFlight
	// TakenOver: the key held a pending claim whose lease had passed (its
	// worker died, or lost track of its send) and now holds ours;
	// Claim.Lease is the lease taken over, whose history (First,
	// FirstUntil, Digest, Sender) our claim now carries. A send made under
	// that history may have reached the provider: reconcile before
	// sending, in the window from Lease.First to Lease.FirstUntil.
	TakenOver
)

// String returns the state's name, for logs and test failures.
func (s ClaimState) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case AlreadySent:
		return "already_sent"
	case InFlight:
		return "in_flight"
	case TakenOver:
		return "taken_over"
	}
	return "ClaimState(" + strconv.Itoa(int(s)) + ")"
}

// Claim is the result of IdempotencyStore.Claim.
type Claim struct {
	State ClaimState
	// Receipt is the sent record, when State is AlreadySent.
	Receipt Receipt
	// Lease is the pending claim found, when State is InFlight (it may be
	// the caller's own, from an earlier attempt) or TakenOver.
	Lease Lease
}

// Lease is a pending claim: whose it is and when it runs out. Until its
// lease passes (Passed states when), a claim's worker is taken to be
// sending; after, the claim is abandoned, and the next Claim of its key
// takes it over. The key itself outlives the lease, so an abandoned claim
// is found rather than forgotten.
type Lease struct {
	Token string
	Start time.Time // when the claim was made
	Until time.Time // when the lease runs out
	// First, FirstUntil, Digest and Sender are the claim's history, which
	// a takeover carries on unchanged: a claim that takes another over
	// keeps the history of the claim it replaced, so that however many
	// takeovers follow, they name the one send that may have reached the
	// provider under the key (a taker reconciles, and sends only under a
	// claim of its own) and the window it may have reached it in. First
	// and FirstUntil are that history's first claim's Start and Until (for
	// a claim that took nothing over, its own). Digest is the digest of the
	// text that first claim was made to send, and Sender the sender
	// (Claim's digest and sender); each empty when it was not given.
	First, FirstUntil time.Time
	Digest, Sender    string
}

// IdempotencyStore remembers which notifications were sent. Keys are
// independent of each other; implementations may add a prefix of their own.
// Every method must be safe for concurrent use, and must return promptly when
// ctx is done. ctx's deadline is the call's whole budget, set by the caller
// (the domain gives every call IDEMPOTENCY_TIMEOUT): a store adds no timeout
// of its own to a call that has one. Any error means "the store could not
// answer": the caller applies its failure mode.
type IdempotencyStore interface {
	// Claim atomically sets key to a pending claim owned by token, with a
	// lease of ttl from now, if key is absent (Claimed) or holds a claim
	// whose lease has passed (TakenOver: of many concurrent callers, one
	// takes it over, the others see InFlight). Otherwise it leaves key alone
	// and reports what it holds. A claim's key lives longer than its lease,
	// so that an abandoned claim can be found; Record or Release ends it.
	//
	// digest names the text the caller is about to send (it must not
	// contain '.'), and sender whom from (Reconciler.Sender); empty: none.
	// A fresh claim starts a history (see Lease) with its own lease, digest
	// and sender; a claim taking another over keeps the history of the one
	// it replaced, and ignores digest and sender. The claim a caller holds
	// after Claimed or TakenOver is reported, with its history, to whoever
	// finds it next.
	//
	// An error may come with State TakenOver and the lease of an abandoned
	// claim the store found under key: the store took it over but cannot
	// vouch for it (a replica did not acknowledge it), or its takeover
	// failed and may or may not have been applied (the server refused or
	// cut short a later command of the call). The caller must not treat
	// that as a claim; should it send anyway (failing open), it reconciles
	// that lease's send first. Any other error, one before the store found
	// an abandoned claim, comes with a zero Claim.
	Claim(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (Claim, error)
	// Record sets key to a sent record holding r, living ttl, whatever key
	// held before. A store may keep less than r: at the least the send time
	// to the second and the first FingerprintKept characters of the
	// fingerprint (or, for a rare fingerprint it cannot tell from none,
	// none); the provider id may be dropped. Claim then reports what was
	// kept.
	Record(ctx context.Context, key string, r Receipt, ttl time.Duration) error
	// Release deletes key if and only if it holds a pending claim owned by
	// token. Releasing a key owned by another token, already sent, or absent
	// is a no-op, not an error.
	Release(ctx context.Context, key, token string) error
}

// Outcome is how one notification ended.
type Outcome string

// The outcomes the domain reports.
const (
	OutcomeSent            Outcome = "sent"
	OutcomeDuplicate       Outcome = "duplicate"
	OutcomeFailedRetryable Outcome = "failed_retryable"
	OutcomeFailedPermanent Outcome = "failed_permanent"
	// OutcomeUnknown: the provider may or may not have accepted the
	// message; the claim is kept and the send is reconciled.
	OutcomeUnknown Outcome = "unknown"
	// OutcomeConflict: the event_id was already sent for another message
	// (its fingerprint differs); nothing is sent and the record is
	// dead-lettered.
	OutcomeConflict Outcome = "conflict"
	// OutcomeOptedOut: the provider refused the message because the
	// recipient asked for no more (ErrRecipientOptedOut). It is recorded
	// like a sent notification, so a replay is a duplicate, and the record
	// is acknowledged, not dead-lettered.
	OutcomeOptedOut Outcome = "recipient_opted_out"
	// OutcomeStale: the event is older than its maximum age; nothing is
	// claimed or sent, and the record is acknowledged.
	OutcomeStale Outcome = "stale"
)

// Outcomes lists every Outcome, for metrics that must expose all of them.
var Outcomes = []Outcome{OutcomeSent, OutcomeDuplicate, OutcomeFailedRetryable, OutcomeFailedPermanent, OutcomeUnknown, OutcomeConflict, OutcomeOptedOut, OutcomeStale}

// Observer is told how every notification ended. It exists so metrics can be
// kept outside the domain. Observe must be safe for concurrent use and must
// not block.
type Observer interface {
	Observe(ch Channel, o Outcome)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ch Channel, o Outcome)

// Observe calls f(ch, o).
func (f ObserverFunc) Observe(ch Channel, o Outcome) { f(ch, o) }
