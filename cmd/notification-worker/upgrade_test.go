package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
	"github.com/harborlight/notification-worker/ports"
	"github.com/redis/rueidis"
)

// TestMain_UpgradeToCompactHonoursReadableRecords is the rolling deploy from
// readable keys to compact ones: records the workers writing readable keys
// left in Redis are replayed to a worker on the defaults (compact keys,
// reading both formats). None of them may reach the provider again, each is
// logged duplicate_suppressed, and the events it has no record of are sent
// once and recorded compact, under the keys `notification-worker key`
// prints for them.
func TestMain_UpgradeToCompactHonoursReadableRecords(t *testing.T) {
	const sentBefore, fresh = 12, 8
	redisSrv := redistest.MustStart(t)
	raw := redisSrv.MustClient(t, 0)
	topic, prefix := uniqueName("upgrade"), uniqueName("idem")+":"
	emb := MustStartEmbedded(t, topic)
	env := map[string]string{
		"KAFKA_BROKERS":          emb.Brokers()[0],
		"KAFKA_TOPIC":            topic,
		"KAFKA_GROUP_ID":         uniqueName("group"),
		"REDIS_URL":              redisSrv.URL(),
		"SMS_NOTIFIER":           "console", // given below; explicit beside redis
		"EMAIL_NOTIFIER":         "console",
		"IDEMPOTENCY_KEY_PREFIX": prefix,
		"HTTP_ADDR":              "off",
		"SEND_TIMEOUT":           "2s",
		"SHUTDOWN_TIMEOUT":       "5s",
	}
	cfg := MustLoadConfig(t, env)
	events := smsEvents(sentBefore + fresh)
	// What a worker writing readable keys records: a provider id, or an
	// opted-out recipient's record.
	forms := []string{"sent:%d:~Zx9_k2ab:SM%032d", "sent:%d:~Zx9_k2ab:opted-out:21610%.0d"}
	for i, ev := range events[:sentBefore] {
		v := fmt.Sprintf(forms[i%len(forms)], time.Now().Add(-time.Hour).UnixMilli(), i)
		// The fingerprint of what was sent: the same event.
		v = strings.Replace(v, "Zx9_k2ab", fingerprintOf(t, ev), 1)
		MustSetRaw(t, raw, prefix+domain.NotificationKey(ev.EventID, ports.ChannelSMS), v)
	}

	sms := &countingNotifier{next: console.New(io.Discard), perKey: map[string]int{}}
	var out logtest.Buffer
	m := &Main{Config: cfg, Stdout: &out, Deps: Deps{
		Notifiers: map[ports.Channel]ports.Notifier{ports.ChannelSMS: sms, ports.ChannelEmail: sms},
	}}
	MustOpen(t, m)
	MustRun(t, m)
	MustPublish(t, emb.Brokers(), topic, eventMessages(events)...)

	wait.For(t, waitWithin, "every event handled", func() (bool, string) {
		sent, _ := sms.counts()
		suppressed := len(out.Events(t, "duplicate_suppressed"))
		return sent+suppressed >= len(events), fmt.Sprintf("%d sent, %d suppressed", sent, suppressed)
	})
	wantSent := map[string]bool{}
	for _, ev := range events[sentBefore:] {
		wantSent[domain.NotificationKey(ev.EventID, ports.ChannelSMS)] = true
	}
	if sent, again := sms.counts(); sent != fresh || again != 0 {
		t.Fatalf("%d notifications sent (%d more than once), want the %d without a record, once each", sent, again, fresh)
	}
	for _, k := range sms.keys() {
		if !wantSent[k] {
			t.Errorf("%s sent again: the release before had recorded it", k)
		}
	}
	if n := len(out.Events(t, "duplicate_suppressed")); n != sentBefore {
		t.Errorf("duplicate_suppressed %d times, want %d", n, sentBefore)
	}

	// The operator's way to the record: `notification-worker key`.
	var keys bytes.Buffer
	ids := make([]string, 0, fresh)
	for _, ev := range events[sentBefore:] {
		ids = append(ids, ev.EventID)
	}
	if err := runKey(context.Background(), cmdIO{stdout: &keys, lookup: lookupIn(env)}, ids); err != nil {
		t.Fatalf("key: %v", err)
	}
	printed := map[string]string{}
	for _, line := range strings.Split(keys.String(), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "sms" {
			printed[f[0]] = f[2]
		}
	}
	wait.For(t, waitWithin, "the fresh sends recorded compact", func() (bool, string) {
		for _, id := range ids {
			v, ok := MustGetRaw(t, raw, printed[id])
			if !ok || !isSentRecord(v) || strings.HasPrefix(v, "sent:") {
				return false, fmt.Sprintf("%s (printed for %s) holds %q, present %v; want a compact record", printed[id], id, v, ok)
			}
		}
		return true, ""
	})
}

// fingerprintOf is the fingerprint the worker gives ev's SMS.
func fingerprintOf(tb testing.TB, ev sampleEvent) string {
	tb.Helper()
	e, err := domain.Decode(ev.json())
	if err != nil {
		tb.Fatalf("decode %s: %v", ev.EventID, err)
	}
	return domain.Fingerprint(e, ports.ChannelSMS)
}

// MustSetRaw writes value under key, living an hour, as another release
// of the worker would have.
func MustSetRaw(tb testing.TB, c rueidis.Client, key, value string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Set().Key(key).Value(value).Ex(time.Hour).Build()).Error(); err != nil {
		tb.Fatalf("SET %s: %v", key, err)
	}
}

// MustGetRaw reads key; ok is false when it is absent.
func MustGetRaw(tb testing.TB, c rueidis.Client, key string) (v string, ok bool) {
	tb.Helper()
	vals := mustGetAll(tb, c, func(k string) string { return k }, []string{key})
	return vals[0], vals[0] != ""
}
