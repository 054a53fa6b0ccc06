//go:build integration

package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/harborlight/notification-worker/integration"
)

// nonRootUID is the user the Dockerfile runs the worker as.
const nonRootUID = 65532

// TestContainer is scenario 8: the incident scenario passes with the worker
// running as the project's own image (non-root, FROM scratch, configured by
// environment only), and the image answers its probes and metrics the way
// the Deployment and the alerts expect (issue 5, acceptance 1).
func TestContainer(t *testing.T) {
	t.Parallel()
	runIncident(t, integration.StartWorkerContainer, "container", incidentHooks{
		sent: func(t *testing.T, w *integration.Worker, evs []shipEvent) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sms, email := countChannels(evs)
			t.Run("RunsAsNonRoot", func(t *testing.T) { assertNonRoot(ctx, t, w) })
			t.Run("Healthz", func(t *testing.T) {
				code, body, err := httpGet(ctx, w.HTTPAddr, "/healthz")
				if err != nil || code != http.StatusOK {
					t.Errorf("GET /healthz = %d %q, %v; want 200", code, body, err)
				}
			})
			t.Run("ReadyzWhenAssigned", func(t *testing.T) {
				code, body, err := httpGet(ctx, w.HTTPAddr, "/readyz")
				if err != nil || code != http.StatusOK || !strings.Contains(body, `"consumer":"assigned"`) {
					t.Errorf("GET /readyz = %d %q, %v; want 200 with the consumer assigned", code, body, err)
				}
			})
			t.Run("MetricsCountSent", func(t *testing.T) {
				const name = "notification_worker_notifications_total"
				waitMetric(ctx, t, w, float64(sms), name, `channel="sms"`, `outcome="sent"`)
				waitMetric(ctx, t, w, float64(email), name, `channel="email"`, `outcome="sent"`)
				waitMetric(ctx, t, w, 0, name, `channel="sms"`, `outcome="duplicate"`)
				waitMetric(ctx, t, w, 0, name, `channel="email"`, `outcome="duplicate"`)
			})
		},
		replayed: func(t *testing.T, w *integration.Worker, evs []shipEvent) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sms, email := countChannels(evs)
			t.Run("MetricsCountReplaySuppressed", func(t *testing.T) {
				const name = "notification_worker_notifications_total"
				waitMetric(ctx, t, w, float64(sms), name, `channel="sms"`, `outcome="duplicate"`)
				waitMetric(ctx, t, w, float64(email), name, `channel="email"`, `outcome="duplicate"`)
				waitMetric(ctx, t, w, 0, name, `channel="sms"`, `outcome="sent"`)
				waitMetric(ctx, t, w, 0, name, `channel="email"`, `outcome="sent"`)
				waitMetric(ctx, t, w, float64(sms+email), "notification_worker_duplicates_suppressed_total")
			})
		},
	})
}

// assertNonRoot checks the container behind w two ways: the user its
// configuration names (what the image's USER gave it), and the uid the
// kernel reports for its process, read from /proc on this host (the
// container shares the host's PID namespace view from the engine's side).
func assertNonRoot(ctx context.Context, t *testing.T, w *integration.Worker) {
	t.Helper()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	id, err := workerContainerID(ctx, cli, w)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	want := strconv.Itoa(nonRootUID)
	if user, _, _ := strings.Cut(c.Config.User, ":"); user != want {
		t.Errorf("container %s runs as user %q, want %s (non-root)", id[:12], c.Config.User, want)
	}
	if c.State == nil || c.State.Pid == 0 {
		t.Fatalf("container %s has no running process", id[:12])
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.State.Pid))
	if err != nil {
		// The engine may run in another PID namespace than the tests; the
		// configured user above still holds.
		t.Logf("cannot read the worker's process status on this host: %v", err)
		return
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			// Real, effective, saved and filesystem uid: none may be root.
			for _, uid := range strings.Fields(rest) {
				if uid != want {
					t.Errorf("worker process %d: %s, want every uid %s", c.State.Pid, line, want)
					break
				}
			}
			t.Logf("container %s: user %q, process %d %s", id[:12], c.Config.User, c.State.Pid, strings.Join(strings.Fields(line), " "))
			return
		}
	}
	t.Errorf("no Uid line in /proc/%d/status", c.State.Pid)
}

// workerContainerID finds the container behind w: the running container of
// w's image whose environment gave it w's HTTP address (unique per worker,
// so a parallel test's container of the same image does not match). The
// harness keeps the container to itself, and asking the engine is what an
// operator would do too.
func workerContainerID(ctx context.Context, cli *testcontainers.DockerClient, w *integration.Worker) (string, error) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		Filters: make(client.Filters).Add("ancestor", w.Impl),
	})
	if err != nil {
		return "", fmt.Errorf("list containers of %s: %w", w.Impl, err)
	}
	for _, s := range list.Items {
		res, err := cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{})
		if err != nil {
			continue
		}
		if res.Container.Config != nil && slices.Contains(res.Container.Config.Env, "HTTP_ADDR="+w.HTTPAddr) {
			return s.ID, nil
		}
	}
	return "", fmt.Errorf("no running container of %s listens on %s", w.Impl, w.HTTPAddr)
}
