package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/ports"
)

// DefaultRedriveBatch is how many dead letters Redrive reads before it
// writes what it took from them and then their markers: the most a run
// that fails between the two writes again on the next run.
const DefaultRedriveBatch = 500

// RedriveKinds are the values RedriveConfig.Kind may take: the kinds a dead
// letter's HeaderDLQKind names.
var RedriveKinds = []string{ports.Permanent.String(), ports.Retryable.String(), ports.Unavailable.String(), ports.Paced.String()}

// HeaderDLQRedriven marks a record of the dead letter topic as Redrive's
// marker, not a dead letter. Its value is MarkerRedriven or MarkerGone;
// its key names the record settled: the dead letter's HeaderDLQOriginalTopic,
// HeaderDLQOriginalPartition and HeaderDLQOriginalOffset as
// "topic/partition/offset", or, for a dead letter that names no origin,
// its own place on the dead letter topic in that form. A marker follows
// its dead letter in the same partition, so retention never removes a
// marker before the dead letter it settles.
const HeaderDLQRedriven = "dlq.redriven"

// The values of HeaderDLQRedriven.
const (
	// MarkerRedriven: the record was written back to its topic.
	MarkerRedriven = "redriven"
	// MarkerGone: the dead letter carried no value and its original record
	// is gone from its topic: it cannot be redriven.
	MarkerGone = "gone"
)

// RedriveConfig configures Redrive.
type RedriveConfig struct {
	// Config gives Brokers, TLS and SASL; DLQTopic, the topic read and
	// where the markers go; Topic, where a dead letter goes that does not
	// name its original topic; and the producer's retry backoff
	// (RetryInitialBackoff, RetryMaxBackoff). Its GroupID is not used.
	Config
	// From, when not empty, limits the run to the partitions it lists,
	// each from the offset given. Since, when not zero, starts every
	// partition at its first dead letter written at or after Since. With
	// neither, every partition is read from its oldest dead letter. At
	// most one of From and Since may be set. They choose what one run
	// reads, and nothing else: the dead letters they leave wait for a
	// later run.
	From  map[int32]int64
	Since time.Time
	// Kind, when not empty, is one of RedriveKinds: only dead letters of
	// that kind are redriven; the others wait for a later run.
	Kind string
	// DryRun reads and counts what a run would redrive, and writes nothing.
	DryRun bool
	// Batch is DefaultRedriveBatch when zero.
	Batch int
	// Progress, when not nil, is called by Redrive's goroutine after each
	// batch of a partition that has dead letters to read, the last batch
	// included. It must not block for long.
	Progress func(RedriveProgress)
}

// RedriveProgress is where a Redrive run stands.
type RedriveProgress struct {
	Partition int32
	// Next is the offset to be read next in Partition; End is the
	// partition's end when the run began, where the run stops.
	Next, End int64
	// Read and Redriven count dead letters, over the whole run so far.
	Read, Redriven int
}

// RedrivePartition is the range of one partition a run read: from Start
// up to (not including) End. Start == End: nothing to read.
type RedrivePartition struct {
	Partition  int32
	Start, End int64
}

// ReasonCount counts the dead letters of one kind and reason.
type ReasonCount struct {
	Kind, Reason string
	Count        int
}

// RedriveResult is what a Redrive run did (or, for a dry run, would do).
type RedriveResult struct {
	Partitions []RedrivePartition
	// Read is every dead letter read (markers are not dead letters);
	// Redriven those republished (for a dry run: those that would be);
	// PassedOver those of another Kind, left for a later run.
	Read, Redriven, PassedOver int
	// AlreadyRedriven counts dead letters of a record redriven before: by
	// an earlier run (a marker), or by this run (the dead letter topic is
	// at least once, so a record may have several dead letters). They are
	// passed over.
	AlreadyRedriven int
	// Gone counts dead letters that cannot be redriven, found so by this
	// run or marked so by an earlier one (see ErrRedriveOriginGone).
	Gone int
	// FromSource counts the redriven dead letters that carried no value
	// (HeaderDLQValueDropped), whose record was read from its original
	// topic instead.
	FromSource int
	// ByReason counts the redriven dead letters by kind and reason, most
	// frequent first.
	ByReason []ReasonCount
}

// ErrRedriveOriginGone is wrapped by the error Redrive returns when it
// found dead letters that carry no value and whose original record is no
// longer in its topic (retention deleted it): they cannot be redriven.
// Redrive marks them (MarkerGone) and goes on; later runs count them in
// RedriveResult.Gone and return no error for them.
var ErrRedriveOriginGone = errors.New("kafka: redrive: the original record is gone from its topic")

// redriveOriginWait bounds how long Redrive waits for one original record.
const redriveOriginWait = 30 * time.Second

// Redrive republishes the dead letters on cfg.DLQTopic to the topic each
// came from (HeaderDLQOriginalTopic, or cfg.Topic when a dead letter does
// not name one), into the same partition when that topic has it (by key
// otherwise), with its key, its headers less the dead letter headers the
// worker added, and its original timestamp (HeaderDLQOriginalTimestamp;
// the dead letter's own timestamp when it has none). A dead letter whose
// value was dropped is redriven from its original record, read at
// HeaderDLQOriginalPartition and HeaderDLQOriginalOffset.
//
// Each record is redriven at most once, whatever the filters of this run
// and of earlier ones: what was redriven is a marker per record in the
// dead letter topic itself (HeaderDLQRedriven). A run
// first reads every marker, then reads the dead letters (all of them, or
// those From or Since choose, up to each partition's end when the run
// began: dead letters written during the run are left for the next), and
// redrives those of Kind that no marker names. After each batch it writes
// the records through an idempotent producer (acks from every in-sync
// replica; its own retries never write a record twice) and only then
// their markers. A run that fails or is killed between the two has written
// a batch it did not mark, which the next run writes again: the worker's
// idempotency store makes that second copy send nothing. Runs must not
// overlap: two at once both redrive what neither has marked yet.
//
// It returns what it did, with an error wrapping ErrInvalidConfig for a
// bad cfg, ErrRedriveOriginGone, or the broker's or ctx's error; the
// result then counts what was done before the error.
func Redrive(ctx context.Context, cfg RedriveConfig) (RedriveResult, error) {
	cfg.Config = cfg.withDefaults()
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultRedriveBatch
	}
	if err := cfg.validate(); err != nil {
		return RedriveResult{}, err
	}
	r, err := newRedriver(cfg)
	if err != nil {
		return RedriveResult{}, err
	}
	defer r.close()
	return r.run(ctx)
}

func (cfg RedriveConfig) validate() error {
	var bad []string
	if err := cfg.Config.validate(false); err != nil {
		bad = append(bad, err.Error())
	}
	if cfg.DLQTopic == "" {
		bad = append(bad, "DLQTopic is empty")
	}
	if len(cfg.From) > 0 && !cfg.Since.IsZero() {
		bad = append(bad, "From and Since are both set")
	}
	for p, off := range cfg.From {
		if p < 0 || off < 0 {
			bad = append(bad, fmt.Sprintf("From %d:%d is not a partition and an offset", p, off))
		}
	}
	if cfg.Kind != "" && !slices.Contains(RedriveKinds, cfg.Kind) {
		bad = append(bad, fmt.Sprintf("Kind %q is not one of %v", cfg.Kind, RedriveKinds))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, bad)
	}
	return nil
}

type redriver struct {
	cfg      RedriveConfig
	client   sarama.Client
	consumer sarama.Consumer
	producer *Publisher // nil for a dry run

	res      RedriveResult
	byReason map[[2]string]int
	// settled holds every record a marker names, or this run marked: true
	// when it was found gone.
	settled map[string]bool
	// gone is the first ErrRedriveOriginGone this run met, goneNow how
	// many dead letters it found gone.
	gone    error
	goneNow int
}

func newRedriver(cfg RedriveConfig) (*redriver, error) {
	sc := cfg.saramaConfig()
	sc.Consumer.Return.Errors = true
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive: connect to %v: %w", cfg.Brokers, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("kafka: redrive: consumer: %w", err)
	}
	r := &redriver{cfg: cfg, client: client, consumer: consumer, byReason: map[[2]string]int{}, settled: map[string]bool{}}
	if !cfg.DryRun {
		psc := cfg.deadLetterConfig(DeadLetterUnreadyAfter)
		psc.Producer.Partitioner = newOriginPartitioner
		if r.producer, err = newProducer(cfg.Brokers, psc); err != nil {
			r.close()
			return nil, err
		}
	}
	return r, nil
}

func (r *redriver) close() {
	if r.producer != nil {
		_ = r.producer.Close()
	}
	_ = r.consumer.Close()
	_ = r.client.Close()
}

func (r *redriver) run(ctx context.Context) (RedriveResult, error) {
	whole, err := r.bounds()
	if err != nil {
		return r.res, err
	}
	ranges, err := r.ranges(whole)
	if err != nil {
		return r.res, err
	}
	// Markers are read from every partition: the dead letters of one
	// record may be in several.
	for _, pr := range whole {
		if err := r.read(ctx, pr, r.noteMarker); err != nil {
			return r.res, err
		}
	}
	r.res.Partitions = ranges
	for _, pr := range ranges {
		if err := r.partition(ctx, pr); err != nil {
			return r.result(), err
		}
	}
	if r.gone != nil {
		return r.result(), fmt.Errorf("kafka: redrive: %d dead letters cannot be redriven (marked so: later runs pass them over), %w", r.goneNow, r.gone)
	}
	return r.result(), nil
}

func (r *redriver) result() RedriveResult {
	out := r.res
	out.ByReason = nil
	for k, n := range r.byReason {
		out.ByReason = append(out.ByReason, ReasonCount{Kind: k[0], Reason: k[1], Count: n})
	}
	slices.SortFunc(out.ByReason, func(a, b ReasonCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// bounds returns every partition of DLQTopic from its oldest record to
// its end now.
func (r *redriver) bounds() ([]RedrivePartition, error) {
	topic := r.cfg.DLQTopic
	partitions, err := r.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive: partitions of %s: %w", topic, err)
	}
	out := make([]RedrivePartition, 0, len(partitions))
	for _, p := range partitions {
		oldest, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("kafka: redrive: oldest offset of %s/%d: %w", topic, p, err)
		}
		end, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("kafka: redrive: end of %s/%d: %w", topic, p, err)
		}
		out = append(out, RedrivePartition{Partition: p, Start: oldest, End: end})
	}
	return out, nil
}

// ranges narrows whole to what From or Since choose.
func (r *redriver) ranges(whole []RedrivePartition) ([]RedrivePartition, error) {
	topic := r.cfg.DLQTopic
	for p := range r.cfg.From {
		if !slices.ContainsFunc(whole, func(pr RedrivePartition) bool { return pr.Partition == p }) {
			return nil, fmt.Errorf("%w: From: %s has no partition %d", ErrInvalidConfig, topic, p)
		}
	}
	var out []RedrivePartition
	for _, pr := range whole {
		oldest := pr.Start
		switch {
		case len(r.cfg.From) > 0:
			from, ok := r.cfg.From[pr.Partition]
			if !ok {
				continue
			}
			pr.Start = from
		case !r.cfg.Since.IsZero():
			// The broker answers the first offset whose timestamp is at or
			// after Since, or -1 when there is none.
			at, err := r.client.GetOffset(topic, pr.Partition, r.cfg.Since.UnixMilli())
			if err != nil {
				return nil, fmt.Errorf("kafka: redrive: offset of %s/%d at %s: %w", topic, pr.Partition, r.cfg.Since.Format(time.RFC3339), err)
			}
			pr.Start = pr.End
			if at >= 0 {
				pr.Start = at
			}
		}
		// Retention may have deleted up to the oldest since From was
		// chosen.
		pr.Start = min(max(pr.Start, oldest), pr.End)
		out = append(out, pr)
	}
	return out, nil
}

// noteMarker adds the record msg settles to r.settled, if msg is a marker.
func (r *redriver) noteMarker(msg *sarama.ConsumerMessage) error {
	if v := headerValue(msg.Headers, HeaderDLQRedriven); v != "" {
		r.settled[string(msg.Key)] = v == MarkerGone
	}
	return nil
}

// read calls fn with each record of pr in turn, and returns fn's first
// error.
func (r *redriver) read(ctx context.Context, pr RedrivePartition, fn func(*sarama.ConsumerMessage) error) error {
	if pr.Start >= pr.End {
		return nil
	}
	pc, err := r.consumer.ConsumePartition(r.cfg.DLQTopic, pr.Partition, pr.Start)
	if err != nil {
		return fmt.Errorf("kafka: redrive: read %s/%d from %d: %w", r.cfg.DLQTopic, pr.Partition, pr.Start, err)
	}
	defer pc.Close()
	for next := pr.Start; next < pr.End; {
		var msg *sarama.ConsumerMessage
		select {
		case msg = <-pc.Messages():
		case cerr := <-pc.Errors():
			return fmt.Errorf("kafka: redrive: read %s/%d: %w", r.cfg.DLQTopic, pr.Partition, *cerr)
		case <-ctx.Done():
			return ctx.Err()
		}
		if msg.Offset >= pr.End {
			// Offsets up to End are not all records (a gap); the range
			// is read.
			return nil
		}
		next = msg.Offset + 1
		if err := fn(msg); err != nil {
			return err
		}
	}
	return nil
}

// redriveBatch is what a run took from one partition since it last
// wrote.
type redriveBatch struct {
	pr      RedrivePartition
	records []*sarama.ProducerMessage // to write again
	markers []*sarama.ProducerMessage // of the records, and of dead letters found gone
	counted []ReasonCount             // each record's kind and reason
	read    int                       // dead letters read
}

// partition redrives the dead letters of pr, batch by batch.
func (r *redriver) partition(ctx context.Context, pr RedrivePartition) error {
	if pr.Start >= pr.End {
		return nil
	}
	b := &redriveBatch{pr: pr}
	err := r.read(ctx, pr, func(msg *sarama.ConsumerMessage) error {
		if headerValue(msg.Headers, HeaderDLQRedriven) != "" {
			return nil
		}
		if err := r.take(ctx, b, msg); err != nil {
			// Write and mark what came before.
			return cmp.Or(r.flush(ctx, b, msg.Offset), err)
		}
		if b.read == r.cfg.Batch {
			return r.flush(ctx, b, msg.Offset+1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return r.flush(ctx, b, pr.End)
}

// take reads the dead letter msg into b: passed over when a marker settled
// its record or it is of another Kind, else its record and its marker, or
// only a marker when its record is gone. It fails, taking nothing, when
// the record cannot be built.
func (r *redriver) take(ctx context.Context, b *redriveBatch, msg *sarama.ConsumerMessage) error {
	kind, reason := headerValue(msg.Headers, HeaderDLQKind), headerValue(msg.Headers, HeaderDLQReason)
	id := originOf(msg)
	id = cmp.Or(id, msg.Topic+"/"+strconv.Itoa(int(msg.Partition))+"/"+strconv.FormatInt(msg.Offset, 10))
	gone, settled := r.settled[id]
	switch {
	case settled && gone:
		r.res.Gone++
	case settled:
		r.res.AlreadyRedriven++
	case r.cfg.Kind != "" && kind != r.cfg.Kind:
		r.res.PassedOver++
	default:
		pm, fromSource, err := r.republished(ctx, msg)
		switch {
		case errors.Is(err, ErrRedriveOriginGone):
			r.res.Gone++
			r.goneNow++
			if r.gone == nil {
				r.gone = fmt.Errorf("the first at %s/%d offset %d: %w", msg.Topic, msg.Partition, msg.Offset, err)
			}
			r.mark(b, msg, id, MarkerGone)
		case err != nil:
			return err
		default:
			if fromSource {
				r.res.FromSource++
			}
			b.records = append(b.records, pm)
			b.counted = append(b.counted, ReasonCount{Kind: kind, Reason: reason})
			r.mark(b, msg, id, MarkerRedriven)
		}
	}
	b.read++
	return nil
}

// mark settles the record id, whose dead letter is msg, as outcome: in
// this run at once, and for later runs by a marker in b.
func (r *redriver) mark(b *redriveBatch, msg *sarama.ConsumerMessage, id, outcome string) {
	r.settled[id] = outcome == MarkerGone
	b.markers = append(b.markers, &sarama.ProducerMessage{
		Topic: r.cfg.DLQTopic, Metadata: msg.Partition, Key: sarama.StringEncoder(id),
		Headers: []sarama.RecordHeader{{Key: []byte(HeaderDLQRedriven), Value: []byte(outcome)}},
	})
}

// flush writes b's records, then their markers, counts them, empties b,
// and reports progress with next, the offset of b's partition to be read
// next.
func (r *redriver) flush(ctx context.Context, b *redriveBatch, next int64) error {
	dlq, p := r.cfg.DLQTopic, b.pr.Partition
	if !r.cfg.DryRun && len(b.records) > 0 {
		if err := r.producer.send(ctx, b.records); err != nil {
			return fmt.Errorf("kafka: redrive: write %d records taken from %s/%d before offset %d: %w", len(b.records), dlq, p, next, err)
		}
	}
	if !r.cfg.DryRun && len(b.markers) > 0 {
		if err := r.producer.send(ctx, b.markers); err != nil {
			return fmt.Errorf("kafka: redrive: mark %d dead letters of %s/%d before offset %d, their records written: %w", len(b.markers), dlq, p, next, err)
		}
	}
	r.res.Read += b.read
	r.res.Redriven += len(b.counted)
	for _, c := range b.counted {
		r.byReason[[2]string{c.Kind, c.Reason}]++
	}
	b.records, b.markers, b.counted, b.read = b.records[:0], b.markers[:0], b.counted[:0], 0
	if r.cfg.Progress != nil {
		r.cfg.Progress(RedriveProgress{Partition: p, Next: next, End: b.pr.End, Read: r.res.Read, Redriven: r.res.Redriven})
	}
	return nil
}

// republished builds the record msg is the dead letter of, as it is to be
// written again; fromSource says it was read from its original topic.
// For a dry run, a dead letter without its value is not read from its
// topic: the record returned then has no value.
func (r *redriver) republished(ctx context.Context, msg *sarama.ConsumerMessage) (*sarama.ProducerMessage, bool, error) {
	topic := headerValue(msg.Headers, HeaderDLQOriginalTopic)
	topic = cmp.Or(topic, r.cfg.Topic)
	if topic == "" || topic == r.cfg.DLQTopic {
		return nil, false, fmt.Errorf("%w: the dead letter at %s/%d offset %d names no topic to go back to, and Topic is empty or the dead letter topic",
			ErrInvalidConfig, r.cfg.DLQTopic, msg.Partition, msg.Offset)
	}
	origin := int32(-1)
	if v, err := strconv.ParseInt(headerValue(msg.Headers, HeaderDLQOriginalPartition), 10, 32); err == nil {
		origin = int32(v)
	}
	pm := &sarama.ProducerMessage{Topic: topic, Metadata: origin, Timestamp: msg.Timestamp}
	if ms, err := strconv.ParseInt(headerValue(msg.Headers, HeaderDLQOriginalTimestamp), 10, 64); err == nil {
		pm.Timestamp = time.UnixMilli(ms)
	}
	src, fromSource := msg, false
	if headerValue(msg.Headers, HeaderDLQValueDropped) != "" {
		fromSource = true
		if !r.cfg.DryRun {
			off, err := strconv.ParseInt(headerValue(msg.Headers, HeaderDLQOriginalOffset), 10, 64)
			if err != nil || origin < 0 {
				return nil, false, fmt.Errorf("%w: the dead letter at %s/%d offset %d has no value and no origin to read it from",
					ErrRedriveOriginGone, r.cfg.DLQTopic, msg.Partition, msg.Offset)
			}
			if src, err = r.origin(ctx, topic, origin, off); err != nil {
				return nil, false, err
			}
			pm.Timestamp = src.Timestamp
		}
	}
	if len(src.Key) > 0 {
		pm.Key = sarama.ByteEncoder(src.Key)
	}
	if src.Value != nil {
		pm.Value = sarama.ByteEncoder(src.Value)
	}
	for _, h := range src.Headers {
		if h != nil && !isDeadLetterHeader(string(h.Key)) {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
		}
	}
	return pm, fromSource, nil
}

// origin reads the record at offset off of topic's partition p.
func (r *redriver) origin(ctx context.Context, topic string, p int32, off int64) (*sarama.ConsumerMessage, error) {
	gone := func(why string) error {
		return fmt.Errorf("%w: %s/%d offset %d: %s", ErrRedriveOriginGone, topic, p, off, why)
	}
	pc, err := r.consumer.ConsumePartition(topic, p, off)
	if errors.Is(err, sarama.ErrOffsetOutOfRange) {
		return nil, gone("out of range")
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive: read %s/%d at %d: %w", topic, p, off, err)
	}
	defer pc.Close()
	timer := time.NewTimer(redriveOriginWait)
	defer timer.Stop()
	select {
	case m := <-pc.Messages():
		if m.Offset != off {
			return nil, gone(fmt.Sprintf("the next record there is at offset %d", m.Offset))
		}
		return m, nil
	case cerr := <-pc.Errors():
		return nil, fmt.Errorf("kafka: redrive: read %s/%d at %d: %w", topic, p, off, *cerr)
	case <-timer.C:
		return nil, fmt.Errorf("kafka: redrive: read %s/%d at %d: nothing within %s", topic, p, off, redriveOriginWait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// originOf returns "topic/partition/offset" of the record msg is the dead
// letter of, "" when its headers do not say.
func originOf(msg *sarama.ConsumerMessage) string {
	topic := headerValue(msg.Headers, HeaderDLQOriginalTopic)
	p := headerValue(msg.Headers, HeaderDLQOriginalPartition)
	off := headerValue(msg.Headers, HeaderDLQOriginalOffset)
	if topic == "" || p == "" || off == "" {
		return ""
	}
	return topic + "/" + p + "/" + off
}

// headerValue returns the value of the last header named key, "" when
// there is none.
func headerValue(hs []*sarama.RecordHeader, key string) string {
	v := ""
	for _, h := range hs {
		if h != nil && string(h.Key) == key {
			v = string(h.Value)
		}
	}
	return v
}

// originPartitioner sends a redriven record to the partition it came from
// (its ProducerMessage.Metadata, an int32) when the topic has it, so it
// joins the records of its key where they are; by key hash otherwise.
type originPartitioner struct{ hash sarama.Partitioner }

func newOriginPartitioner(topic string) sarama.Partitioner {
	return originPartitioner{hash: sarama.NewHashPartitioner(topic)}
}

func (o originPartitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if p, ok := m.Metadata.(int32); ok && p >= 0 && p < n {
		return p, nil
	}
	return o.hash.Partition(m, n)
}

func (o originPartitioner) RequiresConsistency() bool { return true }
