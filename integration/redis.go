package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/testcontainers/testcontainers-go"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
)

// Redis is a redis-server in a container, on its own loopback port.
type Redis struct {
	// Addr is "127.0.0.1:port".
	Addr string
	// Image is the image it runs, as chosen by REDIS_IMAGE.
	Image string
	// Client is connected to Addr (no client-side cache). After Stop and
	// Start it reconnects by itself.
	Client rueidis.Client

	c testcontainers.Container
}

// StartRedis starts Redis 7 (REDIS_IMAGE, default redis:7, falling back to
// the local notification-worker/redis:7) and waits until it answers PING.
// The container is removed when the test ends.
//
// The server keeps its default snapshot policy, so Stop (SIGTERM) saves the
// keys and Start loads them: an outage, not a data loss, as with a
// production Redis that persists.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	img := mustPickImage(t, "REDIS_IMAGE", "redis:7", "notification-worker/redis:7")
	port := strconv.Itoa(FreePort(t))
	r := &Redis{Addr: "127.0.0.1:" + port, Image: img}
	r.c = startContainer(t, testcontainers.ContainerRequest{
		Image: img,
		// Flags only: the official image's entrypoint prepends redis-server
		// to arguments starting with "-", and the local image's entrypoint
		// is redis-server itself.
		Cmd:          []string{"--port", port, "--bind", "127.0.0.1"},
		ExposedPorts: []string{port + "/tcp"},
	})
	if err := r.waitReady(context.Background()); err != nil {
		t.Fatalf("redis %s: %v", img, err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  []string{r.Addr},
		DisableCache: true,
	})
	if err != nil {
		t.Fatalf("redis client: %v", err)
	}
	t.Cleanup(client.Close)
	r.Client = client
	return r
}

// URL is the REDIS_URL for the worker.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Env is the worker's environment for this Redis.
func (r *Redis) Env() map[string]string { return map[string]string{"REDIS_URL": r.URL()} }

// Stop stops the server (SIGTERM; it saves and exits) and returns when it is
// gone: connections are refused until Start.
func (r *Redis) Stop(ctx context.Context) error {
	timeout := 5 * time.Second
	if err := r.c.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stop redis: %w", err)
	}
	return nil
}

// Start restarts a stopped server on the same port and waits until it
// answers PING. (A wait on the log would match the first run's line.)
func (r *Redis) Start(ctx context.Context) error {
	if err := r.c.Start(ctx); err != nil {
		return fmt.Errorf("start redis: %w", err)
	}
	return r.waitReady(ctx)
}

func (r *Redis) waitReady(ctx context.Context) error {
	return waitUntil(ctx, r.c, startTimeout, func(ctx context.Context) error {
		return redistest.Ping(r.Addr, nil)
	})
}

// PTTL returns key's remaining time to live. exists is false when the key is
// absent; ttl is negative when the key has no expiry.
func (r *Redis) PTTL(ctx context.Context, key string) (ttl time.Duration, exists bool, err error) {
	ms, err := r.Client.Do(ctx, r.Client.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		return 0, false, fmt.Errorf("pttl %s: %w", key, err)
	}
	switch ms {
	case -2:
		return 0, false, nil
	case -1:
		return -1, true, nil
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// Get returns key's value; exists is false when the key is absent.
func (r *Redis) Get(ctx context.Context, key string) (val string, exists bool, err error) {
	val, err = r.Client.Do(ctx, r.Client.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("get %s: %w", key, err)
	}
	return val, true, nil
}

// Keys returns the keys matching a glob pattern (SCAN, not KEYS, so a big
// keyspace does not block the server the worker is using).
func (r *Redis) Keys(ctx context.Context, pattern string) ([]string, error) {
	var keys []string
	var cursor uint64
	for {
		e, err := r.Client.Do(ctx, r.Client.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", pattern, err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys, nil
		}
	}
}
