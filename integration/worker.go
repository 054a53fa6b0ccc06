package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"

	"github.com/harborlight/notification-worker/internal/logtest"
)

// StopGrace is how long Stop lets the worker shut down after SIGTERM before
// it is killed. The worker finishes the record in hand and commits; that
// takes well under this.
const StopGrace = 20 * time.Second

// Worker is one running notification-worker, as a container
// (StartWorkerContainer) or a host process (StartWorkerProcess). Both have
// the same surface, so a scenario can run on either. Safe for concurrent
// use.
type Worker struct {
	// HTTPAddr is "127.0.0.1:port", where /healthz, /readyz and /metrics
	// answer (the HTTP_ADDR the harness gave it unless env set one).
	HTTPAddr string
	// Impl is the image, or the binary's path, that runs.
	Impl string

	r workerRunner
}

// workerRunner is what differs between a container and a process.
type workerRunner interface {
	// output is everything written to stdout and stderr so far.
	output() []byte
	// stop sends SIGTERM, waits up to grace, then kills.
	stop(ctx context.Context, grace time.Duration) error
	// kill sends SIGKILL and waits until the worker is gone.
	kill(ctx context.Context) error
	// exitCode reports the exit code once the worker exited (-1 if killed
	// by a signal).
	exitCode(ctx context.Context) (code int, exited bool)
}

// workerEnv is env with the harness's defaults for what env leaves unset: a
// free loopback HTTP port and JSON logs, which the Worker methods parse.
func workerEnv(t testing.TB, env map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{
		"HTTP_ADDR":  "127.0.0.1:" + strconv.Itoa(FreePort(t)),
		"LOG_FORMAT": "json",
	}
	maps.Copy(out, env)
	return out
}

// StartWorkerContainer runs the worker image (WORKER_IMAGE, default
// notification-worker:dev, built by scripts/build-images.sh) with env as its
// whole configuration, on the host network. It returns once the container
// started; use WaitReady or WaitLog to wait for the worker itself. The
// container is removed when the test ends.
func StartWorkerContainer(t testing.TB, env map[string]string) *Worker {
	t.Helper()
	img := mustPickImage(t, "WORKER_IMAGE", "notification-worker:dev", "")
	env = workerEnv(t, env)
	_, port, _ := strings.Cut(env["HTTP_ADDR"], ":")
	c := startContainer(t, testcontainers.ContainerRequest{
		Image:        img,
		Env:          env,
		ExposedPorts: []string{port + "/tcp"},
	})
	return &Worker{HTTPAddr: env["HTTP_ADDR"], Impl: img, r: &containerRunner{c: c}}
}

type containerRunner struct{ c testcontainers.Container }

func (r *containerRunner) output() []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := containerOutput(ctx, r.c.GetContainerID())
	if err != nil {
		return []byte("(logs unavailable: " + err.Error() + ")\n")
	}
	return out
}

func (r *containerRunner) stop(ctx context.Context, grace time.Duration) error {
	return r.c.Stop(ctx, &grace)
}

func (r *containerRunner) kill(ctx context.Context) error { return killContainer(ctx, r.c) }

func (r *containerRunner) exitCode(ctx context.Context) (int, bool) {
	st, err := r.c.State(ctx)
	if err != nil || st.Running || st.Restarting {
		return 0, false
	}
	if st.OOMKilled || st.ExitCode == 137 {
		return -1, true
	}
	return st.ExitCode, true
}

var (
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

// WorkerBinary returns the path of a notification-worker binary built from
// this checkout, building it on first use in the test run (WORKER_BINARY
// overrides it with a prebuilt one). The build is incremental, so a run
// pays a full compile only when the sources changed.
func WorkerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("WORKER_BINARY"); p != "" {
		return p
	}
	buildOnce.Do(func() { workerBin, buildErr = buildWorker() })
	if buildErr != nil {
		t.Fatalf("build the worker: %v", buildErr)
	}
	return workerBin
}

func buildWorker() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	// A fixed path per checkout, reused across runs, instead of a
	// temporary directory that no one would remove: go build overwrites it
	// by rename, so a worker still running from an older build is not
	// disturbed, and two checkouts tested at once never share a binary.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("notification-worker-integration-%08x", crc32.ChecksumIEEE([]byte(root))))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "notification-worker")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/notification-worker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return bin, nil
}

// StartWorkerProcess runs the worker binary (WorkerBinary) as a process on
// this host with env as its whole environment (plus PATH and TMPDIR), so the
// developer's own shell variables cannot leak into a scenario. It starts in
// milliseconds, which scenarios that kill and restart workers many times
// need. It returns once the process started; use WaitReady or WaitLog to
// wait for the worker itself. The process is killed when the test ends if it
// still runs.
func StartWorkerProcess(t testing.TB, env map[string]string) *Worker {
	t.Helper()
	bin := WorkerBinary(t)
	env = workerEnv(t, env)
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	r := &processRunner{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		_ = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.kill(ctx)
	})
	return &Worker{HTTPAddr: env["HTTP_ADDR"], Impl: bin, r: r}
}

type processRunner struct {
	cmd  *exec.Cmd
	out  logtest.Buffer
	done chan struct{} // closed when cmd.Wait returned
}

func (r *processRunner) output() []byte { return r.out.Bytes() }

func (r *processRunner) stop(ctx context.Context, grace time.Duration) error {
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-r.done:
		return nil
	case <-time.After(grace):
	case <-ctx.Done():
	}
	return r.kill(ctx)
}

func (r *processRunner) kill(ctx context.Context) error {
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *processRunner) exitCode(context.Context) (int, bool) {
	select {
	case <-r.done:
		return r.cmd.ProcessState.ExitCode(), true
	default:
		return 0, false
	}
}

// Logs returns every line the worker wrote so far (stdout and stderr
// interleaved), including after it exited.
func (w *Worker) Logs() []string { return splitLines(w.r.output()) }

// Events returns the JSON log lines whose "msg" is msg, decoded, oldest
// first. Lines that are not JSON are skipped.
func (w *Worker) Events(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range w.Logs() {
		var ev map[string]any
		if json.Unmarshal([]byte(l), &ev) == nil && ev["msg"] == msg {
			out = append(out, ev)
		}
	}
	return out
}

// Count returns how many log lines have msg as their "msg".
func (w *Worker) Count(msg string) int { return len(w.Events(msg)) }

// WaitLog waits until at least count log lines have msg as their "msg"
// (e.g. WaitLog("notification_sent", 3, 10*time.Second)) and returns them.
// It gives up early, with the last log lines in the error, when the worker
// exits first.
func (w *Worker) WaitLog(msg string, count int, timeout time.Duration) ([]map[string]any, error) {
	var evs []map[string]any
	err := w.poll(timeout, 25*time.Millisecond, func() (bool, string) {
		evs = w.Events(msg)
		return len(evs) >= count, fmt.Sprintf("%d of %d %q lines", len(evs), count, msg)
	})
	return evs, err
}

// WaitReady waits until GET /readyz answers 200: the worker joined its
// group, with or without partitions. It gives up early when the worker exits.
func (w *Worker) WaitReady(timeout time.Duration) error {
	return w.waitReadyz(timeout, func(string) bool { return true })
}

// WaitAssigned waits until GET /readyz answers 200 with the consumer
// "assigned": the worker holds partitions, so a rebalance its join started
// has finished. It gives up early when the worker exits.
func (w *Worker) WaitAssigned(timeout time.Duration) error {
	return w.waitReadyz(timeout, func(body string) bool { return strings.Contains(body, `"consumer":"assigned"`) })
}

// waitReadyz polls /readyz until it answers 200 with a body ok accepts.
func (w *Worker) waitReadyz(timeout time.Duration, ok func(body string) bool) error {
	hc := &http.Client{Timeout: time.Second}
	return w.poll(timeout, 50*time.Millisecond, func() (bool, string) {
		resp, err := hc.Get("http://" + w.HTTPAddr + "/readyz")
		if err != nil {
			return false, "not ready: " + err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && ok(string(body)), "not ready: " + resp.Status + ": " + strings.TrimSpace(string(body))
	})
}

// poll calls check every interval until it reports done, and returns nil;
// it returns an error, with check's word on how far things got and the
// worker's last log lines, when the worker exits first or timeout passes.
func (w *Worker) poll(timeout, interval time.Duration, check func() (done bool, got string)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, got := check()
		if done {
			return nil
		}
		if code, exited := w.r.exitCode(context.Background()); exited {
			return fmt.Errorf("worker exited (code %d): %s\n%s", code, got, w.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v: %s\n%s", timeout, got, w.tail())
		}
		time.Sleep(interval)
	}
}

// Metrics returns the Prometheus text exposition from GET /metrics.
func (w *Worker) Metrics(ctx context.Context) (string, error) {
	var text string
	err := callJSON(ctx, http.MethodGet, "http://"+w.HTTPAddr+"/metrics", nil, &text)
	return text, err
}

// PID returns the worker's process id on this host, or 0 when it runs in
// a container.
func (w *Worker) PID() int {
	if r, ok := w.r.(*processRunner); ok {
		return r.cmd.Process.Pid
	}
	return 0
}

// Stop sends SIGTERM and waits for the worker to exit, killing it after
// StopGrace; then ExitCode tells how it ended.
func (w *Worker) Stop(ctx context.Context) error { return w.r.stop(ctx, StopGrace) }

// Kill sends SIGKILL (a crash: no shutdown, no commit) and waits until the
// worker is gone.
func (w *Worker) Kill(ctx context.Context) error { return w.r.kill(ctx) }

// ExitCode returns the worker's exit code and true once it exited; -1 means
// it was killed by a signal.
func (w *Worker) ExitCode() (code int, exited bool) { return w.r.exitCode(context.Background()) }

func (w *Worker) tail() string {
	return "last log lines:\n  " + strings.Join(lastLines(w.Logs(), 30), "\n  ")
}
