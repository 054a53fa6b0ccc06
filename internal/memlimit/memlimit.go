// Package memlimit tells the Go runtime how much memory its container may
// use, so the garbage collector works harder as the heap nears the limit
// instead of letting it grow to twice the live heap (GOGC=100) and the
// container be killed for it.
package memlimit

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the container's limit given to the Go
// runtime as its soft limit: the rest is for what the runtime does not
// count (the binary's text, thread stacks the kernel maps, page tables) and
// for the time the collector needs to catch up with a burst.
const DefaultRatio = 0.9

// Where the soft limit came from.
const (
	SourceGOMEMLIMIT = "GOMEMLIMIT" // the operator set it; left as it is
	SourceCgroup     = "cgroup"     // Ratio of the container's memory limit
	SourceNone       = "none"       // no limit found: the runtime's default, GOGC alone
)

// Limit is what Apply decided.
type Limit struct {
	// Bytes is the runtime's soft memory limit now; math.MaxInt64 means none.
	Bytes int64
	// Source is one of SourceGOMEMLIMIT, SourceCgroup and SourceNone.
	Source string
	// Cgroup is the container's memory limit in bytes, 0 when there is none
	// (or none could be read).
	Cgroup int64
}

// Apply sets the runtime's soft memory limit to ratio times the
// container's cgroup memory limit (cgroup v2 memory.max, or v1
// memory.limit_in_bytes), unless the operator set GOMEMLIMIT, which the
// runtime has already applied and which wins. Without either, it changes
// nothing. Call it once, at start; it is not safe to race with itself.
func Apply(ratio float64) Limit {
	return apply("/", ratio, debug.SetMemoryLimit(-1), func(n int64) { debug.SetMemoryLimit(n) })
}

// apply is Apply with the file system root, the runtime's current limit
// and its setter given, for tests.
func apply(root string, ratio float64, current int64, set func(int64)) Limit {
	cg := cgroupLimit(root)
	if current != math.MaxInt64 {
		// Only GOMEMLIMIT sets it before main runs.
		return Limit{Bytes: current, Source: SourceGOMEMLIMIT, Cgroup: cg}
	}
	if cg <= 0 {
		return Limit{Bytes: current, Source: SourceNone}
	}
	n := int64(float64(cg) * ratio)
	set(n)
	return Limit{Bytes: n, Source: SourceCgroup, Cgroup: cg}
}

// unlimitedV1 is the smallest value cgroup v1 reports for "no limit" (the
// largest int64, rounded down to a page).
const unlimitedV1 = 1 << 62

// cgroupLimit returns the memory limit of the cgroup this process runs in,
// or 0 when it has none or none can be read. It looks at the process's own
// cgroup path first and then at the mount's root, which is what a
// container with its own cgroup namespace (or the usual v1 bind mount)
// sees as its cgroup.
func cgroupLimit(root string) int64 {
	v2Path, v1Path := ownCgroups(filepath.Join(root, "proc/self/cgroup"))
	base := filepath.Join(root, "sys/fs/cgroup")
	for _, f := range []string{
		filepath.Join(base, v2Path, "memory.max"),
		filepath.Join(base, "memory.max"),
		filepath.Join(base, "memory", v1Path, "memory.limit_in_bytes"),
		filepath.Join(base, "memory", "memory.limit_in_bytes"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(bytes.TrimSpace(b))
		if s == "max" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= unlimitedV1 {
			return 0
		}
		return n
	}
	return 0
}

// ownCgroups reads /proc/self/cgroup for the process's cgroup v2 path
// ("0::<path>") and its v1 memory controller's path ("N:memory:<path>").
func ownCgroups(file string) (v2, v1 string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	return v2, v1
}
