package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
)

// The worker passes what the Redis store's watch finds to its log and its
// metrics: keys a co-tenant's writes evicted, then a restart of Redis
// without its data, each on /metrics as the server counted it.
func TestMain_RedisEvictionsAndResetReachMetrics(t *testing.T) {
	defer func(d time.Duration) { redisHealthInterval = d }(redisHealthInterval)
	redisHealthInterval = 100 * time.Millisecond
	srv := redistest.MustStart(t, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru")
	var out logtest.Buffer
	m := &Main{Config: MustLoadConfig(t, map[string]string{
		"KAFKA_BROKERS": "127.0.0.1:1", "REDIS_URL": srv.URL(),
		"SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console", "HTTP_ADDR": "127.0.0.1:0",
		"IDEMPOTENCY_ALLOW_EVICTION": "true",
	}), Stdout: &out}
	MustOpen(t, m)

	// The co-tenant: 4 MiB of keys without a TTL, in 1 KiB values.
	tenant := srv.MustClient(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitWithin)
	defer cancel()
	redistest.MustFill(t, ctx, tenant, 4096, 1024)
	// A server at maxmemory may evict again on any later command (an
	// INFO's answer takes memory too): its count is read again at each
	// look, and the metric must catch up with it.
	evictedKeys := func() float64 {
		text, err := tenant.Do(ctx, tenant.B().Info().Section("stats").Build()).ToString()
		if err != nil {
			t.Fatalf("INFO stats: %v", err)
		}
		for line := range strings.SplitSeq(text, "\r\n") {
			if v, ok := strings.CutPrefix(line, "evicted_keys:"); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		return 0
	}
	if evictedKeys() == 0 {
		t.Fatalf("the co-tenant's 4 MiB evicted nothing under maxmemory 3mb")
	}
	wait.For(t, waitWithin, "the evictions on /metrics", func() (bool, string) {
		got, _ := scrape(t, m).Get("notification_worker_redis_evicted_keys_total")
		evicted := evictedKeys()
		return got == evicted, fmt.Sprintf("%v of the %v keys Redis evicted", got, evicted)
	})
	if n := len(out.Events(t, "idempotency_keys_evicted")); n == 0 {
		t.Errorf("no idempotency_keys_evicted line")
	}

	srv.Kill(t)
	srv.Restart(t)
	wait.For(t, waitWithin, "the reset on /metrics", func() (bool, string) {
		got, _ := scrape(t, m).Get("notification_worker_idempotency_store_resets_total")
		return got == 1, fmt.Sprintf("%v resets", got)
	})
	if got := out.Events(t, "idempotency_store_reset"); len(got) != 1 || got[0]["level"] != "ERROR" {
		t.Errorf("idempotency_store_reset lines %v, want one at ERROR", got)
	}
}
