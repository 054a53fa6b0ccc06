package kafka

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/harborlight/notification-worker/policy"
)

// Defaults applied by NewConsumer and NewPublisher to zero Config fields.
const (
	DefaultMaxInFlight       = 64
	DefaultMaxBufferedBytes  = 32 << 20
	DefaultCommitInterval    = time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	DefaultSessionTimeout    = 10 * time.Second
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultLagInterval       = 5 * time.Second
	DefaultClientID          = "notification-worker"
)

// Rebalance strategies accepted in Config.RebalanceStrategy.
const (
	// StrategyCooperativeSticky: incremental cooperative rebalancing
	// (KIP-429). A rebalance revokes only the partitions that move; the
	// others keep being consumed through it. The default.
	StrategyCooperativeSticky = "cooperative-sticky"
	// StrategyRange: eager range assignment. Every rebalance revokes every
	// partition of every member.
	StrategyRange = "range"
	// StrategyCooperativeStickyRange offers both, cooperative-sticky
	// preferred, and speaks the eager protocol: the first step of the
	// migration of a group from range (see docs/runbook.md). A group whose
	// members all run it uses cooperative-sticky assignment, still eagerly.
	StrategyCooperativeStickyRange = "cooperative-sticky,range"
)

// rebalanceStrategies are the values RebalanceStrategy may take.
var rebalanceStrategies = []string{StrategyCooperativeSticky, StrategyRange, StrategyCooperativeStickyRange}

// SASL mechanisms accepted in Config.SASLMechanism.
const (
	SASLPlain       = "PLAIN"
	SASLSCRAMSHA256 = "SCRAM-SHA-256"
	SASLSCRAMSHA512 = "SCRAM-SHA-512"
)

// saslMechanisms are the values SASLMechanism may take.
var saslMechanisms = []string{SASLPlain, SASLSCRAMSHA256, SASLSCRAMSHA512}

// ErrInvalidConfig is wrapped by the error NewConsumer and NewPublisher return
// for a Config that cannot work; the message names every bad field.
var ErrInvalidConfig = errors.New("kafka: invalid config")

// Config configures the Consumer and the Publisher. Zero values take the
// defaults documented on each field.
type Config struct {
	Brokers []string
	Topic   string
	GroupID string
	// DLQTopic receives records that cannot be handled; default Topic+".dlq".
	DLQTopic string
	// ClientID is the client.id of every connection (the consumer group's,
	// the dead letter producer's, the Publisher's): brokers log it and
	// apply client quotas by it. Default DefaultClientID.
	ClientID string

	// MaxInFlight bounds the calls of the handler Run is given (behind
	// RunPolicy's middlewares: each attempt), across all partitions;
	// default 64. 1 runs strictly one call at a time. The consumer holds up
	// to 4*MaxInFlight records, within MaxBufferedBytes, fetched and
	// waiting (behind a busy key, for a slot, or between attempts).
	MaxInFlight int
	// MaxBufferedBytes bounds the bytes of the records the consumer holds,
	// across all its partitions: taken from the broker and not finished,
	// whether queued behind their key, waiting for a handling slot or in
	// the handler (each counts its key, value and headers plus a fixed
	// overhead). Once it is spent the consumer stops reading, and so
	// Sarama stops fetching, until records finish. A record larger than
	// the whole budget is admitted alone. Sarama's own read-ahead is sized
	// from it too (see saramaConfig). Default 32 MiB.
	MaxBufferedBytes int64

	// RetryInitialBackoff and RetryMaxBackoff shape the capped exponential
	// backoff (with jitter) between attempts to start a consumer group
	// session, and between the dead letter producer's retries; zero takes
	// policy.DefaultRetryInitialBackoff and policy.DefaultRetryMaxBackoff,
	// the same backoff the retry policy applies to records.
	RetryInitialBackoff, RetryMaxBackoff time.Duration

	// CommitInterval is how often marked offsets are committed; default 1s.
	// They are also committed when partitions are revoked and at shutdown.
	CommitInterval time.Duration
	// ShutdownTimeout is how long records in hand may finish after Run's ctx
	// is cancelled or the partitions are revoked; then the handler's context
	// is cancelled. Default 30s.
	ShutdownTimeout time.Duration

	// StallAfter, when positive, makes the consumer Wedged once any handler
	// call has run for longer than StallAfter. Set it well above the longest
	// a handler can legitimately take. Zero: only calls abandoned at a
	// revoke or shutdown, holding every slot, wedge the consumer.
	StallAfter time.Duration

	// SessionTimeout and HeartbeatInterval are the consumer group's liveness
	// settings; defaults 10s and 3s. A member learns of a rebalance at its
	// next heartbeat, so the interval bounds how fast partitions move.
	SessionTimeout, HeartbeatInterval time.Duration

	// GroupInstanceID, when set, makes this member a static member
	// (KIP-345) under that id, which must be unique in the group and stable
	// across restarts of the same replica (a StatefulSet's pod name). A
	// static member does not leave the group when Run returns: if it comes
	// back within SessionTimeout it gets its partitions back with no
	// rebalance; if it does not, its partitions stand still until
	// SessionTimeout has passed. Empty: a dynamic member, which leaves the
	// group at shutdown.
	GroupInstanceID string
	// RebalanceStrategy is StrategyCooperativeSticky (the default),
	// StrategyRange, or StrategyCooperativeStickyRange for the migration
	// from range.
	RebalanceStrategy string

	// LagInterval is how often the lag of the partitions held is read from
	// the broker (high-water mark minus the group's committed offset); it is
	// also read after each commit. Default 5s.
	LagInterval time.Duration

	// TLS enables TLS with this configuration; nil means plaintext.
	TLS *tls.Config
	// SASLMechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
	SASLMechanism              string
	SASLUsername, SASLPassword string

	// Logger receives the adapter's logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics is told about lag and abandoned handler calls; nil means
	// none.
	Metrics Metrics
}

// Metrics receives the consumer's instrumentation. It is declared here, not
// imported, so the metrics adapter satisfies it without importing this
// package. Implementations must be safe for concurrent use and must not block.
type Metrics interface {
	ConsumerLag(topic string, partition int32, lag int64)
	// HandlersAbandoned adds delta to the handler calls given up on at a
	// revoke or shutdown that are still running (see Consumer.Wedged):
	// positive when a partition abandons them, -1 as each returns.
	HandlersAbandoned(delta int)
}

type noMetrics struct{}

func (noMetrics) ConsumerLag(string, int32, int64) {}
func (noMetrics) HandlersAbandoned(int)            {}

// withDefaults returns a copy of cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	if cfg.DLQTopic == "" && cfg.Topic != "" {
		cfg.DLQTopic = cfg.Topic + ".dlq"
	}
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)
	cfg.MaxBufferedBytes = cmp.Or(cfg.MaxBufferedBytes, DefaultMaxBufferedBytes)
	cfg.RetryInitialBackoff = cmp.Or(cfg.RetryInitialBackoff, policy.DefaultRetryInitialBackoff)
	cfg.RetryMaxBackoff = cmp.Or(cfg.RetryMaxBackoff, policy.DefaultRetryMaxBackoff)
	cfg.CommitInterval = cmp.Or(cfg.CommitInterval, DefaultCommitInterval)
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, DefaultShutdownTimeout)
	cfg.SessionTimeout = cmp.Or(cfg.SessionTimeout, DefaultSessionTimeout)
	cfg.HeartbeatInterval = cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval)
	cfg.LagInterval = cmp.Or(cfg.LagInterval, DefaultLagInterval)
	cfg.RebalanceStrategy = cmp.Or(cfg.RebalanceStrategy, StrategyCooperativeSticky)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	return cfg
}

// validate reports every problem at once, so an operator fixes them in one go.
// consumer says whether the consumer-only fields are required.
func (cfg Config) validate(consumer bool) error {
	var bad []string
	if len(cfg.Brokers) == 0 {
		bad = append(bad, "Brokers is empty")
	}
	if slices.ContainsFunc(cfg.Brokers, func(b string) bool { return strings.TrimSpace(b) == "" }) {
		bad = append(bad, "Brokers holds an empty address")
	}
	if consumer {
		bad = append(bad, cfg.consumerProblems()...)
	}
	for _, p := range []struct {
		name string
		v    int64
	}{
		{"MaxInFlight", int64(cfg.MaxInFlight)},
		{"MaxBufferedBytes", cfg.MaxBufferedBytes},
		{"RetryInitialBackoff", int64(cfg.RetryInitialBackoff)},
		{"RetryMaxBackoff", int64(cfg.RetryMaxBackoff)},
		{"CommitInterval", int64(cfg.CommitInterval)},
		{"ShutdownTimeout", int64(cfg.ShutdownTimeout)},
		{"StallAfter", int64(cfg.StallAfter)},
		{"SessionTimeout", int64(cfg.SessionTimeout)},
		{"HeartbeatInterval", int64(cfg.HeartbeatInterval)},
		{"LagInterval", int64(cfg.LagInterval)},
	} {
		if p.v < 0 {
			bad = append(bad, fmt.Sprintf("%s must not be negative (got %d)", p.name, p.v))
		}
	}
	if err := policy.CheckBackoff(cfg.RetryInitialBackoff, cfg.RetryMaxBackoff); err != nil {
		bad = append(bad, "RetryMaxBackoff: "+err.Error())
	}
	if cfg.HeartbeatInterval >= cfg.SessionTimeout {
		bad = append(bad, fmt.Sprintf("HeartbeatInterval (%s) must be below SessionTimeout (%s)", cfg.HeartbeatInterval, cfg.SessionTimeout))
	}
	if cfg.GroupInstanceID != "" {
		if err := CheckTopicName(cfg.GroupInstanceID); err != nil {
			bad = append(bad, fmt.Sprintf("GroupInstanceID %q %v", cfg.GroupInstanceID, err))
		}
	}
	switch {
	case cfg.SASLMechanism == "":
	case !slices.Contains(saslMechanisms, cfg.SASLMechanism):
		bad = append(bad, fmt.Sprintf("SASLMechanism %q is not one of %s", cfg.SASLMechanism, strings.Join(saslMechanisms, ", ")))
	case cfg.SASLUsername == "":
		bad = append(bad, "SASLUsername is empty while SASLMechanism is set")
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(bad, "; "))
	}
	return nil
}

// consumerProblems are validate's problems with the consumer-only fields.
func (cfg Config) consumerProblems() []string {
	var bad []string
	if cfg.Topic == "" {
		bad = append(bad, "Topic is empty")
	}
	if cfg.GroupID == "" {
		bad = append(bad, "GroupID is empty")
	}
	if err := CheckDLQTopic(cfg.Topic, cfg.DLQTopic); err != nil {
		bad = append(bad, "DLQTopic: "+err.Error())
	}
	// Checked here, not at the first poison record: a name the broker
	// refuses would fail every dead letter write, and the partition's
	// commit would stop behind it.
	if cfg.DLQTopic != "" {
		if err := CheckTopicName(cfg.DLQTopic); err != nil {
			bad = append(bad, fmt.Sprintf("DLQTopic %q %v", cfg.DLQTopic, err))
		}
	}
	if err := checkJoinReadTimeout(cfg.groupConfig()); err != nil {
		bad = append(bad, err.Error())
	}
	if !slices.Contains(rebalanceStrategies, cfg.RebalanceStrategy) {
		bad = append(bad, fmt.Sprintf("RebalanceStrategy %q is not one of %s", cfg.RebalanceStrategy, strings.Join(rebalanceStrategies, ", ")))
	}
	return bad
}

// saramaConfig builds the Sarama configuration shared by the consumer group,
// the dead letter producer and the Publisher.
func (cfg Config) saramaConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.ClientID = cmp.Or(cfg.ClientID, DefaultClientID)
	// The protocol versions Sarama speaks: the lowest that gives every
	// feature the worker uses or is built to switch on (cooperative-sticky
	// assignment needs 2.4; static membership 2.3; record headers for dead
	// letters 0.11). Kafka 4.x refuses requests older than 2.1's (KIP-896),
	// so this also stays inside what current brokers accept. The oldest
	// broker supported is therefore Apache Kafka 2.4.0.
	sc.Version = sarama.V2_4_0_0

	if cfg.TLS != nil {
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = cfg.TLS
	}
	if cfg.SASLMechanism != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Handshake = true
		sc.Net.SASL.User = cfg.SASLUsername
		sc.Net.SASL.Password = cfg.SASLPassword
		switch cfg.SASLMechanism {
		case SASLPlain:
			sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		case SASLSCRAMSHA256:
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		case SASLSCRAMSHA512:
			sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		}
		sc.Net.SASL.SCRAMClientGeneratorFunc = scramGenerator(cfg.SASLMechanism)
	}

	// Offsets are marked by us, only up to the lowest unfinished record, and
	// committed on our own interval, on revoke and at shutdown: Sarama's
	// autocommit would also flush on its own schedule, which is harmless, but
	// manual commits let us commit at the moments the contract names.
	sc.Consumer.Offsets.AutoCommit.Enable = false
	// A new group starts at the beginning of the log: at-least-once means a
	// record published before the first member joined is still delivered.
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// A commit waits behind the fetch long-poll on the same connection; 100ms
	// keeps commits (and so revokes and shutdown) quick at a small idle cost.
	sc.Consumer.MaxWaitTime = 100 * time.Millisecond
	sc.Consumer.Return.Errors = true
	sc.Consumer.Group.Session.Timeout = cfg.SessionTimeout
	sc.Consumer.Group.Heartbeat.Interval = cfg.HeartbeatInterval
	// A revoked member may spend up to ShutdownTimeout letting its records in
	// hand finish before it rejoins; the coordinator must wait that long.
	sc.Consumer.Group.Rebalance.Timeout = cfg.rebalanceTimeout()
	// Each partition's ConsumeClaim commits what it finished before it
	// returns, so a partition revoked by a cooperative rebalance (which
	// does not end the session) is committed before it is released, as one
	// revoked by an eager rebalance is.
	sc.Consumer.Group.Rebalance.GroupStrategies = balanceStrategies(cfg.RebalanceStrategy)
	// Sarama sends the id (KIP-345) and, at Close, does not leave the group
	// for a static member: only the session timeout removes it.
	sc.Consumer.Group.InstanceId = cfg.GroupInstanceID

	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	// A record over the record size limit is dead-lettered with its value unchanged,
	// so the producer must not refuse what the broker accepted on the way in;
	// the broker's own limit still applies.
	sc.Producer.MaxMessageBytes = int(sarama.MaxRequestSize) - 1
	return sc
}

// deadLetterConfig is saramaConfig for the dead letter producer, made
// idempotent (KIP-98) so that its own retries never write a dead letter
// twice. A produce request whose answer is lost (its leader died after
// appending it, or timed out waiting for the in-sync replicas) is sent
// again with the same producer id, epoch and sequence number, and the
// leader, new or old, answers with the first write's offset instead of
// appending it again.
//
// That holds only while Sarama is still retrying: a batch it gives up on
// is returned as failed, the producer's epoch is bumped, and the caller's
// next attempt is a new write, which the broker cannot tell from the lost
// one. So its retries span retrySpan, by the worker's own backoff
// (policy.Backoff from RetryInitialBackoff to RetryMaxBackoff): a leader
// election, which Kafka starts once the dead leader's broker session
// (broker.session.timeout.ms, 9s by default) has expired, is ridden out
// inside one write. The consumer passes its dead letter unready threshold
// (DeadLetterUnreadyAfter): a write still failing after that has failed
// for as long as the consumer tolerates before it reports not Ready.
func (cfg Config) deadLetterConfig(retrySpan time.Duration) *sarama.Config {
	sc := cfg.saramaConfig()
	sc.Producer.Idempotent = true
	// Sarama refuses an idempotent producer without these: one request in
	// flight per broker keeps the sequence numbers in order, and only
	// acks from every in-sync replica make the leader's state survive it.
	sc.Net.MaxOpenRequests = 1
	sc.Producer.RequiredAcks = sarama.WaitForAll
	initial, maxBackoff := cfg.RetryInitialBackoff, cfg.RetryMaxBackoff
	sc.Producer.Retry.BackoffFunc = func(retries, _ int) time.Duration {
		return policy.Backoff(retries, initial, maxBackoff)
	}
	sc.Producer.Retry.Max = retriesSpanning(retrySpan, initial, maxBackoff)
	return sc
}

// retriesSpanning returns the fewest retries whose waits add up to at least
// span, taking each wait at its least: policy.Backoff's step (initial,
// doubling, capped at maxBackoff) halved by the jitter. The waits add up
// to at most twice that. It returns at least 1.
func retriesSpanning(span, initial, maxBackoff time.Duration) int {
	n, waited, step := 0, time.Duration(0), max(min(initial, maxBackoff), time.Nanosecond)
	for ; waited < span && step < maxBackoff; n++ {
		waited += step / 2
		step = min(step*2, maxBackoff)
	}
	if waited < span {
		least := max(maxBackoff/2, time.Nanosecond)
		n += int((span - waited + least - 1) / least)
	}
	return max(n, 1)
}

// balanceStrategies returns the Sarama strategies for a validated
// RebalanceStrategy, preferred first. Each call returns new ones: the
// cooperative-sticky strategy holds per-group state.
func balanceStrategies(name string) []sarama.BalanceStrategy {
	switch name {
	case StrategyRange:
		return []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	case StrategyCooperativeStickyRange:
		return []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky(), sarama.NewBalanceStrategyRange()}
	default:
		return []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	}
}

// joinReadMargin is how much longer than the rebalance timeout the consumer
// waits for the answer to a JoinGroup: the coordinator may hold that answer
// for the whole rebalance timeout (until every member rejoined, or the
// timeout removes those that did not), and it still has to reach us. The
// Java client waits the rebalance timeout plus 5 s for a JoinGroup too.
const joinReadMargin = 5 * time.Second

// rebalanceTimeout is the rebalance timeout the consumer asks for: at
// least a minute, and ShutdownTimeout (the longest a revoked member lets
// its records in hand finish before it rejoins) plus 30 s.
func (cfg Config) rebalanceTimeout() time.Duration {
	return max(60*time.Second, cfg.ShutdownTimeout+30*time.Second)
}

// groupConfig is saramaConfig for the consumer group's client: its
// read-ahead sized from MaxBufferedBytes (see readAhead), and a read
// timeout that outlasts a JoinGroup (see checkJoinReadTimeout). The
// producers keep Sarama's channel defaults (what they buffer is what they
// were given to send) and its 30 s read timeout (they never join a group).
func (cfg Config) groupConfig() *sarama.Config {
	sc := cfg.saramaConfig()
	sc.ChannelBufferSize, sc.Consumer.Fetch.Default, sc.Consumer.Fetch.MaxBytes = readAhead(cfg.MaxBufferedBytes)
	sc.Net.ReadTimeout = sc.Consumer.Group.Rebalance.Timeout + joinReadMargin
	return sc
}

// checkJoinReadTimeout returns an error unless sc's Net.ReadTimeout exceeds
// its rebalance timeout by joinReadMargin at least. Sarama applies
// Net.ReadTimeout to every answer, the JoinGroup's included, and the
// coordinator may hold a JoinGroup until the rebalance timeout ends (a
// member that is slow to rejoin, or one that died and whose session has
// not expired yet). With a shorter read timeout the waiting members fail
// with "i/o timeout", rejoin, and restart the rebalance they were
// waiting for, in a loop, for as long as one member is slow.
//
// The cost: the consumer's other requests (fetches, commits, heartbeats)
// also wait that long for a broker that stopped answering without closing
// the connection (a network partition); a broker that dies or restarts
// closes it, and is noticed at once.
func checkJoinReadTimeout(sc *sarama.Config) error {
	if least := sc.Consumer.Group.Rebalance.Timeout + joinReadMargin; sc.Net.ReadTimeout < least {
		return fmt.Errorf("the consumer's read timeout (%s) must be at least its rebalance timeout (%s) plus %s: the broker may hold a JoinGroup answer for the whole rebalance timeout, and a join that times out first is retried in a loop",
			sc.Net.ReadTimeout, sc.Consumer.Group.Rebalance.Timeout, joinReadMargin)
	}
	return nil
}

// readAhead sizes what Sarama reads ahead of the consumer from the byte
// budget (MaxBufferedBytes), so that the records the consumer holds are
// most of the worker's memory, and the budget bounds them:
//
//   - channelBuffer 0: a partition's records wait in the consumer's own
//     queues, counted in bytes, not in Sarama's channel, counted in records
//     (256 by default, whatever their size). Sarama hands a record over when
//     the consumer takes it, and once a partition has not been taken from
//     for Consumer.MaxProcessingTime it stops fetching it.
//   - fetchDefault, budget/64 (16 KiB to 1 MiB): what one fetch asks of one
//     partition, so the fetch a stopped partition sits on stays small.
//   - fetchMaxBytes, budget/16 (64 KiB to 50 MiB): what one fetch response
//     holds across partitions. Sarama's records are slices of the response,
//     so until the consumer takes (and copies, see detach) a partition's
//     last record of a response, the whole response stays in memory: each
//     partition holds at most one, budget/16 bytes.
//
// The broker still returns a record batch larger than either limit whole
// when it is the first of its partition or response (KIP-74), so a large
// record is never stuck. Consumer.Fetch.Max stays 0 (no limit) on purpose:
// Sarama skips a record that does not fit in Fetch.Max, and a skipped
// record is a notification never sent.
func readAhead(budget int64) (channelBuffer int, fetchDefault, fetchMaxBytes int32) {
	clamp := func(v, lo, hi int64) int32 { return int32(min(max(v, lo), hi)) }
	return 0, clamp(budget/64, 16<<10, 1<<20), clamp(budget/16, 64<<10, 50<<20)
}

// maxTopicNameLen is Kafka's limit on a topic name's length.
const maxTopicNameLen = 249

// CheckDLQTopic returns an error when dlq is the topic itself: a poison
// record dead-lettered to the topic it came from would be consumed, fail
// and be dead-lettered again, for ever. An empty topic is not checked.
func CheckDLQTopic(topic, dlq string) error {
	if topic != "" && dlq == topic {
		return errors.New("the dead letter topic must differ from the topic, or dead-lettered records come straight back")
	}
	return nil
}

// CheckTopicName applies Kafka's rules for a topic name: 1 to 249
// characters from [a-zA-Z0-9._-], and not "." or "..".
func CheckTopicName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return errors.New("is not a legal topic name")
	case len(name) > maxTopicNameLen:
		return fmt.Errorf("is longer than %d characters", maxTopicNameLen)
	}
	for _, r := range name {
		legal := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !legal {
			return fmt.Errorf("holds %q: only letters, digits, '.', '_' and '-' are allowed", r)
		}
	}
	return nil
}
