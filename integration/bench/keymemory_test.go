package bench

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// keyMemory is what one idempotency key costs in Redis, written one way.
type keyMemory struct {
	label                    string
	version                  string
	keys                     int
	exampleKey, exampleValue string
	keyLen, valueLen         int
	// memoryUsage is the mean of MEMORY USAGE over every key written.
	memoryUsage float64
	// usedPerKey is the growth of INFO used_memory divided by the keys
	// written: it also counts the expires table entry and hash buckets,
	// which MEMORY USAGE leaves out.
	usedPerKey float64
}

// keyFormat is one way of writing the sent records.
type keyFormat struct {
	label       string
	store       redis.Config
	fingerprint bool
}

// keyFormats are measured in this order; the first is the baseline: the
// records the release before fingerprints wrote. The last is what the
// worker writes on its defaults, and the projection's.
var keyFormats = []keyFormat{
	{"release before: readable, default prefix, no fingerprint", redis.Config{Format: redis.Readable}, false},
	{"IDEMPOTENCY_KEY_FORMAT=readable, default prefix, fingerprint", redis.Config{Format: redis.Readable}, true},
	{"as deployed: compact, default prefix", redis.Config{Format: redis.Compact}, true},
}

// BenchmarkRedisKeyMemory writes sent records the way the worker does
// (Store.Record, UUID event ids, 48h TTL; half SMS with a Twilio SID, half
// email with an SMTP Message-ID), in each of keyFormats, each into a
// fresh redis-server, and asks Redis what they take.
func BenchmarkRedisKeyMemory(b *testing.B) {
	for range b.N {
		for _, f := range keyFormats {
			km := measureKeys(b, f)
			b.ReportMetric(km.usedPerKey, "B/key(used_memory,"+strings.ReplaceAll(f.label, " ", "_")+")")
			results.setKeys(km)
		}
	}
}

func measureKeys(b *testing.B, f keyFormat) keyMemory {
	const keys = 100_000
	srv := mustRedis(b)
	raw := srv.MustClient(b, 0)
	cfg := f.store
	cfg.URL = srv.URL()
	s, err := redis.New(cfg)
	if err != nil {
		b.Fatalf("redis.New: %v", err)
	}
	ctx := context.Background()
	before := usedMemory(b, raw)

	names := make([]string, keys)
	for i := range names {
		ch := ports.ChannelSMS
		if i%2 == 1 {
			ch = ports.ChannelEmail
		}
		names[i] = domain.NotificationKey(newUUID(), ch)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < keys; i += 64 {
				r := ports.Receipt{ProviderID: twilioSID(), SentAt: time.Now()}
				if strings.HasPrefix(names[i], string(ports.ChannelEmail)) {
					sum := sha256.Sum256([]byte(names[i]))
					r.ProviderID = "<" + hex.EncodeToString(sum[:16]) + "@harborlight.example>"
				}
				if f.fingerprint {
					sum := sha256.Sum256([]byte(names[i] + "payload"))
					r.Fingerprint = base64.RawURLEncoding.EncodeToString(sum[:6])
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := s.Record(rctx, names[i], r, 48*time.Hour)
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	close(errs)
	for err := range errs {
		b.Fatalf("Record: %v", err)
	}
	after := usedMemory(b, raw)
	// Besides the records, the store's marker keys, written by New (before
	// the first used_memory reading).
	if n, err := raw.Do(ctx, raw.B().Dbsize().Build()).AsInt64(); err != nil || n != int64(keys+len(cfg.MarkerKeys())) {
		b.Fatalf("DBSIZE = %d, %v; want %d keys and the %d marker keys", n, err, keys, len(cfg.MarkerKeys()))
	}

	full := make([]string, keys)
	for i, n := range names {
		full[i] = cfg.Key(n)
	}
	var total int64
	for from := 0; from < keys; from += 1000 {
		cmds := make(rueidis.Commands, 0, 1000)
		for _, k := range full[from:min(from+1000, keys)] {
			cmds = append(cmds, raw.B().MemoryUsage().Key(k).Samples(0).Build())
		}
		for _, res := range raw.DoMulti(ctx, cmds...) {
			n, err := res.AsInt64()
			if err != nil {
				b.Fatalf("MEMORY USAGE: %v", err)
			}
			total += n
		}
	}
	value, err := raw.Do(ctx, raw.B().Get().Key(full[0]).Build()).ToString()
	if err != nil {
		b.Fatalf("GET %s: %v", full[0], err)
	}
	var keyBytes, valueBytes int
	for _, res := range raw.DoMulti(ctx, strlenAll(raw, full)...) {
		n, _ := res.AsInt64()
		valueBytes += int(n)
	}
	for _, k := range full {
		keyBytes += len(k)
	}
	return keyMemory{
		label:        f.label,
		version:      info(b, raw, "server", "redis_version"),
		keys:         keys,
		exampleKey:   full[0],
		exampleValue: value,
		keyLen:       keyBytes / keys,
		valueLen:     valueBytes / keys,
		memoryUsage:  float64(total) / keys,
		usedPerKey:   float64(after-before) / keys,
	}
}

func strlenAll(c rueidis.Client, keys []string) rueidis.Commands {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Strlen().Key(k).Build()
	}
	return cmds
}

func usedMemory(b *testing.B, c rueidis.Client) int64 {
	b.Helper()
	n, err := strconv.ParseInt(info(b, c, "memory", "used_memory"), 10, 64)
	if err != nil {
		b.Fatalf("used_memory: %v", err)
	}
	return n
}

// info returns one field of INFO section.
func info(b *testing.B, c rueidis.Client, section, field string) string {
	b.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		b.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	b.Fatalf("INFO %s has no %s", section, field)
	return ""
}
