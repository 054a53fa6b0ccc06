package integration

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupTrace is the consumer group requests an in-process kfake received,
// in order, with when each arrived: what a test that fails on a stalled
// group reports, since kfake logs nothing of its classic groups. Its
// methods are safe for concurrent use.
type groupTrace struct {
	began time.Time

	mu    sync.Mutex
	lines []string // guarded by mu
}

// maxTraceLines bounds a trace's memory; later requests are counted, not
// kept.
const maxTraceLines = 50_000

// traceGroups records every JoinGroup, SyncGroup, Heartbeat and LeaveGroup
// c receives, without changing how c handles them.
func traceGroups(c *kfake.Cluster) *groupTrace {
	tr := &groupTrace{began: time.Now()}
	observe := func(key kmsg.Key, describe func(kmsg.Request) string) {
		c.ControlKey(int16(key), func(r kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			tr.add(describe(r))
			return nil, nil, false
		})
	}
	observe(kmsg.JoinGroup, func(r kmsg.Request) string {
		req := r.(*kmsg.JoinGroupRequest)
		return fmt.Sprintf("JoinGroup v%d %s member=%q session=%dms rebalance=%dms", req.Version, req.Group, req.MemberID, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis)
	})
	observe(kmsg.SyncGroup, func(r kmsg.Request) string {
		req := r.(*kmsg.SyncGroupRequest)
		return fmt.Sprintf("SyncGroup %s member=%q gen=%d assignments=%d", req.Group, req.MemberID, req.Generation, len(req.GroupAssignment))
	})
	observe(kmsg.Heartbeat, func(r kmsg.Request) string {
		req := r.(*kmsg.HeartbeatRequest)
		return fmt.Sprintf("Heartbeat v%d %s member=%q gen=%d", req.Version, req.Group, req.MemberID, req.Generation)
	})
	observe(kmsg.LeaveGroup, func(r kmsg.Request) string {
		req := r.(*kmsg.LeaveGroupRequest)
		ids := []string{req.MemberID}
		for _, m := range req.Members {
			ids = append(ids, m.MemberID)
		}
		return fmt.Sprintf("LeaveGroup %s members=%q", req.Group, ids)
	})
	return tr
}

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
