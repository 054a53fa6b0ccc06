package domain_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/ratelimit"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
	"github.com/harborlight/notification-worker/ports/storetest"
)

// answer is how the scripted SMS provider answers one send.
type answer int

const (
	accept           answer = iota
	acceptUnanswered        // accepted, but the sender hears nothing: outcome unknown
	refuse                  // a retryable refusal
	refuseForGood           // a permanent refusal
	optOut                  // the recipient replied STOP
	overPace                // refused for the sender's pace (a 429), retry after 30s
)

// scripted is an SMS provider double that answers its sends in turn from
// script (past its end: accept), keeps what it accepted, and reconciles
// from that, as Twilio's Messages list does, or cannot tell.
type scripted struct {
	script     []answer
	cannotTell bool

	mu       sync.Mutex
	received int
	accepted []ports.Message
}

func (p *scripted) Send(_ context.Context, m ports.Message) (ports.Receipt, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := accept
	if p.received < len(p.script) {
		a = p.script[p.received]
	}
	p.received++
	switch a {
	case refuse:
		return ports.Receipt{}, errors.New("503 service unavailable")
	case refuseForGood:
		return ports.Receipt{}, ports.MarkPermanent(errors.New("21211 invalid 'To' phone number"))
	case optOut:
		return ports.Receipt{ProviderID: "opted-out:21610"}, fmt.Errorf("21610: %w", ports.ErrRecipientOptedOut)
	case overPace:
		return ports.Receipt{}, ports.RateLimited(errors.New("429 20429 too many requests"), 30*time.Second)
	}
	p.accepted = append(p.accepted, m)
	if a == acceptUnanswered {
		return ports.Receipt{}, fmt.Errorf("no answer within the send timeout: %w", ports.ErrOutcomeUnknown)
	}
	return ports.Receipt{ProviderID: fmt.Sprintf("SM%03d", len(p.accepted))}, nil
}

// Sender and Lag make it a ports.Reconciler whose list shows what it
// accepted at once.
func (p *scripted) Sender() string     { return "from:+15550001111" }
func (p *scripted) Lag() time.Duration { return 0 }

func (p *scripted) Reconcile(_ context.Context, m ports.Message, w ports.Window) (ports.Reconciliation, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cannotTell {
		return ports.Reconciliation{}, errors.New("messages list answered 503")
	}
	return listed(p.accepted, m, w), nil
}

func (p *scripted) Received() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.received
}

// scene is one test's world for the lifecycle table: a service on a memory
// store, both on a clock the test moves, the scripted SMS provider, and the
// outcomes reported for the SMS channel.
type scene struct {
	*world
	sms   *scripted
	clock atomic.Int64
	mem   *memory.Store // the store behind the world's fake one
	// limiter is the service's rate limiter, on the scene's clock: it
	// paces the channels an option gives a Pace (withPace).
	limiter *ratelimit.Local

	mu          sync.Mutex
	smsOutcomes []ports.Outcome
}

func (s *scene) now() time.Time          { return time.Unix(0, s.clock.Load()).UTC() }
func (s *scene) advance(d time.Duration) { s.clock.Add(int64(d)) }

// deadWorker leaves the claim of a worker that died while sending the SMS
// of e1, and moves the clock past its lease.
func (s *scene) deadWorker(t *testing.T, token string) {
	t.Helper()
	if _, err := s.mem.Claim(context.Background(), "sms:e1", token, "", "", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s.advance(3 * time.Second)
}

// refusingTakeover leaves the claim of a worker that died while sending
// the SMS of e1, past its lease, behind a store that finds it but cannot
// take it over (Redis answers, but refuses the takeover's script): every
// Claim reports that claim's lease with an error.
func refusingTakeover(t *testing.T, s *scene) {
	t.Helper()
	start := s.now()
	s.deadWorker(t, "dead-worker")
	abandoned := ports.Lease{Token: "dead-worker", Start: start, Until: start.Add(2 * time.Second), First: start}
	s.store.ClaimFunc = func(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
		return ports.Claim{State: ports.TakenOver, Lease: abandoned}, errors.New("NOPERM this user has no permissions to run the 'evalsha' command")
	}
}

func newScene(t *testing.T, mode domain.FailureMode, script []answer, opts ...func(*domain.Config)) *scene {
	t.Helper()
	s := &scene{sms: &scripted{script: script}}
	s.clock.Store(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixNano())
	s.mem = memory.New(s.now)
	s.limiter = ratelimit.NewLocal(s.now)
	base := func(c *domain.Config) {
		c.Now = s.now
		c.RateLimiter = s.limiter
		c.Store.(*storetest.Fake).Store = s.mem
		c.Notifiers[ports.ChannelSMS] = s.sms
		c.Reconcilers = map[ports.Channel]ports.Reconciler{ports.ChannelSMS: s.sms}
		c.Observer = ports.ObserverFunc(func(ch ports.Channel, o ports.Outcome) {
			if ch == ports.ChannelSMS {
				s.mu.Lock()
				s.smsOutcomes = append(s.smsOutcomes, o)
				s.mu.Unlock()
			}
		})
	}
	s.world = newWorld(t, mode, append([]func(*domain.Config){base}, opts...)...)
	return s
}

// kindName names how Handle's error tells the source to go on.
func kindName(err error) string {
	if err == nil {
		return "nil"
	}
	return ports.KindOf(err).String()
}

// TestService_Transitions takes a notification through each transition of
// its lifecycle (see the state type), setting the scene through the public
// API and judging the last attempt by what is observable: the key's state
// in the store (claimed: the key is free), how many sends the SMS provider
// received in the whole scene, the outcomes reported for the SMS in the
// last attempt, a log event of the last attempt, the kind of Handle's error
// and how many records the service owes.
//
// A replay meeting this process's own pending claim whose record it owes
// (claiming, InFlight, to duplicate) needs two attempts at once, so it has
// a test of its own rather than a row here.
func TestService_Transitions(t *testing.T) {
	other := strings.Replace(event("e1", "sms"), "+31201234567", "+31207654321", 1)
	noReconciler := func(c *domain.Config) { c.Reconcilers = nil }
	pace := domain.Pace{Sender: "+15550001111", Limit: ports.Limit{Rate: 1, Burst: 1}}

	// A row's before is built of steps that set the scene, in order, and
	// names the record of the last attempt: recordOf(value, ...) a fresh
	// record of value (a delivery of its own); sms(...) a fresh record of
	// e1 for the SMS; retried(want, ...) the record of e1 for the SMS
	// after a first attempt at it whose error was of kind want (its retry:
	// the same delivery).
	type step = func(t *testing.T, s *scene)
	recordOf := func(value string, steps ...step) func(*testing.T, *scene) ports.Record {
		return func(t *testing.T, s *scene) ports.Record {
			for _, st := range steps {
				st(t, s)
			}
			return record(value)
		}
	}
	sms := func(steps ...step) func(*testing.T, *scene) ports.Record {
		return recordOf(event("e1", "sms"), steps...)
	}
	retried := func(want string, steps ...step) func(*testing.T, *scene) ports.Record {
		return func(t *testing.T, s *scene) ports.Record {
			rec := sms(steps...)(t, s)
			if err := s.attempt(t, rec); kindName(err) != want {
				t.Fatalf("first attempt: %v, want %s", err, want)
			}
			return rec
		}
	}
	// The steps. sent: e1's SMS sent by a delivery of its own, before the
	// last attempt.
	sent := func(t *testing.T, s *scene) {
		if err := s.attempt(t, record(event("e1", "sms"))); err != nil {
			t.Fatal(err)
		}
	}
	storeDown := func(_ *testing.T, s *scene) { s.storeDown() }
	// A worker that died while sending the SMS of e1 left its claim.
	deadWorker := func(t *testing.T, s *scene) { s.deadWorker(t, "dead-worker") }
	cannotTell := func(_ *testing.T, s *scene) { s.sms.cannotTell = true }
	// Another replica took the sender's turns for the next minute.
	senderBusy := func(t *testing.T, s *scene) { s.pause(t, pace, time.Minute) }

	for _, tc := range []struct {
		name   string
		mode   domain.FailureMode
		script []answer
		opts   []func(*domain.Config)
		// before sets the scene and returns the record of the last attempt.
		before func(t *testing.T, s *scene) ports.Record

		kind     string
		key      ports.ClaimState
		received int
		outcomes []ports.Outcome
		event    string // "": none asserted
		owed     int
	}{{
		name: "new/delivered by this delivery/earlier",
		before: func(t *testing.T, s *scene) ports.Record {
			s.email.FailFunc = failFirst(1, errors.New("451 4.3.0 try again later"))
			rec := record(event("e1", "sms", "email"))
			if err := s.attempt(t, rec); kindName(err) != "retryable" {
				t.Fatalf("first attempt: %v, want retryable", err)
			}
			return rec
		},
		kind: "nil", key: ports.AlreadySent, received: 1, outcomes: nil, event: "notification_delivered_earlier",
	}, {
		name:   "new/record owed for another delivery/duplicate",
		before: sms(storeDown, sent),
		kind:   "nil", key: ports.Claimed, received: 1, outcomes: []ports.Outcome{ports.OutcomeDuplicate}, event: "duplicate_suppressed", owed: 1,
	}, {
		name:   "new/record owed for another message/conflict",
		before: recordOf(other, storeDown, sent),
		kind:   "permanent", key: ports.Claimed, received: 1, outcomes: []ports.Outcome{ports.OutcomeConflict}, event: "event_id_conflict", owed: 1,
	}, {
		name:   "claiming/Claimed/held/sent",
		before: sms(),
		kind:   "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "notification_sent",
	}, {
		name:   "claiming/AlreadySent/duplicate",
		before: sms(sent),
		kind:   "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeDuplicate}, event: "duplicate_suppressed",
	}, {
		name:   "claiming/AlreadySent for another message/conflict",
		before: recordOf(other, sent),
		kind:   "permanent", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeConflict}, event: "event_id_conflict",
	}, {
		name:   "claiming/store down failing open/unchecked/sent",
		before: sms(storeDown),
		kind:   "nil", key: ports.Claimed, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "idempotency_check_unavailable", owed: 1,
	}, {
		name:   "claiming/store down failing closed/failedRetryable",
		mode:   domain.FailClosed,
		before: sms(storeDown),
		kind:   "unavailable", key: ports.Claimed, received: 0, outcomes: []ports.Outcome{ports.OutcomeFailedRetryable},
	}, {
		name: "claiming/InFlight past the wait/failedRetryable",
		before: sms(func(_ *testing.T, s *scene) {
			// Another worker's claim of unknown lease, which each look
			// finds a while later.
			s.store.ClaimFunc = func(context.Context, string, string, string, string, time.Duration) (ports.Claim, error) {
				s.advance(200 * time.Millisecond)
				return ports.Claim{State: ports.InFlight, Lease: ports.Lease{Token: "other-worker"}}, nil
			}
		}),
		kind: "retryable", key: ports.Claimed, received: 0, outcomes: []ports.Outcome{ports.OutcomeFailedRetryable}, event: "claim_in_flight_wait",
	}, {
		name: "claiming/TakenOver/reconciling/the provider has it/duplicate",
		before: sms(deadWorker, func(t *testing.T, s *scene) {
			s.sms.accepted = append(s.sms.accepted, mustRenderSMS(t, "e1"))
		}),
		kind: "nil", key: ports.AlreadySent, received: 0, outcomes: []ports.Outcome{ports.OutcomeDuplicate}, event: "reconciled_delivered",
	}, {
		name:   "reconciling/not delivered/claiming/held/sent",
		before: sms(deadWorker),
		kind:   "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "reconciled_not_delivered",
	}, {
		name:   "reconciling/cannot tell yet, another's send/unknown",
		before: sms(deadWorker, cannotTell),
		kind:   "paced", key: ports.InFlight, received: 0, outcomes: []ports.Outcome{ports.OutcomeUnknown}, event: "claim_taken_over",
	}, {
		name: "reconciling/another's send, resumed, the provider has it/duplicate",
		before: func(t *testing.T, s *scene) ports.Record {
			rec := retried("paced", deadWorker, cannotTell)(t, s)
			s.sms.cannotTell = false
			s.sms.accepted = append(s.sms.accepted, mustRenderSMS(t, "e1"))
			s.advance(domain.DefaultReconcileFor) // its next ask is due
			return rec
		},
		kind: "nil", key: ports.AlreadySent, received: 0, outcomes: []ports.Outcome{ports.OutcomeDuplicate}, event: "reconciled_delivered",
	}, {
		name:   "reconciling/nobody can tell, policy dead letter/failedPermanent",
		opts:   []func(*domain.Config){noReconciler, func(c *domain.Config) { c.UnknownPolicy = domain.PolicyDeadLetter }},
		before: sms(deadWorker),
		kind:   "permanent", key: ports.Claimed, received: 0, outcomes: []ports.Outcome{ports.OutcomeFailedPermanent}, event: "unknown_outcome_dead_lettered",
	}, {
		name:   "reconciling/nobody can tell, policy resend/claiming/held/sent",
		opts:   []func(*domain.Config){noReconciler},
		before: sms(deadWorker),
		kind:   "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "unknown_outcome_resent",
	}, {
		name: "claiming/TakenOver again after reconciling/failedRetryable",
		before: sms(deadWorker, func(t *testing.T, s *scene) {
			var claims atomic.Int32
			s.store.ClaimFunc = func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
				if claims.Add(1) == 2 {
					// Between our release and our fresh claim, another
					// worker claimed the key and died.
					s.deadWorker(t, "second-dead-worker")
				}
				return s.store.Store.Claim(ctx, key, token, digest, sender, ttl)
			}
		}),
		kind: "retryable", key: ports.InFlight, received: 0, outcomes: []ports.Outcome{ports.OutcomeFailedRetryable}, event: "reconciled_not_delivered",
	}, {
		name: "claiming/TakenOver unvouched by a store failing/reconciling/the provider has it/duplicate",
		before: func(t *testing.T, s *scene) ports.Record {
			refusingTakeover(t, s)
			s.sms.accepted = append(s.sms.accepted, mustRenderSMS(t, "e1"))
			return record(event("e1", "sms"))
		},
		kind: "nil", key: ports.AlreadySent, received: 0, outcomes: []ports.Outcome{ports.OutcomeDuplicate}, event: "reconciled_delivered",
	}, {
		name: "claiming/store failing on the abandoned claim reconciled/unchecked/sent",
		before: func(t *testing.T, s *scene) ports.Record {
			refusingTakeover(t, s)
			return record(event("e1", "sms"))
		},
		kind: "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "reconciled_not_delivered",
	}, {
		name:   "held/outcome unknown/unknown",
		script: []answer{acceptUnanswered},
		before: sms(),
		kind:   "paced", key: ports.InFlight, received: 1, outcomes: []ports.Outcome{ports.OutcomeUnknown}, event: "send_outcome_unknown",
	}, {
		name:   "claiming/our own kept claim/reconciling/our send delivered/sent",
		script: []answer{acceptUnanswered},
		before: retried("paced"),
		kind:   "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "reconciled_delivered",
	}, {
		name:   "reconciling/cannot tell yet, our send/stillUnknown",
		script: []answer{acceptUnanswered},
		before: retried("paced", cannotTell),
		kind:   "paced", key: ports.InFlight, received: 1, outcomes: nil,
	}, {
		name:   "held/recipient opted out/optedOut",
		script: []answer{optOut},
		before: sms(),
		kind:   "nil", key: ports.AlreadySent, received: 1, outcomes: []ports.Outcome{ports.OutcomeOptedOut}, event: "recipient_opted_out",
	}, {
		name:   "held/no turn of the sender's pace/throttled",
		opts:   []func(*domain.Config){withPace(pace)},
		before: sms(senderBusy),
		kind:   "paced", key: ports.Claimed, received: 0, outcomes: nil, event: "rate_limit_no_turn",
	}, {
		name: "unchecked/no turn of the sender's pace, the claim landed unanswered/throttled",
		opts: []func(*domain.Config){withPace(pace)},
		before: sms(senderBusy, func(t *testing.T, s *scene) {
			// The store takes the claim but its answer is lost: failing
			// open, the worker does not know it holds it.
			s.store.ClaimFunc = func(ctx context.Context, key, token, digest, sender string, ttl time.Duration) (ports.Claim, error) {
				if _, err := s.mem.Claim(ctx, key, token, digest, sender, ttl); err != nil {
					t.Error(err)
				}
				return ports.Claim{}, errStoreDown
			}
		}),
		kind: "paced", key: ports.Claimed, received: 0, outcomes: nil, event: "rate_limit_no_turn",
	}, {
		name:   "held/the rate limiter cannot answer/throttled",
		opts:   []func(*domain.Config){withPace(pace), func(c *domain.Config) { c.RateLimiter = brokenLimiter{} }},
		before: sms(),
		kind:   "unavailable", key: ports.Claimed, received: 0, outcomes: nil,
	}, {
		name:   "held/refused for the sender's pace/throttled",
		script: []answer{overPace},
		opts:   []func(*domain.Config){withPace(pace)},
		before: sms(),
		kind:   "paced", key: ports.Claimed, received: 1, outcomes: nil, event: "notification_rate_limited",
	}, {
		name:   "held/refused for the pace, channel without a pace/throttled",
		script: []answer{overPace},
		before: sms(),
		kind:   "paced", key: ports.Claimed, received: 1, outcomes: nil, event: "notification_rate_limited",
	}, {
		name:   "held/refused/failedRetryable",
		script: []answer{refuse},
		before: sms(),
		kind:   "retryable", key: ports.Claimed, received: 1, outcomes: []ports.Outcome{ports.OutcomeFailedRetryable}, event: "notification_failed",
	}, {
		name:   "held/refused for good/failedPermanent",
		script: []answer{refuseForGood},
		before: sms(),
		kind:   "permanent", key: ports.Claimed, received: 1, outcomes: []ports.Outcome{ports.OutcomeFailedPermanent}, event: "notification_failed",
	}, {
		name: "held/sent, record refused/owed",
		before: sms(func(_ *testing.T, s *scene) {
			s.store.RecordFunc = func(context.Context, string, ports.Receipt, time.Duration) error { return errStoreDown }
		}),
		kind: "nil", key: ports.InFlight, received: 1, outcomes: []ports.Outcome{ports.OutcomeSent}, event: "idempotency_record_failed", owed: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = domain.FailOpen
			}
			s := newScene(t, mode, tc.script, tc.opts...)
			rec := tc.before(t, s)
			s.mu.Lock()
			s.smsOutcomes = nil
			s.mu.Unlock()
			logged := len(s.logs.String())

			err := s.attempt(t, rec)

			if got := kindName(err); got != tc.kind {
				t.Errorf("Handle: %v (%s), want %s", err, got, tc.kind)
			}
			if got := s.sms.Received(); got != tc.received {
				t.Errorf("the SMS provider received %d sends, want %d", got, tc.received)
			}
			s.mu.Lock()
			got := s.smsOutcomes
			s.mu.Unlock()
			if fmt.Sprint(got) != fmt.Sprint(tc.outcomes) {
				t.Errorf("SMS outcomes %v, want %v", got, tc.outcomes)
			}
			if tc.event != "" && !loggedSince(t, s.logs.String()[logged:], tc.event) {
				t.Errorf("the last attempt logged no %s:\n%s", tc.event, s.logs.String()[logged:])
			}
			if owed, _ := s.svc.Owed(); owed != tc.owed {
				t.Errorf("owed %d records, want %d", owed, tc.owed)
			}
			if got := s.claimState(t, "sms:e1"); got != tc.key {
				t.Errorf("key sms:e1 is %v, want %v", got, tc.key)
			}
		})
	}
}

// loggedSince reports whether logs, JSON lines, hold an event msg.
func loggedSince(t *testing.T, logs, msg string) bool {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		if m["msg"] == msg {
			return true
		}
	}
	return false
}
