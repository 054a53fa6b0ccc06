package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/ports"
)

// DefaultRedriveBatch is how many dead letters Redrive reads before it
// writes what it took from them and commits: the most a failed run writes
// again on the next one.
const DefaultRedriveBatch = 500

// RedriveKinds are the values RedriveConfig.Kind may take: the kinds a dead
// letter's HeaderDLQKind names.
var RedriveKinds = []string{ports.Permanent.String(), ports.Retryable.String(), ports.Unavailable.String(), ports.Paced.String()}

// RedriveConfig configures Redrive.
type RedriveConfig struct {
	// Config gives Brokers, TLS and SASL; DLQTopic, the topic read; Topic,
	// where a dead letter goes that does not name its original topic; and
	// the producer's retry backoff (RetryInitialBackoff, RetryMaxBackoff).
	// Its GroupID is not used: Group is.
	Config
	// Group is the consumer group whose committed offsets on DLQTopic say
	// what was redriven: a run starts at them and commits as it goes, so a
	// second run does not redrive the same dead letter again. Required.
	// Its committed offsets are its only state: it has no members.
	Group string
	// From, when not empty, is where to start in each partition it lists,
	// whatever Group committed; only those partitions are read. Since,
	// when not zero, starts every partition at its first dead letter
	// written at or after Since, or at Group's committed offset if that is
	// later. With neither, a partition starts at Group's committed offset,
	// or at its oldest dead letter when Group committed none. At most one
	// of From and Since may be set. Every run commits where it ended, so a
	// run that started past some dead letters moves Group past them too.
	From  map[int32]int64
	Since time.Time
	// Kind, when not empty, is one of RedriveKinds: only dead letters of
	// that kind are redriven. The others are passed over, and Group's
	// offsets move past them too, so a filtered run wants a group of its
	// own.
	Kind string
	// DryRun reads and counts what a run would redrive, and writes and
	// commits nothing.
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
	// Read is every dead letter read; Redriven those republished (for a dry
	// run: those that would be); PassedOver those of another Kind.
	Read, Redriven, PassedOver int
	// Repeats counts dead letters of a record already redriven by this run
	// (the same HeaderDLQOriginalTopic, HeaderDLQOriginalPartition and
	// HeaderDLQOriginalOffset): the dead letter topic is at least once,
	// and a repeat is passed over.
	Repeats int
	// FromSource counts the redriven dead letters that carried no value
	// (HeaderDLQValueDropped), whose record was read from its original
	// topic instead.
	FromSource int
	// ByReason counts the redriven dead letters by kind and reason, most
	// frequent first.
	ByReason []ReasonCount
}

// ErrRedriveOriginGone is wrapped by the error Redrive returns when a dead
// letter carries no value and its original record is no longer in its
// topic (retention deleted it): it cannot be redriven, and the run stops
// before it, so that it is never passed over silently.
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
// It reads every partition from its start (see RedriveConfig.From) up to
// its end as it was when Redrive began: dead letters written during the
// run are left for the next. After each batch it writes through an
// idempotent producer (acks from every in-sync replica; its own retries
// never write a record twice) and then commits cfg.Group's offset past
// the batch. A run that fails or is cancelled may so have written a batch
// it did not commit, which the next run writes again: the worker's
// idempotency store makes that second copy send nothing.
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
	if cfg.Group == "" {
		bad = append(bad, "Group is empty")
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
	sc       *sarama.Config
	client   sarama.Client
	consumer sarama.Consumer
	producer *Publisher // nil for a dry run

	res      RedriveResult
	byReason map[[2]string]int
	// seen holds the origin (topic/partition/offset) of every dead letter
	// this run redrove, to pass over repeats.
	seen map[string]bool
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
	r := &redriver{cfg: cfg, sc: sc, client: client, consumer: consumer, byReason: map[[2]string]int{}, seen: map[string]bool{}}
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
	ranges, err := r.ranges()
	if err != nil {
		return r.res, err
	}
	r.res.Partitions = ranges
	for _, pr := range ranges {
		if err := r.partition(ctx, pr); err != nil {
			return r.result(), err
		}
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

// ranges returns, for every partition to read, where to start and the end
// it has now.
func (r *redriver) ranges() ([]RedrivePartition, error) {
	topic := r.cfg.DLQTopic
	all, err := r.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive: partitions of %s: %w", topic, err)
	}
	partitions := all
	if len(r.cfg.From) > 0 {
		partitions = slices.Sorted(maps.Keys(r.cfg.From))
		for _, p := range partitions {
			if !slices.Contains(all, p) {
				return nil, fmt.Errorf("%w: From: %s has no partition %d", ErrInvalidConfig, topic, p)
			}
		}
	}
	var committed map[int32]int64
	if len(r.cfg.From) == 0 {
		if committed, err = r.committed(partitions); err != nil {
			return nil, err
		}
	}
	var out []RedrivePartition
	for _, p := range partitions {
		oldest, err := r.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("kafka: redrive: oldest offset of %s/%d: %w", topic, p, err)
		}
		end, err := r.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("kafka: redrive: end of %s/%d: %w", topic, p, err)
		}
		start := oldest
		switch {
		case len(r.cfg.From) > 0:
			start = r.cfg.From[p]
		case !r.cfg.Since.IsZero():
			// The broker answers the first offset whose timestamp is at or
			// after Since, or -1 when there is none.
			at, err := r.client.GetOffset(topic, p, r.cfg.Since.UnixMilli())
			if err != nil {
				return nil, fmt.Errorf("kafka: redrive: offset of %s/%d at %s: %w", topic, p, r.cfg.Since.Format(time.RFC3339), err)
			}
			start = end
			if at >= 0 {
				start = at
			}
			// Since never goes back before what the group redrove.
			start = max(start, committed[p])
		case committed[p] >= 0:
			start = committed[p]
		}
		// Retention may have deleted up to oldest since the offset was
		// committed or chosen.
		start = min(max(start, oldest), end)
		out = append(out, RedrivePartition{Partition: p, Start: start, End: end})
	}
	return out, nil
}

// committed returns Group's committed offsets on partitions of DLQTopic,
// -1 where it committed none.
func (r *redriver) committed(partitions []int32) (map[int32]int64, error) {
	topic := r.cfg.DLQTopic
	coord, err := r.client.Coordinator(r.cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive: coordinator of group %s: %w", r.cfg.Group, err)
	}
	req := sarama.NewOffsetFetchRequest(r.sc.Version, r.cfg.Group, map[string][]int32{topic: partitions})
	resp, err := coord.FetchOffset(req)
	if err != nil {
		return nil, fmt.Errorf("kafka: redrive: committed offsets of group %s: %w", r.cfg.Group, err)
	}
	out := make(map[int32]int64, len(partitions))
	if resp.Err == sarama.ErrGroupIDNotFound {
		// A group that never committed (some brokers answer so).
		for _, p := range partitions {
			out[p] = -1
		}
		return out, nil
	}
	if resp.Err != sarama.ErrNoError {
		return nil, fmt.Errorf("kafka: redrive: committed offsets of group %s: %w", r.cfg.Group, resp.Err)
	}
	for _, p := range partitions {
		out[p] = -1
		b := resp.GetBlock(topic, p)
		if b == nil {
			continue
		}
		if b.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("kafka: redrive: committed offset of group %s on %s/%d: %w", r.cfg.Group, topic, p, b.Err)
		}
		out[p] = b.Offset
	}
	return out, nil
}

// commit commits Group's offset next on partition p of DLQTopic.
func (r *redriver) commit(p int32, next int64) error {
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			_ = r.client.RefreshCoordinator(r.cfg.Group)
		}
		var coord *sarama.Broker
		if coord, err = r.client.Coordinator(r.cfg.Group); err != nil {
			continue
		}
		req := sarama.NewOffsetCommitRequest(r.sc, r.cfg.Group)
		req.AddBlockWithLeaderEpoch(r.cfg.DLQTopic, p, next, -1, 0, "")
		var resp *sarama.OffsetCommitResponse
		if resp, err = coord.CommitOffset(req); err != nil {
			continue
		}
		if kerr := resp.Errors[r.cfg.DLQTopic][p]; kerr != sarama.ErrNoError {
			err = kerr
			continue
		}
		return nil
	}
	return fmt.Errorf("kafka: redrive: commit group %s at %s/%d offset %d: %w", r.cfg.Group, r.cfg.DLQTopic, p, next, err)
}

// partition redrives pr, batch by batch.
func (r *redriver) partition(ctx context.Context, pr RedrivePartition) error {
	report := func(next int64) {
		if r.cfg.Progress != nil {
			r.cfg.Progress(RedriveProgress{Partition: pr.Partition, Next: next, End: pr.End, Read: r.res.Read, Redriven: r.res.Redriven})
		}
	}
	if pr.Start >= pr.End {
		return nil
	}
	pc, err := r.consumer.ConsumePartition(r.cfg.DLQTopic, pr.Partition, pr.Start)
	if err != nil {
		return fmt.Errorf("kafka: redrive: read %s/%d from %d: %w", r.cfg.DLQTopic, pr.Partition, pr.Start, err)
	}
	defer pc.Close()

	var batch []*sarama.ProducerMessage
	var counted []ReasonCount
	read := 0
	flush := func(next int64) error {
		if !r.cfg.DryRun {
			if len(batch) > 0 {
				if err := r.producer.send(ctx, batch); err != nil {
					return fmt.Errorf("kafka: redrive: write %d records taken from %s/%d before offset %d: %w", len(batch), r.cfg.DLQTopic, pr.Partition, next, err)
				}
			}
			if err := r.commit(pr.Partition, next); err != nil {
				return err
			}
		}
		r.res.Read += read
		r.res.Redriven += len(counted)
		for _, c := range counted {
			r.byReason[[2]string{c.Kind, c.Reason}]++
		}
		batch, counted, read = batch[:0], counted[:0], 0
		report(next)
		return nil
	}

	for next := pr.Start; next < pr.End; {
		var msg *sarama.ConsumerMessage
		select {
		case msg = <-pc.Messages():
		case cerr := <-pc.Errors():
			return fmt.Errorf("kafka: redrive: read %s/%d: %w", r.cfg.DLQTopic, pr.Partition, cerr)
		case <-ctx.Done():
			return ctx.Err()
		}
		if msg.Offset >= pr.End {
			// Offsets up to End are not all records (a gap); the range
			// is read.
			return flush(pr.End)
		}
		next = msg.Offset + 1
		read++
		kind, reason := headerValue(msg.Headers, HeaderDLQKind), headerValue(msg.Headers, HeaderDLQReason)
		origin := originOf(msg)
		switch {
		case r.cfg.Kind != "" && kind != r.cfg.Kind:
			r.res.PassedOver++
		case origin != "" && r.seen[origin]:
			r.res.Repeats++
		default:
			pm, fromSource, err := r.republished(ctx, msg)
			if err != nil {
				// Write and commit what came before, so the next run
				// starts at this dead letter.
				read--
				if ferr := flush(msg.Offset); ferr != nil {
					return ferr
				}
				return err
			}
			if fromSource {
				r.res.FromSource++
			}
			if origin != "" {
				r.seen[origin] = true
			}
			batch = append(batch, pm)
			counted = append(counted, ReasonCount{Kind: kind, Reason: reason})
		}
		if read == r.cfg.Batch || next >= pr.End {
			if err := flush(next); err != nil {
				return err
			}
		}
	}
	return nil
}

// republished builds the record msg is the dead letter of, as it is to be
// written again; fromSource says it was read from its original topic.
// For a dry run, a dead letter without its value is not read from its
// topic: the record returned then has no value.
func (r *redriver) republished(ctx context.Context, msg *sarama.ConsumerMessage) (*sarama.ProducerMessage, bool, error) {
	topic := headerValue(msg.Headers, HeaderDLQOriginalTopic)
	if topic == "" {
		topic = r.cfg.Topic
	}
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
		return nil, fmt.Errorf("kafka: redrive: read %s/%d at %d: %w", topic, p, off, cerr)
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
