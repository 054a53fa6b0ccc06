package integration

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// sharedKafka is the broker SharedKafka hands out: started by the first
// caller, stopped by StopSharedKafka.
var sharedKafka struct {
	mu    sync.Mutex
	k     *Kafka
	owner *processTB // the lifetime the broker's cleanups are bound to
	err   string     // why the start failed; every later caller fails with it
	tried bool
}

// SharedKafka returns a one-node broker, the one StartKafka would start,
// shared by every test of this process that calls it: the first caller
// starts it, the others get the same one, and StopSharedKafka (from the
// package's TestMain, after m.Run) removes it. Starting a broker takes a
// JVM two starts and seconds of CPU, which a suite of parallel scenarios
// on two cores pays once this way instead of once per test.
//
// Only for tests that keep to their own topic, group and dead letter
// topic (names unique to the test and the run) and leave the broker as
// they found it: never kill, pause or reconfigure it (use StartKafka or
// StartKafkaCluster for that, or for other server settings). Each caller
// logs the broker it got ("broker: ... (shared)"), as StartKafka does. When
// the start failed, every caller fails with the same message.
func SharedKafka(t testing.TB) *Kafka {
	t.Helper()
	sharedKafka.mu.Lock()
	defer sharedKafka.mu.Unlock()
	if !sharedKafka.tried {
		sharedKafka.tried = true
		owner := &processTB{name: "SharedKafka"}
		var k *Kafka
		owner.run(func() { k = StartKafka(owner) })
		sharedKafka.owner = owner
		if owner.failed {
			sharedKafka.err = strings.Join(owner.logs, "\n")
		} else {
			sharedKafka.k = k
		}
	}
	if sharedKafka.k == nil {
		t.Fatalf("shared kafka: the start failed:\n%s", sharedKafka.err)
	}
	k := sharedKafka.k
	t.Logf("broker: %s on %s (shared by the tests of this run)", k.Impl, strings.Join(k.Brokers, ","))
	return k
}

// StopSharedKafka removes the broker SharedKafka started, if it did. With
// failed (some test of the run failed), the broker's whole log is kept
// first, as for a per-test broker, and its path printed. Call it once,
// after every test ended (from TestMain).
func StopSharedKafka(failed bool) {
	sharedKafka.mu.Lock()
	defer sharedKafka.mu.Unlock()
	if sharedKafka.owner == nil {
		return
	}
	sharedKafka.owner.failed = sharedKafka.owner.failed || failed
	sharedKafka.owner.runCleanups()
	for _, l := range sharedKafka.owner.logs {
		fmt.Println(l)
	}
	sharedKafka.owner, sharedKafka.k = nil, nil
}

// processTB is a testing.TB whose lifetime is the test process rather than
// one test, for the harness's start functions when what they start is
// shared: Cleanup functions run at runCleanups, log lines are kept, and a
// Fatal or Skip ends the function given to run (which then reports failed)
// instead of a test. Only the methods the harness calls are implemented;
// the embedded nil testing.TB makes any other one panic, loudly.
type processTB struct {
	testing.TB

	name     string
	mu       sync.Mutex
	logs     []string
	cleanups []func()
	failed   bool
}

// run calls f on a goroutine of its own, so that a Fatal in it (a
// runtime.Goexit) ends f and not the caller, and waits for it.
func (p *processTB) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// runCleanups runs the Cleanup functions, last registered first, each as
// run does: one that fails (testcontainers' container removal ends with
// FailNow on an error) ends itself, not the caller or the others.
func (p *processTB) runCleanups() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.run(p.cleanups[i])
	}
	p.cleanups = nil
}

func (p *processTB) Helper()          {}
func (p *processTB) Name() string     { return p.name }
func (p *processTB) Cleanup(f func()) { p.mu.Lock(); p.cleanups = append(p.cleanups, f); p.mu.Unlock() }
func (p *processTB) Log(args ...any)  { p.logf("%s", fmt.Sprint(args...)) }
func (p *processTB) Logf(f string, args ...any) {
	p.logf(f, args...)
}
func (p *processTB) Error(args ...any) { p.Fail(); p.Log(args...) }
func (p *processTB) Errorf(f string, args ...any) {
	p.Fail()
	p.logf(f, args...)
}
func (p *processTB) Fatal(args ...any) { p.Log(args...); p.FailNow() }
func (p *processTB) Fatalf(f string, args ...any) {
	p.logf(f, args...)
	p.FailNow()
}
func (p *processTB) Fail()         { p.mu.Lock(); p.failed = true; p.mu.Unlock() }
func (p *processTB) Failed() bool  { p.mu.Lock(); defer p.mu.Unlock(); return p.failed }
func (p *processTB) FailNow()      { p.Fail(); runtime.Goexit() }
func (p *processTB) Skip(a ...any) { p.Fatal(append([]any{"skipped: "}, a...)...) }
func (p *processTB) Skipf(f string, args ...any) {
	p.Fatalf("skipped: "+f, args...)
}
func (p *processTB) SkipNow() { p.FailNow() }

func (p *processTB) logf(f string, args ...any) {
	p.mu.Lock()
	p.logs = append(p.logs, p.name+": "+fmt.Sprintf(f, args...))
	p.mu.Unlock()
}
