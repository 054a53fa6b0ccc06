package integration

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// groupTrace is the consumer group requests an in-process kfake received,
// in order, with when each arrived (devbroker's Broker.TraceGroups): what
// a test that fails on a stalled group reports. Its methods are safe for
// concurrent use.
type groupTrace struct {
	began time.Time

	mu    sync.Mutex
	lines []string // guarded by mu
}

// maxTraceLines bounds a trace's memory; later requests are counted, not
// kept.
const maxTraceLines = 50_000

// add records line, stamped with the time since the trace began.
func (tr *groupTrace) add(line string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.lines) < maxTraceLines {
		tr.lines = append(tr.lines, fmt.Sprintf("%9.3fs %s", time.Since(tr.began).Seconds(), line))
	}
}

// note records a line the test adds, such as a chaos action, among the
// requests.
func (tr *groupTrace) note(line string) {
	if tr != nil {
		tr.add("-- " + line)
	}
}

// text is the trace so far, a line per request.
func (tr *groupTrace) text() []byte {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return []byte(strings.Join(tr.lines, "\n") + "\n")
}
