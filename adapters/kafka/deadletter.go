package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/ports"
)

// Dead letter header names.
const (
	HeaderDLQReason            = "dlq.reason"
	HeaderDLQKind              = "dlq.kind"
	HeaderDLQOriginalTopic     = "dlq.original.topic"
	HeaderDLQOriginalPartition = "dlq.original.partition"
	HeaderDLQOriginalOffset    = "dlq.original.offset"
	// HeaderDLQOriginalTimestamp is the record's own timestamp, in Unix
	// milliseconds: the dead letter's timestamp is when it was written, and
	// a redrive (Redrive) republishes the record with the original one.
	HeaderDLQOriginalTimestamp = "dlq.original.timestamp"
	// HeaderDLQValueDropped is set, to the original value's size in bytes,
	// on a dead letter whose value the broker refused as too large: the
	// record is in the topic it came from, and the other headers say where.
	HeaderDLQValueDropped = "dlq.value_dropped"
	// HeaderDLQKeyDropped and HeaderDLQHeadersDropped are set on a dead
	// letter the broker refused even without its value: it is then written
	// stripped, with no key (the header gives its size in bytes), none of
	// the record's own headers (the header gives how many there were), and
	// the reason cut to maxStrippedReason bytes. What is left, the origin
	// headers, is enough to read the record from the topic it came from.
	HeaderDLQKeyDropped     = "dlq.key_dropped"
	HeaderDLQHeadersDropped = "dlq.headers_dropped"
)

// isDeadLetterHeader reports whether key is one of the headers the worker
// adds to a dead letter or a redrive marker (HeaderDLQRedriven): a dead
// letter drops them from the record it carries, so that none is taken for
// a marker, and a redrive drops them from the record it republishes.
func isDeadLetterHeader(key string) bool {
	switch key {
	case HeaderDLQReason, HeaderDLQKind, HeaderDLQOriginalTopic, HeaderDLQOriginalPartition,
		HeaderDLQOriginalOffset, HeaderDLQOriginalTimestamp, HeaderDLQValueDropped,
		HeaderDLQKeyDropped, HeaderDLQHeadersDropped, HeaderDLQRedriven:
		return true
	}
	return false
}

// maxStrippedReason is the most of the reason a stripped dead letter keeps.
const maxStrippedReason = 512

// DeadLetterUnreadyAfter is how long a partition may keep failing to write a
// dead letter before the consumer reports not Ready: its commit cannot pass
// the record, so the worker is stuck on it, and only an operator can fix the
// dead letter topic. The dead letter producer's own retries span it too.
const DeadLetterUnreadyAfter = 30 * time.Second

var _ ports.DeadLetterSink = (*DeadLetterSink)(nil)

// DeadLetterSink is the ports.DeadLetterSink on the Consumer's dead letter
// topic (Config.DLQTopic). It writes through the producer of the
// Consumer's current Run, and fails while no Run is in progress. Its
// failures feed the Consumer's Ready. It is safe for concurrent use.
type DeadLetterSink struct {
	c *Consumer
}

// DeadLetterSink returns the sink that writes c's dead letters.
func (c *Consumer) DeadLetterSink() *DeadLetterSink { return &DeadLetterSink{c: c} }

// errNotRunning is returned by DeadLetter outside a Run.
var errNotRunning = errors.New("kafka: dead letter sink: the consumer is not running")

// DeadLetter writes rec to the dead letter topic with its key, value and
// headers, and headers giving kind, reason and where rec came from. A write
// the broker refuses as too large would fail the same way forever, so it is
// written smaller: first without the value (HeaderDLQValueDropped), then
// stripped (HeaderDLQKeyDropped). Any other failure is returned; once
// rec's partition has been failing, or waiting on one write, for
// DeadLetterUnreadyAfter, the Consumer is not Ready.
//
// A write is never appended twice by the producer's own retries (see
// deadLetterConfig), which ride out a leader election; a write that
// returns an error may still have been appended, so the caller's retry
// can add a second copy, and so can a replay of rec.
func (s *DeadLetterSink) DeadLetter(ctx context.Context, rec ports.Record, kind ports.Kind, reason string) error {
	run := s.c.run.Load()
	if run == nil {
		return errNotRunning
	}
	cfg, log := run.cfg, run.log.With("partition", rec.Partition)
	origin := rec.Topic + "/" + strconv.Itoa(int(rec.Partition))
	pm := deadLetterMessage(cfg.DLQTopic, rec, kind, reason)
	// The producer retries inside one write for as long as
	// DeadLetterUnreadyAfter, so the partition counts as failing from the
	// write's start, not from when it returns.
	start := time.Now()
	s.c.dlqHealth.failing(origin, start)
	for _, smaller := range []func(error){
		func(err error) {
			pm = dropValue(pm, len(rec.Value))
			log.WarnContext(ctx, "dead_letter_value_dropped", "offset", rec.Offset, "value_bytes", len(rec.Value),
				"dlq_topic", cfg.DLQTopic, "error", err)
		},
		func(err error) {
			pm = strippedDeadLetter(cfg.DLQTopic, rec, kind, reason)
			log.WarnContext(ctx, "dead_letter_stripped", "offset", rec.Offset, "key_bytes", len(rec.Key),
				"headers", len(rec.Headers), "dlq_topic", cfg.DLQTopic, "error", err)
		},
		nil,
	} {
		err := run.dlq.send(ctx, []*sarama.ProducerMessage{pm})
		if err == nil {
			s.c.dlqHealth.recovered(origin)
			return nil
		}
		if !isTooLarge(err) || smaller == nil {
			s.c.dlqHealth.failing(origin, start)
			return err
		}
		smaller(err)
	}
	panic("unreachable")
}

// deadLetterHealth knows since when each partition has been failing to
// write a dead letter: since the start of the first write that has not
// succeeded yet. It is safe for concurrent use.
type deadLetterHealth struct {
	unreadyAfter time.Duration

	mu    sync.Mutex
	since map[string]time.Time // by "topic/partition"; guarded by mu
}

func newDeadLetterHealth(unreadyAfter time.Duration) *deadLetterHealth {
	return &deadLetterHealth{unreadyAfter: unreadyAfter, since: make(map[string]time.Time)}
}

// failing notes that a write of origin's, begun at started, has not
// succeeded, if origin was not failing already.
func (h *deadLetterHealth) failing(origin string, started time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.since[origin]; !ok {
		h.since[origin] = started
	}
}

// recovered forgets origin's failures: a write succeeded, or the partition
// was given up.
func (h *deadLetterHealth) recovered(origin string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.since, origin)
}

// stuck reports whether some partition has been failing for unreadyAfter.
func (h *deadLetterHealth) stuck(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.since {
		if now.Sub(t) >= h.unreadyAfter {
			return true
		}
	}
	return false
}

// isTooLarge reports whether err says the message is over a size limit:
// the broker's (MESSAGE_TOO_LARGE), or the producer's own MaxMessageBytes
// check, which Sarama reports as a ConfigurationError before sending.
func isTooLarge(err error) bool {
	if errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		return true
	}
	var ce sarama.ConfigurationError
	return errors.As(err, &ce) && strings.Contains(string(ce), "larger than configured Producer.MaxMessageBytes")
}

// dropValue returns pm without its value, with HeaderDLQValueDropped set to
// the value's size; key and headers are kept.
func dropValue(pm *sarama.ProducerMessage, size int) *sarama.ProducerMessage {
	out := &sarama.ProducerMessage{Topic: pm.Topic, Key: pm.Key}
	out.Headers = append(out.Headers, pm.Headers...)
	out.Headers = append(out.Headers, sarama.RecordHeader{Key: []byte(HeaderDLQValueDropped), Value: []byte(strconv.Itoa(size))})
	return out
}

// strippedDeadLetter is the dead letter of last resort: only the headers
// deadLetterMessage adds (the reason cut to maxStrippedReason bytes), and
// the sizes of what was left out.
func strippedDeadLetter(topic string, rec ports.Record, kind ports.Kind, reason string) *sarama.ProducerMessage {
	if len(reason) > maxStrippedReason {
		reason = strings.ToValidUTF8(reason[:maxStrippedReason], "") + "..."
	}
	origin := ports.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp}
	pm := deadLetterMessage(topic, origin, kind, reason)
	for _, h := range [][2]string{
		{HeaderDLQValueDropped, strconv.Itoa(len(rec.Value))},
		{HeaderDLQKeyDropped, strconv.Itoa(len(rec.Key))},
		{HeaderDLQHeadersDropped, strconv.Itoa(len(rec.Headers))},
	} {
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
	}
	return pm
}

// deadLetterMessage keeps the record's key, value and headers, replacing
// any dlq.* headers it already carried (a record dead-lettered twice) with
// ones describing this failure (the original timestamp only when rec has
// one); any other dead letter header it carried is dropped too.
func deadLetterMessage(topic string, rec ports.Record, kind ports.Kind, reason string) *sarama.ProducerMessage {
	pm := &sarama.ProducerMessage{Topic: topic}
	if rec.Key != nil {
		pm.Key = sarama.ByteEncoder(rec.Key)
	}
	if rec.Value != nil {
		pm.Value = sarama.ByteEncoder(rec.Value)
	}
	ours := [][2]string{
		{HeaderDLQReason, reason},
		{HeaderDLQKind, kind.String()},
		{HeaderDLQOriginalTopic, rec.Topic},
		{HeaderDLQOriginalPartition, strconv.Itoa(int(rec.Partition))},
		{HeaderDLQOriginalOffset, strconv.FormatInt(rec.Offset, 10)},
	}
	if !rec.Timestamp.IsZero() {
		ours = append(ours, [2]string{HeaderDLQOriginalTimestamp, strconv.FormatInt(rec.Timestamp.UnixMilli(), 10)})
	}
	for _, h := range rec.Headers {
		if isDeadLetterHeader(h.Key) {
			continue
		}
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	for _, h := range ours {
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
	}
	return pm
}
