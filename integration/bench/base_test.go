package bench

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The baseline revision: the rows that compare this checkout's worker
// with an earlier one build both binaries in the same run and measure
// them side by side on the same input, so the machine's load on the day
// weighs on both alike.

// baseRevision is BENCH_BASE (any revision git names: a commit, a branch,
// HEAD~3), default HEAD~1: the commit before this one, or on a merge the
// branch's previous tip.
func baseRevision() string {
	if r := os.Getenv("BENCH_BASE"); r != "" {
		return r
	}
	return "HEAD~1"
}

// baseWorker returns the worker binary of the baseline revision and its
// short commit, built (static, trimmed, as `make build`) from `git archive`
// of that commit into a directory of its own under the temporary directory,
// once per commit: a build is reused by later runs, since a commit's
// source does not change. It fails b when git cannot name the revision or
// the revision does not build.
func baseWorker(b *testing.B) (bin, commit string) {
	b.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	root := checkoutRoot(b)
	rev := baseRevision()
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", rev+"^{commit}").Output()
	if err != nil {
		b.Fatalf("BENCH_BASE %q: git rev-parse: %v", rev, err)
	}
	commit = strings.TrimSpace(string(out))
	sum := sha256.Sum256([]byte(commit))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("notification-worker-bench-base-%x", sum[:6]))
	bin = filepath.Join(dir, "notification-worker")
	if _, err := os.Stat(bin); err == nil {
		return bin, commit[:12]
	}
	src, err := os.MkdirTemp("", "notification-worker-base-src-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("git archive %s: %v\n%s", commit, err, out)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	// Built to a temporary name and renamed: a run killed mid-build
	// leaves no half binary for the next one to reuse.
	tmp := bin + ".tmp"
	build := exec.Command("go", "build", "-trimpath", "-o", tmp, "./cmd/notification-worker")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build the worker of %s: %v\n%s", commit, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		b.Fatal(err)
	}
	return bin, commit[:12]
}

// checkoutRoot is the directory of this checkout's go.mod.
func checkoutRoot(b *testing.B) string {
	b.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		b.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(gomod)))
}
