package domain_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/ratelimit"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// withPace paces the SMS channel by p (on the scene's limiter).
func withPace(p domain.Pace) func(*domain.Config) {
	return func(c *domain.Config) {
		c.Paces = map[ports.Channel]domain.Pace{ports.ChannelSMS: p}
	}
}

// pause pauses p's sender for d on the scene's limiter, as another
// replica told a Retry-After would.
func (s *scene) pause(t *testing.T, p domain.Pace, d time.Duration) {
	t.Helper()
	if err := s.limiter.Pause(context.Background(), p.Sender, p.Limit, d); err != nil {
		t.Fatal(err)
	}
}

// TestService_RateLimit takes notifications through their sender's pace:
// a turn granted now or after a wait, a turn not granted (nothing sent,
// the claim given back, the record waiting as Paced), and a
// provider's 429 that pauses the sender for the next records, after which
// every notification is sent exactly once.
func TestService_RateLimit(t *testing.T) {
	pace := domain.Pace{Sender: "+15550001111", Limit: ports.Limit{Rate: 10, Burst: 1}}

	t.Run("TurnGrantedAfterItsWait", func(t *testing.T) {
		var mu sync.Mutex
		var waits []time.Duration
		s := newScene(t, domain.FailOpen, nil, withPace(pace), func(c *domain.Config) {
			c.RateWaited = func(ch ports.Channel, d time.Duration) {
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
			}
		})
		start := time.Now()
		for _, id := range []string{"e1", "e2"} {
			if err := s.attempt(t, record(event(id, "sms"))); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
		}
		if got := s.sms.Received(); got != 2 {
			t.Fatalf("sends %d, want 2", got)
		}
		// The scene's clock stands still: the second send's turn is one
		// Interval (100ms) after the first, waited for on the real clock.
		mu.Lock()
		defer mu.Unlock()
		if len(waits) != 2 || waits[0] != 0 || waits[1] != pace.Limit.Interval() {
			t.Errorf("turn waits %v, want [0 %v]", waits, pace.Limit.Interval())
		}
		if took := time.Since(start); took < pace.Limit.Interval() {
			t.Errorf("two sends took %v, less than the Interval %v: the second did not wait its turn", took, pace.Limit.Interval())
		}
	})

	t.Run("ProviderRefusalPausesTheSenderForTheNextRecord", func(t *testing.T) {
		s := newScene(t, domain.FailOpen, []answer{overPace}, withPace(pace))
		e1, e2 := record(event("e1", "sms")), record(event("e2", "sms"))

		// e1 is refused for the pace (Retry-After 30s): nothing sent, the
		// claim given back, the record waits.
		if err := s.attempt(t, e1); kindName(err) != "paced" {
			t.Fatalf("e1: %v, want paced", err)
		}
		if got := s.claimState(t, "sms:e1"); got != ports.Claimed {
			t.Fatalf("sms:e1 is %v after the 429, want free", got)
		}
		// e2 finds the sender paused: it is not sent at all.
		if err := s.attempt(t, e2); kindName(err) != "paced" {
			t.Fatalf("e2 during the pause: %v, want paced", err)
		}
		if got := s.sms.Received(); got != 1 {
			t.Fatalf("the provider received %d sends during the pause, want 1 (the refused one)", got)
		}
		if got := s.claimState(t, "sms:e2"); got != ports.Claimed {
			t.Fatalf("sms:e2 is %v after its turn was refused, want free", got)
		}

		// After the Retry-After both go, once each, and their replays are
		// duplicates.
		s.advance(31 * time.Second)
		for _, rec := range []ports.Record{e1, e2} {
			if err := s.attempt(t, rec); err != nil {
				t.Fatalf("after the pause: %v", err)
			}
			s.advance(time.Second)
		}
		for _, value := range []string{event("e1", "sms"), event("e2", "sms")} {
			if err := s.attempt(t, record(value)); err != nil {
				t.Fatalf("replay: %v", err)
			}
		}
		s.sms.mu.Lock()
		accepted := len(s.sms.accepted)
		s.sms.mu.Unlock()
		if accepted != 2 {
			t.Errorf("the provider accepted %d messages, want 2: each once", accepted)
		}
		if got := s.sms.Received(); got != 3 {
			t.Errorf("the provider received %d sends, want 3: the refused one and one per event", got)
		}
		s.wantAlreadySent(t, "sms:e1", "sms:e2")
	})

	t.Run("APacedChannelKeepsItsRecordFromTheDeadLetters", func(t *testing.T) {
		// The email fails in a way the retry budget counts while the SMS
		// waits for its sender: the record waits as paced, so its retries
		// spend no budget and it is not dead-lettered before the SMS had
		// its turn. An email failure the operator must see to outranks it.
		s := newScene(t, domain.FailOpen, nil, withPace(pace))
		s.pause(t, pace, time.Minute)
		s.email.FailFunc = failFirst(1, errors.New("451 4.3.0 try again later"))
		rec := record(event("e1", "sms", "email"))
		if err := s.attempt(t, rec); kindName(err) != "paced" {
			t.Fatalf("SMS paced, email retryable: %v, want paced", err)
		}
		s.email.FailFunc = failFirst(1, ports.MarkUnavailable(errors.New("535 5.7.8 authentication failed")))
		if err := s.attempt(t, rec); kindName(err) != "unavailable" {
			t.Fatalf("SMS paced, email unavailable: %v, want unavailable", err)
		}
		if got := s.sms.Received(); got != 0 {
			t.Fatalf("the provider received %d SMS during the pause, want 0", got)
		}
		// Once the sender's turn comes, both go, once each.
		s.advance(time.Minute)
		if err := s.attempt(t, rec); err != nil {
			t.Fatalf("after the pause: %v", err)
		}
		if err := s.attempt(t, record(event("e1", "sms", "email"))); err != nil {
			t.Fatalf("replay: %v", err)
		}
		if got := s.sms.Received(); got != 1 {
			t.Errorf("the provider received %d SMS, want 1", got)
		}
		s.wantAlreadySent(t, "sms:e1", "email:e1")
	})
}

// wantAlreadySent checks that the store holds a sent record for each key.
func (w *world) wantAlreadySent(t *testing.T, keys ...string) {
	t.Helper()
	for _, key := range keys {
		if got := w.claimState(t, key); got != ports.AlreadySent {
			t.Errorf("%s is %v, want already sent", key, got)
		}
	}
}

// brokenLimiter is a rate limiter that cannot answer, as one whose Redis
// stopped answering within the store timeout.
type brokenLimiter struct{}

func (brokenLimiter) Take(context.Context, string, ports.Limit, time.Duration) (ports.Reservation, error) {
	return ports.Reservation{}, errStoreDown
}
func (brokenLimiter) Pause(context.Context, string, ports.Limit, time.Duration) error {
	return errStoreDown
}

// withLimiter paces the SMS channel by p on a new in-process limiter.
func withLimiter(p domain.Pace) func(*domain.Config) {
	return func(c *domain.Config) {
		c.RateLimiter = ratelimit.NewLocal(nil)
		withPace(p)(c)
	}
}

// TestConfig_RateLimits checks a pace is refused at start without a
// limiter, with an invalid limit, or with a claim TTL leaving no wait.
func TestConfig_RateLimits(t *testing.T) {
	good := domain.Pace{Sender: "+15550001111", Limit: ports.Limit{Rate: 1, Burst: 1}}
	for name, mutate := range map[string]func(*domain.Config){
		"no limiter": func(c *domain.Config) { c.Paces = map[ports.Channel]domain.Pace{ports.ChannelSMS: good} },
		"invalid limit": func(c *domain.Config) {
			withLimiter(domain.Pace{Sender: "x", Limit: ports.Limit{Rate: 0, Burst: 1}})(c)
		},
		"no sender": func(c *domain.Config) { withLimiter(domain.Pace{Limit: good.Limit})(c) },
		"no time to wait": func(c *domain.Config) {
			withLimiter(good)(c)
			c.ClaimTTL = domain.MinClaimTTL(c.SendTimeout, c.StoreTimeout) + c.StoreTimeout
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := domain.Config{
				Store:        newFakeStore(),
				Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelSMS: &provider{}},
				ClaimTTL:     2 * time.Second,
				StoreTimeout: 50 * time.Millisecond,
				SendTimeout:  time.Second,
				Now:          time.Now,
			}
			mutate(&cfg)
			if _, err := domain.NewService(cfg); err == nil {
				t.Fatal("NewService accepted the rate limit")
			}
		})
	}
}
