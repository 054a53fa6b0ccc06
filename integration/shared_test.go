//go:build integration

package integration

import (
	"slices"
	"testing"
)

// TestProcessTB: a Fatal in what processTB runs ends that function alone
// and marks the lifetime failed with the message kept; Cleanup functions
// run last first, and one that fails does not stop the others.
func TestProcessTB(t *testing.T) {
	t.Parallel()
	p := &processTB{name: "shared"}
	after := false
	p.run(func() {
		p.Fatalf("no broker: %d", 42)
		after = true
	})
	if after || !p.Failed() || !slices.Equal(p.logs, []string{"shared: no broker: 42"}) {
		t.Fatalf("after Fatalf: ran on %v, failed %v, logs %q", after, p.Failed(), p.logs)
	}

	var order []int
	p.Cleanup(func() { order = append(order, 1) })
	p.Cleanup(func() { p.FailNow() })
	p.Cleanup(func() { order = append(order, 3) })
	p.runCleanups()
	if !slices.Equal(order, []int{3, 1}) {
		t.Fatalf("cleanups ran %v, want [3 1]", order)
	}
}
