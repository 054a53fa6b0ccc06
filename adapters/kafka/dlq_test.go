package kafka_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/harborlight/notification-worker/ports"
)

// A dead letter write that fails is retried while the session lives, and
// the record is committed only once its dead letter is safe.
func TestConsumer_DeadLetterWriteRetried(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "dlqfail")
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(1, topic, topic+".dlq"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	MustPublish(t, brokers, topic, numbered(3, "v", oneKey)...)

	const failures = 2
	var mu sync.Mutex
	refused := 0
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.ProduceRequest)
		mu.Lock()
		defer mu.Unlock()
		if len(r.Topics) == 0 || r.Topics[0].Topic != topic+".dlq" || refused == failures {
			return nil, nil, false
		}
		refused++
		c.KeepControl()
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(r.GetVersion())
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				// Not one Sarama retries by itself: the consumer must.
				sp.ErrorCode = kerr.MessageTooLarge.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	cfg, logs := testConfig(brokers, topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		if rec.Offset == 1 {
			return ports.MarkPermanent(errors.New("unknown event type"))
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 3})
	rc.MustStop(t, 10*time.Second)

	if dlq := readTopic(t, brokers, cfg.DLQTopic); len(dlq) != 1 {
		t.Fatalf("%d records dead-lettered, want 1", len(dlq))
	}
	if got := strings.Count(logs.String(), `"msg":"dead_letter_failed"`); got != failures {
		t.Errorf("%d dead_letter_failed logs, want %d", got, failures)
	}
}
