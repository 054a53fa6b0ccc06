package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/ports"
)

// TestClaimTTL_AtTheBoundASlowStoreSendsOnce runs the claim TTL the
// configuration rule lets through, at its smallest, against the slowest
// store and provider the timeouts allow, with two workers sharing a real
// redis-server (a rebalance overlap).
//
// Worker A reaches Redis through a proxy that holds each of its commands
// back for 70% of IDEMPOTENCY_TIMEOUT: its claim lands at once after that
// (its lease counted from before it left), its email takes 90% of
// SEND_TIMEOUT, and its sent record lands 70% of the timeout after it left.
// Worker B tries the same email while A's claim is pending: it waits on
// the lease, and would take the claim over and send again if the lease
// ended before A's record landed. The rule must count both round trips
// (and the clocks' skew), so that B finds the record: one email.
func TestClaimTTL_AtTheBoundASlowStoreSendsOnce(t *testing.T) {
	const (
		storeTimeout = time.Second
		sendTimeout  = time.Second
		requestDelay = 700 * time.Millisecond // A's commands, Redis-bound
		sendTakes    = 900 * time.Millisecond // A's provider call
	)
	// The smallest claim TTL the rule accepts, to the millisecond.
	claimTTL := sendTimeout
	for domain.CheckClaimTTL(claimTTL, sendTimeout, storeTimeout) != nil {
		claimTTL += time.Millisecond
	}
	t.Logf("claim TTL at the bound: %v (send %v, store %v)", claimTTL, sendTimeout, storeTimeout)

	srv := redistest.MustStart(t)
	proxy := startDelayProxy(t, srv.Addr(), requestDelay)
	prefix := uniqueName("lease") + ":"
	newStore := func(addr string) *redis.Store {
		s, err := redis.New(redis.Config{URL: "redis://" + addr, KeyPrefix: prefix, Format: redis.Readable, Timeout: storeTimeout, KeepAbandoned: time.Hour})
		if err != nil {
			t.Fatalf("redis.New: %v", err)
		}
		t.Cleanup(s.Close)
		return s
	}

	// The provider: every email it accepted, in order.
	var mu sync.Mutex
	var accepted []string
	aSending := make(chan struct{})
	provider := func(worker string, takes time.Duration, started chan<- struct{}) ports.Notifier {
		return notifierFunc(func(ctx context.Context, m ports.Message) (ports.Receipt, error) {
			if started != nil {
				close(started)
			}
			select {
			case <-time.After(takes):
			case <-ctx.Done():
				return ports.Receipt{}, ctx.Err()
			}
			mu.Lock()
			defer mu.Unlock()
			accepted = append(accepted, worker)
			return ports.Receipt{ProviderID: worker}, nil
		})
	}
	newService := func(worker string, store ports.IdempotencyStore, n ports.Notifier, logs io.Writer) *domain.Service {
		svc, err := domain.NewService(domain.Config{
			Store:        store,
			Notifiers:    map[ports.Channel]ports.Notifier{ports.ChannelEmail: n},
			ClaimTTL:     claimTTL,
			StoreTimeout: storeTimeout,
			SendTimeout:  sendTimeout,
			ClaimWaitMax: 20 * time.Millisecond,
			Logger:       slog.New(slog.NewJSONHandler(logs, nil)).With("worker", worker),
		})
		if err != nil {
			t.Fatalf("NewService %s: %v", worker, err)
		}
		t.Cleanup(svc.Close)
		return svc
	}
	var logs logtest.Buffer
	a := newService("A", newStore(proxy), provider("A", sendTakes, aSending), &logs)
	b := newService("B", newStore(srv.Addr()), provider("B", 0, nil), &logs)

	evs, _ := sampleEvents(1)
	evs[0].Channels = []string{"email"}
	rec := ports.Record{Topic: "shipment-events", Value: evs[0].json()}
	errs := make(chan error, 2)
	go func() { errs <- a.Handle(context.Background(), rec) }()
	select {
	case <-aSending: // A holds the claim: B meets it pending
	case <-time.After(waitWithin):
		t.Fatalf("A never sent; logs:\n%s", logs.String())
	}
	go func() { errs <- b.Handle(context.Background(), rec) }()
	for range 2 {
		select {
		case err := <-errs:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("Handle: %v", err)
			}
		case <-time.After(waitWithin):
			t.Fatalf("Handle did not return within %v", waitWithin)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accepted) != 1 {
		t.Errorf("the provider accepted %d emails (from %v), want 1; logs:\n%s", len(accepted), accepted, logs.String())
	}
}

// startDelayProxy forwards 127.0.0.1 connections to target, holding back
// everything sent to target by delay (answers come back at once), and
// returns its address.
func startDelayProxy(tb testing.TB, target string, delay time.Duration) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); delayedCopy(up, c, delay); up.Close(); c.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); up.Close(); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// delayedCopy copies src to dst, each chunk written delay after it was read,
// in order.
func delayedCopy(dst io.Writer, src io.Reader, delay time.Duration) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				chunks <- chunk{time.Now(), b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.at.Add(delay)))
		if _, err := dst.Write(c.b); err != nil {
			for range chunks {
			}
			return
		}
	}
}

// notifierFunc is a ports.Notifier made of a function: a provider double.
type notifierFunc func(context.Context, ports.Message) (ports.Receipt, error)

func (f notifierFunc) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	return f(ctx, m)
}
