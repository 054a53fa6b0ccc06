package kafka_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
)

// TestWorkers holds the partition's goroutines to the go statement's
// promises, which the key queues rely on: every function given runs, none
// waits for another to return (a key's records must not wait on another
// key's), Wait returns once all have, and after Stop no goroutine is left.
func TestWorkers(t *testing.T) {
	const calls = 16
	before := runtime.NumGoroutine()
	w := kafka.NewWorkers()
	for round := range 3 {
		var ran atomic.Int32
		started := make(chan struct{}, calls)
		release := make(chan struct{})
		for range calls {
			w.Go(func() {
				started <- struct{}{}
				<-release
				ran.Add(1)
			})
		}
		// All of them at once: each is blocked until release, so a
		// function run only after another returned would never start.
		for i := range calls {
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: %d of %d functions running at once, want all", round, i, calls)
			}
		}
		waited := make(chan struct{})
		go func() { w.Wait(); close(waited) }()
		select {
		case <-waited:
			t.Fatalf("round %d: Wait returned while every function was still running", round)
		default:
		}
		close(release)
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Wait did not return after every function did", round)
		}
		if n := ran.Load(); n != calls {
			t.Fatalf("round %d: %d functions ran to their end before Wait returned, want %d", round, n, calls)
		}
	}
	w.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10s after Stop, %d before the workers", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkers_GoAfterStop: a function given after Stop still runs, and
// Wait still waits for it; its goroutine then exits.
func TestWorkers_GoAfterStop(t *testing.T) {
	w := kafka.NewWorkers()
	w.Stop()
	var ran atomic.Bool
	w.Go(func() { ran.Store(true) })
	w.Wait()
	if !ran.Load() {
		t.Fatal("Wait returned before the function given after Stop ran")
	}
}
