package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/breaker"
	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
)

// counts returns how many distinct notifications reached c's provider,
// and how many reached it more than once.
func (c *countingNotifier) counts() (distinct, again int) {
	again = c.duplicates()
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.perKey), again
}

// keys returns the idempotency keys that reached c's provider.
func (c *countingNotifier) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.perKey))
	for k := range c.perKey {
		keys = append(keys, k)
	}
	return keys
}

// smsEvents returns n SMS-only events, each its own shipment, so the worker
// may handle them all at once.
func smsEvents(n int) []sampleEvent {
	events, _ := sampleEvents(n)
	for i := range events {
		events[i].ShipmentID = fmt.Sprintf("%s-%d", events[i].EventID, i)
		events[i].Channels = []string{"sms"}
	}
	return events
}

// TestMain_ReplayAfterARedisPause: a worker with MAX_IN_FLIGHT=1024 sends
// 1500 notifications; Redis then pauses while new records arrive, until
// their calls have timed out at IDEMPOTENCY_TIMEOUT (the worker fails open
// for them) and the breaker has opened, and answers again; 3 s later all
// 1500 records are replayed at once. Redis answers every command of the
// replay, so not one notification may be sent again, and each is
// suppressed as a duplicate: whatever decides that Redis is unavailable
// must stop deciding so once Redis answers.
func TestMain_ReplayAfterARedisPause(t *testing.T) {
	const (
		notifications = 1500
		batch         = 100 // the first sends, so that no record write waits out its timeout
		duringPause   = 50
	)
	// The store timeout is not what is under test, so it is generous: the
	// replay's 1024 claims at once must not time out against a healthy
	// Redis when 1024 handlers, under the race detector, share two cores
	// with other work. The pause lasts until that timeout has expired for
	// the records sent during it, whatever it is; the replay still comes
	// within the 13 s the removed layer held after the last failure.
	storeTimeout := 2 * time.Second
	if raceEnabled {
		storeTimeout = 10 * time.Second
	}
	redisSrv := redistest.MustStart(t)
	raw := redisSrv.MustClient(t, 0)
	topic, prefix := uniqueName("replay"), uniqueName("idem")+":"
	emb := MustStartEmbedded(t, topic)
	cfg := MustLoadConfig(t, map[string]string{
		"KAFKA_BROKERS":          emb.Brokers()[0],
		"KAFKA_TOPIC":            topic,
		"KAFKA_GROUP_ID":         uniqueName("group"),
		"REDIS_URL":              redisSrv.URL(),
		"SMS_NOTIFIER":           "console", // given below; explicit beside redis
		"EMAIL_NOTIFIER":         "console",
		"IDEMPOTENCY_KEY_PREFIX": prefix,
		"MAX_IN_FLIGHT":          "1024",
		"IDEMPOTENCY_TIMEOUT":    storeTimeout.String(),
		"HTTP_ADDR":              "off",
		"SEND_TIMEOUT":           "2s",
		"SHUTDOWN_TIMEOUT":       (2*time.Second + 2*storeTimeout).String(), // at least SEND_TIMEOUT + 2 x IDEMPOTENCY_TIMEOUT
	})
	sms := &countingNotifier{next: console.New(io.Discard), perKey: map[string]int{}}
	var duplicates atomic.Int64
	var out logtest.Buffer
	m := &Main{Config: cfg, Stdout: &out, Deps: Deps{
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: sms, ports.ChannelEmail: sms},
		Observer: ports.ObserverFunc(func(_ ports.Channel, o ports.Outcome) {
			if o == ports.OutcomeDuplicate {
				duplicates.Add(1)
			}
		}),
	}}
	MustOpen(t, m)
	MustRun(t, m)

	waitSent := func(what string, want int) {
		t.Helper()
		wait.For(t, waitWithin, what, func() (bool, string) {
			got, _ := sms.counts()
			return got >= want, fmt.Sprintf("%d of %d sent", got, want)
		})
	}
	events := smsEvents(notifications)
	for i := 0; i < notifications; i += batch {
		MustPublish(t, emb.Brokers(), topic, eventMessages(events[i:i+batch])...)
		waitSent("the first sends", i+batch)
	}
	// Every send recorded: the replay meets 1500 sent records.
	keys := sms.keys()
	wait.For(t, waitWithin, "the first sends recorded in Redis", func() (bool, string) {
		recorded := 0
		for _, v := range mustGetAll(t, raw, storeKey(t, cfg), keys) {
			if isSentRecord(v) {
				recorded++
			}
		}
		return recorded == len(keys), fmt.Sprintf("%d of %d recorded", recorded, len(keys))
	})

	redisSrv.Pause(t)
	t.Cleanup(func() { redisSrv.Resume(t) })
	MustPublish(t, emb.Brokers(), topic, eventMessages(smsEvents(duringPause))...)
	// The outage lasts until the worker has given up on Redis: a claim
	// timed out and was failed open, and the breaker opened.
	wait.For(t, waitWithin, "the pause to reach the store and open the breaker", func() (bool, string) {
		failedOpen := len(out.Events(t, "idempotency_check_unavailable"))
		state := m.breaker.State()
		return failedOpen > 0 && state == breaker.StateOpen,
			fmt.Sprintf("%d idempotency_check_unavailable, breaker %s", failedOpen, state)
	})
	redisSrv.Resume(t)
	waitSent("the records that arrived during the pause", notifications+duringPause)
	time.Sleep(3 * time.Second) // Redis answering again for 3 s: the scenario
	replayFrom := len(out.Events(t, ""))

	before := duplicates.Load()
	MustPublish(t, emb.Brokers(), topic, eventMessages(events)...)
	wait.For(t, waitWithin, "the replay handled", func() (bool, string) {
		_, again := sms.counts()
		suppressed := int(duplicates.Load() - before)
		return suppressed+again >= notifications, fmt.Sprintf("%d suppressed, %d sent again", suppressed, again)
	})
	replayed := map[string]bool{}
	for _, ev := range events {
		replayed[ev.EventID] = true
	}
	suppressed := map[string]bool{}
	for _, e := range out.Events(t, "duplicate_suppressed") {
		if id, _ := e["event_id"].(string); replayed[id] {
			suppressed[id] = true
		}
	}
	if _, again := sms.counts(); again != 0 {
		var why []string
		for _, e := range out.Events(t, "")[replayFrom:] {
			if e["msg"] == "idempotency_check_unavailable" && len(why) < 5 {
				why = append(why, fmt.Sprint(e["error"]))
			}
		}
		t.Fatalf("%d of %d replayed notifications sent again with Redis answering; %d suppressed; the store's errors in the replay: %q",
			again, notifications, len(suppressed), why)
	}
	if len(suppressed) != notifications {
		t.Fatalf("duplicate_suppressed for %d of %d replayed notifications", len(suppressed), notifications)
	}
}

// mustGetAll reads key(k) for every k in keys in one round trip, "" for
// a key that is absent.
func mustGetAll(tb testing.TB, c rueidis.Client, key func(string) string, keys []string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.B().Get().Key(key(k)).Build()
	}
	vals := make([]string, len(keys))
	for i, res := range c.DoMulti(ctx, cmds...) {
		v, err := res.ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			tb.Fatalf("GET %s: %v", key(keys[i]), err)
		}
		vals[i] = v
	}
	return vals
}

// storeKey maps a notification key to the Redis key the worker configured
// by cfg writes for it.
func storeKey(tb testing.TB, cfg config.Config) func(string) string {
	tb.Helper()
	return storeConfig(cfg).Key
}

// isSentRecord reports whether v is a sent record, in any format.
func isSentRecord(v string) bool {
	c, ok := redis.Decode(v)
	return ok && c.State == ports.AlreadySent
}

// TestMain_RefusesAnUnboundedRedisQueue: a combination whose calls could
// pile up beyond the largest ring the Redis store makes (a write_timeout of
// days keeps an unanswered command that long) is refused with the rest of
// the configuration, naming what to change, before any connection to Redis.
func TestMain_RefusesAnUnboundedRedisQueue(t *testing.T) {
	_, err := config.LoadWorker(lookupIn(map[string]string{
		"KAFKA_BROKERS":                "127.0.0.1:1",
		"REDIS_URL":                    "redis://127.0.0.1:1?write_timeout=72h",
		"SMS_NOTIFIER":                 "console",
		"EMAIL_NOTIFIER":               "console",
		"MAX_IN_FLIGHT":                "4096",
		"IDEMPOTENCY_BREAKER_COOLDOWN": "1s",
		"HTTP_ADDR":                    "off",
	}))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("LoadWorker = %v, want a *config.Error", err)
	}
	for _, want := range []string{`MAX_IN_FLIGHT="4096"`, "IDEMPOTENCY_BREAKER_COOLDOWN=1s", "write_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("LoadWorker: %v; want it to name %s", err, want)
		}
	}
}
