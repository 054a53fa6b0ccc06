package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// TestCommandRefused_TakeoverIsNotSentBlind: Redis stays up and answers,
// but refuses the command a takeover needs, as after an ACL change made
// while the workers run (ACL SETUSER or ACL LOAD dropping +evalsha and
// +eval, or a key pattern): the error is NOPERM, and the worker fails open.
// Worker A sends an SMS whose outcome is unknown and dies holding its
// claim; once the lease has passed, worker B gets the replay and finds the
// abandoned claim, which it cannot take over. The store knows the
// abandoned claim's lease: failing open, B must ask the provider before it
// sends, so the customer gets the SMS once, whether A's send went out
// (Delivered) or not (Lost: then B sends it, possibly on a retry).
//
// The store's own key holds the abandoned claim (the takeover script is
// refused), or the other format's key does (with ReadBoth: the script
// deleting it is refused, and so is the one giving our claim its
// history), or the own key does while the other format's key cannot be
// read.
func TestCommandRefused_TakeoverIsNotSentBlind(t *testing.T) {
	srv := redistest.MustStart(t)
	raw := srv.MustClient(t, 0)
	acl := func(t *testing.T, rules ...string) {
		t.Helper()
		args := append([]string{"SETUSER", "worker"}, rules...)
		if err := raw.Do(testCtx(t), raw.B().Arbitrary("ACL").Args(args...).Build()).Error(); err != nil {
			t.Fatalf("ACL %s: %v", strings.Join(args, " "), err)
		}
	}
	url := fmt.Sprintf("redis://worker:pw@%s", srv.Addr())

	const (
		claimTTL     = 2 * time.Second // > send + 2 store timeouts + skew
		storeTimeout = 500 * time.Millisecond
	)
	cases := map[string]struct {
		a, b  redis.Config
		fault []string // the ACL rules applied once A's lease has passed
	}{
		"OwnKeyTakeoverRefused": {
			a:     redis.Config{URL: url, CompactPrefix: "sf1:"},
			b:     redis.Config{URL: url, CompactPrefix: "sf1:"},
			fault: []string{"-evalsha", "-eval"},
		},
		"OtherKeyTakeAwayRefused": {
			a:     redis.Config{URL: url, Format: redis.Readable, KeyPrefix: "sf2-r:"},
			b:     redis.Config{URL: url, CompactPrefix: "sf2:", KeyPrefix: "sf2-r:", ReadBoth: true},
			fault: []string{"-evalsha", "-eval"},
		},
		"OwnKeyOtherKeyUnreadable": {
			a:     redis.Config{URL: url, CompactPrefix: "sf3:", KeyPrefix: "sf3-r:", ReadBoth: true},
			b:     redis.Config{URL: url, CompactPrefix: "sf3:", KeyPrefix: "sf3-r:", ReadBoth: true},
			fault: []string{"resetkeys", "~sf3:*"},
		},
	}
	for name, tc := range cases {
		for _, lose := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/Lost=%v", name, lose), func(t *testing.T) {
				acl(t, "reset", "on", ">pw", "~*", "+@all")
				sms := &smsProvider{lose: lose}
				worker := func(cfg redis.Config) *domain.Service {
					cfg.Timeout = storeTimeout
					return smsService(t, MustStore(t, cfg), sms, claimTTL, storeTimeout, 500*time.Millisecond)
				}
				id := fmt.Sprintf("evt-%d", time.Now().UnixNano())
				rec := ports.Record{Topic: "shipment-events", Value: []byte(fmt.Sprintf(`{"event_id":%q,"type":"shipment.out_for_delivery","shipment_id":"SHP-1",
				"recipient":{"name":"Ada","phone":"+31201234567"},"channels":["sms"],"data":{"eta":"14:00-16:00"}}`, id))}
				key := domain.NotificationKey(id, ports.ChannelSMS)

				// Worker A: its send's outcome is unknown; it keeps its
				// claim and dies (it never handles the record again).
				_ = worker(tc.a).Handle(testCtx(t), rec)
				if v, ok := MustGet(t, raw, tc.a.Key(key)); !ok || !strings.HasPrefix(v, "p") {
					t.Fatalf("worker A's claim: %q (present %v), want a pending claim", v, ok)
				}
				b := worker(tc.b)                           // connected, and self-checked, before the fault
				time.Sleep(claimTTL + 100*time.Millisecond) // A's lease passes
				acl(t, tc.fault...)

				// Worker B: the replay, with a fresh delivery (another
				// process), retried as the consumer retries a record that
				// failed, for as long as A's claims can stand in the way.
				rb := ports.Record{Topic: rec.Topic, Value: rec.Value, DeliveryID: ports.NewDeliveryID()}
				deadline := time.Now().Add(8 * claimTTL)
				for try := 1; ; try++ {
					err := b.Handle(testCtx(t), rb)
					if err == nil {
						break
					}
					if try == 10 || time.Now().After(deadline) {
						t.Logf("worker B, attempt %d: %v (given up)", try, err)
						break
					}
					t.Logf("worker B, attempt %d: %v (retried)", try, err)
					time.Sleep(200 * time.Millisecond) // the consumer's backoff
				}
				if n := sms.Accepted(); n != 1 {
					t.Errorf("the customer got the SMS %d times, want once", n)
				}
			})
		}
	}
}
