package redis_test

import (
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// Sentinels named in the URL as rueidis reads them (master_set, the host
// and each addr being Sentinels) find the primary: what the store writes
// through them, a store on the primary itself finds. Naming them also in
// SentinelAddrs is refused.
func TestSentinelURL(t *testing.T) {
	primary := redistest.MustStart(t)
	sentinels := redistest.MustStartSentinels(t, 3, "idem", primary, 0)
	addrs := sentinels.Addrs()
	url := "redis://" + addrs[0] + "/0?addr=" + strings.Join(addrs[1:], "&addr=") + "&master_set=idem"

	s := MustStore(t, redis.Config{URL: url, Timeout: time.Second})
	key := uniqueKey(t)
	if err := s.Record(testCtx(t), key, ports.Receipt{ProviderID: "SM1", SentAt: time.Now()}, time.Hour); err != nil {
		t.Fatalf("Record through the Sentinels: %v", err)
	}
	direct := MustStore(t, redis.Config{URL: primary.URL(), Timeout: time.Second})
	c, err := direct.Claim(testCtx(t), key, "replay", "", "", time.Minute)
	if err != nil || c.State != ports.AlreadySent {
		t.Fatalf("claim on the primary: %+v, %v; want the record written through the Sentinels", c, err)
	}

	if s, err := redis.New(redis.Config{URL: url, SentinelAddrs: addrs, SentinelMaster: "idem"}); err == nil {
		s.Close()
		t.Fatal("New with Sentinels in the URL and in SentinelAddrs succeeded")
	}
}
