package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// startTimeout bounds how long any peer may take to answer after its
// container started. Generous: CI machines are shared and slow, and an
// Apache Kafka node (two JVM starts, the storage tool's and the broker's)
// took more than a minute on two cores busy with parallel scenarios and
// other builds.
const startTimeout = 3 * time.Minute

var (
	dockerOnce sync.Once
	dockerCli  *testcontainers.DockerClient
	dockerErr  error
)

// dockerAPI returns the process-wide Docker client the harness uses for
// what testcontainers does not wrap (image lookups, SIGKILL, logs).
func dockerAPI() (*testcontainers.DockerClient, error) {
	dockerOnce.Do(func() {
		dockerCli, dockerErr = testcontainers.NewDockerClientWithOpts(context.Background())
		if dockerErr == nil {
			_, dockerErr = dockerCli.Ping(context.Background(), client.PingOptions{})
		}
	})
	return dockerCli, dockerErr
}

// DockerAvailable reports whether a Docker engine answers, for callers that
// can do without containers (benchmarks) rather than fail.
func DockerAvailable() bool {
	_, err := dockerAPI()
	return err == nil
}

// dockerClient is dockerAPI for a test: a missing engine fails the test with
// the command that starts one.
func dockerClient(t testing.TB) *testcontainers.DockerClient {
	t.Helper()
	cli, err := dockerAPI()
	if err != nil {
		t.Fatalf("no Docker engine (run scripts/docker-up.sh): %v", err)
	}
	return cli
}

// imagePresent reports whether img exists locally; the harness never pulls,
// since no registry may be reachable.
func imagePresent(t testing.TB, img string) bool {
	t.Helper()
	_, err := dockerClient(t).ImageInspect(context.Background(), img)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatalf("inspect image %s: %v", img, err)
	}
	return err == nil
}

// mustPickImage chooses the image for one peer: the one named by envVar
// if set (the developer's explicit choice, used as is), else public if
// present locally, else local (built by scripts/build-images.sh) if
// present; it fails t when neither is. The choice is logged, because a
// fallback changes what a test proves.
func mustPickImage(t testing.TB, envVar, public, local string) string {
	t.Helper()
	switch {
	case os.Getenv(envVar) != "":
		t.Logf("%s=%s (from the environment)", envVar, os.Getenv(envVar))
		return os.Getenv(envVar)
	case imagePresent(t, public):
		t.Logf("%s: using %s", envVar, public)
		return public
	case local != "" && imagePresent(t, local):
		t.Logf("%s: %s is not present locally (no pull possible); using the local build %s", envVar, public, local)
		return local
	}
	t.Fatalf("%s: neither %s nor %s is present locally; run scripts/build-images.sh (or set %s)", envVar, public, local, envVar)
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Every
// container shares the host's network, so each listens on one of these
// instead of its usual fixed port.
func FreePort(t testing.TB) int {
	t.Helper()
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 1000 {
		port := freePortLow + mathrand.IntN(freePortHigh-freePortLow)
		if freePorts.given[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatalf("free port: none free in %d..%d after 1000 tries", freePortLow, freePortHigh)
	return 0
}

// FreePort draws from [freePortLow, freePortHigh), below Linux's default
// ephemeral range (32768-60999): a port handed out here is bound by its
// server some seconds later, and in that time the ephemeral range's ports
// go to the outgoing connections of every test running in parallel, which
// then hold the server's port ("Address already in use"). No port is
// handed out twice in one test process.
const (
	freePortLow  = 10000
	freePortHigh = 32768
)

var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// hostNetwork puts a container on the host's network: dockerd runs with
// --bridge=none here, so there is no other network to put it on.
func hostNetwork(hc *container.HostConfig) { hc.NetworkMode = "host" }

// startContainer starts req on the host network and registers its removal
// when the test ends. It does not wait for readiness: callers do, with a
// check that also works after a restart.
func startContainer(t testing.TB, req testcontainers.ContainerRequest) testcontainers.Container {
	t.Helper()
	req.HostConfigModifier = hostNetwork
	// testcontainers attaches every container to a default network, and
	// where dockerd has no "bridge" (--bridge=none) it creates a
	// "reaper_default" bridge for that. A host-network container must join
	// no other network: dockerd would program the bridge's address into the
	// host's own namespace and refuse to start it (route conflict).
	req.EndpointSettingsModifier = func(eps map[string]*network.EndpointSettings) { clear(eps) }
	c, err := testcontainers.GenericContainer(context.Background(), testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
	})
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatalf("start %s: %v", req.Image, err)
	}
	return c
}

// waitUntil calls ready until it returns nil, the container stops running,
// or timeout passes. The error carries the container's last log lines: a
// peer that did not come up usually says why there.
func waitUntil(ctx context.Context, c testcontainers.Container, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	for {
		if err = ready(ctx); err == nil {
			return nil
		}
		if st, serr := c.State(ctx); serr == nil && !st.Running {
			return fmt.Errorf("container exited (code %d) before it was ready: %w\n%s", st.ExitCode, err, tailLogs(c, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %w\n%s", timeout, err, tailLogs(c, 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// signalContainer sends signal to the main process of c.
func signalContainer(ctx context.Context, c testcontainers.Container, signal string) error {
	cli, err := dockerAPI()
	if err != nil {
		return err
	}
	_, err = cli.ContainerKill(ctx, c.GetContainerID(), client.ContainerKillOptions{Signal: signal})
	return err
}

// killContainer sends SIGKILL to c and returns once c is no longer running
// (the signal's delivery is not its death).
func killContainer(ctx context.Context, c testcontainers.Container) error {
	if err := signalContainer(ctx, c, "KILL"); err != nil {
		return err
	}
	for {
		if st, err := c.State(ctx); err == nil && !st.Running && !st.Restarting {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// dialCheck is a readiness check: addr accepts TCP connections.
func dialCheck(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		conn, err := d.DialContext(dctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}

// callJSON sends method u with body, if any, as JSON, and reads a 2xx
// answer into out, if any: as text into a *string, else as JSON.
func callJSON(ctx context.Context, method, u string, body, out any) error {
	rd := io.Reader(http.NoBody)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	if text, ok := out.(*string); ok {
		b, err := io.ReadAll(resp.Body)
		*text = string(b)
		return err
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, u, err)
		}
	}
	return nil
}

// containerOutput returns everything container id wrote to stdout and
// stderr, interleaved as written. It works on a stopped container too, so
// the lines a worker logs while shutting down are never lost.
func containerOutput(ctx context.Context, id string) ([]byte, error) {
	cli, err := dockerAPI()
	if err != nil {
		return nil, err
	}
	rc, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := stdcopy.StdCopy(&buf, &buf, rc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tailLogs returns the last n lines of c's output, for failure messages.
func tailLogs(c testcontainers.Container, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := containerOutput(ctx, c.GetContainerID())
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	return "last log lines:\n  " + strings.Join(lastLines(splitLines(out), n), "\n  ")
}

// splitLines splits output into lines, without a trailing empty one.
func splitLines(b []byte) []string {
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// Env merges environment maps for StartWorkerContainer and
// StartWorkerProcess; later maps win. Each peer's Env method gives the
// worker's variables for that peer:
//
//	w := StartWorkerProcess(t, Env(kafka.Env(topic), redis.Env(), smtp.Env(), sms.Env()))
func Env(envs ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, e := range envs {
		maps.Copy(out, e)
	}
	return out
}
