package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// TestConsumer_DeliveryEnds: each delivery of a record ends once no attempt
// at it follows, however it ended (here: dead-lettered with its retries
// spent, and handled), so the handler may forget what it kept for it; not
// before, while attempts still come.
func TestConsumer_DeliveryEnds(t *testing.T) {
	t.Parallel()
	topic := uniqueName(t, "ends")
	c := MustStartCluster(t, 1, []string{topic, topic + ".dlq"})
	brokers := c.ListenAddrs()
	MustPublish(t, brokers, topic, numbered(2, "v", oneKey)...)

	var mu sync.Mutex
	ends := map[int64]<-chan struct{}{}
	cfg, _ := testConfig(brokers, topic)
	rc := MustRun(t, cfg, ports.HandlerFunc(func(ctx context.Context, rec ports.Record) error {
		ended := ports.DeliveryOf(ctx).Ended
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := ends[rec.Offset]; ok && prev != ended {
			t.Errorf("offset %d: attempts of one delivery carry different Ended channels", rec.Offset)
		}
		ends[rec.Offset] = ended
		select {
		case <-ended:
			t.Errorf("offset %d: an attempt ran after its delivery ended", rec.Offset)
		default:
		}
		if rec.Offset == 0 {
			return errors.New("twilio: 503")
		}
		return nil
	}))
	waitCommitted(t, brokers, cfg.GroupID, topic, map[int32]int64{0: 2})
	rc.MustStop(t, 10*time.Second)

	mu.Lock()
	defer mu.Unlock()
	for off := range int64(2) {
		select {
		case <-ends[off]:
		default:
			t.Errorf("offset %d: its delivery is over, but Ended is not closed (nil: %v)", off, ends[off] == nil)
		}
	}
}
