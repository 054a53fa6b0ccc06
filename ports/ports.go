// Package ports holds the interfaces the domain depends on (EventSource,
// IdempotencyStore, Notifier, Observer) and the plain types that cross them.
// It imports nothing of this module, so every adapter and the domain can
// depend on it without a cycle.
package ports

import (
	"context"
	"strconv"
	"time"
)

// Channel names the way a notification reaches a customer.
type Channel string

// The channels the worker knows. A new channel is a new constant here, a
// Notifier adapter, and one line of wiring in cmd.
const (
	ChannelSMS   Channel = "sms"
	ChannelEmail Channel = "email"
)

// Channels lists every known channel, in the order a fan-out sends them.
var Channels = []Channel{ChannelSMS, ChannelEmail}

// Valid reports whether c is one of Channels.
func (c Channel) Valid() bool {
	for _, k := range Channels {
		if c == k {
			return true
		}
	}
	return false
}

// Record is one message as the event source delivered it, before decoding.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
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
// what to do with the record; see Permanent, Unavailable and KindOf.
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
	// To is an E.164 phone number for SMS, an email address for email.
	To     string
	ToName string
	// Subject and HTML are used by email only.
	Subject string
	// Text is the SMS body, or the email's plain-text part.
	Text string
	HTML string
}

// Receipt is the provider's word that a message was accepted.
type Receipt struct {
	// ProviderID is the provider's message id (Twilio's SID, the SMTP
	// Message-ID).
	ProviderID string
	SentAt     time.Time
}

// Notifier sends messages on one channel.
type Notifier interface {
	// Send delivers m and returns the provider's receipt. It honours ctx's
	// deadline. An error that no retry can cure (an invalid number, a
	// rejected address) is wrapped with Permanent; every other error is
	// retryable. Send must be safe for concurrent use.
	Send(ctx context.Context, m Message) (Receipt, error)
}

// ClaimState is what a Claim found under the key.
type ClaimState int

const (
	// Claimed: the key was free and now holds our pending claim.
	Claimed ClaimState = iota + 1
	// AlreadySent: the key holds a sent record; Claim.Receipt is set.
	AlreadySent
	// InFlight: the key holds a pending claim; Claim.Owner is its token.
	InFlight
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
	}
	return "ClaimState(" + strconv.Itoa(int(s)) + ")"
}

// Claim is the result of IdempotencyStore.Claim.
type Claim struct {
	State ClaimState
	// Receipt is the sent record, when State is AlreadySent.
	Receipt Receipt
	// Owner is the token of the pending claim, when State is InFlight (it may
	// be the caller's own token, from an earlier attempt).
	Owner string
}

// IdempotencyStore remembers which notifications were sent. Keys are
// independent of each other; implementations may add a prefix of their own.
// Every method must be safe for concurrent use, and must return promptly when
// ctx is done. Any error means "the store could not answer": the caller
// applies its failure mode.
type IdempotencyStore interface {
	// Claim atomically sets key to a pending claim owned by token, living
	// ttl, if and only if key is absent; otherwise it leaves key alone and
	// reports what it holds.
	Claim(ctx context.Context, key, token string, ttl time.Duration) (Claim, error)
	// Record sets key to a sent record holding r, living ttl, whatever key
	// held before.
	Record(ctx context.Context, key string, r Receipt, ttl time.Duration) error
	// Release deletes key if and only if it holds a pending claim owned by
	// token. Releasing a key owned by another token, already sent, or absent
	// is a no-op, not an error.
	Release(ctx context.Context, key, token string) error
}

// Outcome is how one notification ended.
type Outcome string

// The outcomes the domain reports (DESIGN.md section 4).
const (
	OutcomeSent            Outcome = "sent"
	OutcomeDuplicate       Outcome = "duplicate"
	OutcomeFailedRetryable Outcome = "failed_retryable"
	OutcomeFailedPermanent Outcome = "failed_permanent"
)

// Outcomes lists every Outcome, for metrics that must expose all of them.
var Outcomes = []Outcome{OutcomeSent, OutcomeDuplicate, OutcomeFailedRetryable, OutcomeFailedPermanent}

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
