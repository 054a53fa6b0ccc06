package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/integration"
	"github.com/harborlight/notification-worker/integration/twiliodouble/double"
)

// What the worker benchmarks run as processes of their own: the worker
// binary (integration.WorkerBinary) and the kfake broker command
// (integration/kfakebroker), so a worker's memory and CPU are its own and
// not the broker's or the benchmark's. Only the Twilio double runs in this
// process.

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// binary builds the command in pkg (as `make build` does: static,
// trimmed) once per run, into a directory of this checkout's own: other
// checkouts on the machine build the same commands, and a run must measure
// its own code.
func binary(b *testing.B, pkg string) string {
	b.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	root := checkoutRoot(b)
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("notification-worker-bench-%x", sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin
}

// startWorker runs this checkout's worker binary as a process with env
// (see integration.StartWorkerProcess), killed when b ends.
func startWorker(b *testing.B, env map[string]string) *integration.Worker {
	b.Helper()
	return startWorkerBinary(b, binary(b, "cmd/notification-worker"), env)
}

// startWorkerBinary is startWorker for the worker binary bin (the
// baseline's, say).
func startWorkerBinary(b *testing.B, bin string, env map[string]string) *integration.Worker {
	b.Helper()
	b.Setenv("WORKER_BINARY", bin)
	return integration.StartWorkerProcess(b, env)
}

// sideBySide is what the rows that measure this checkout's worker binary
// beside the baseline revision's share: a kfake broker process holding
// their topic, a redis-server with a reader of its CPU time, and the two
// binaries.
type sideBySide struct {
	broker, topic string
	srv           *redistest.Server
	redisCPU      func() time.Duration
	base, current string // the binaries
}

// mustSideBySide starts the broker process holding topic, publishes a
// backlog of events records (the usual event, on keys shipments; none
// when events is 0), starts a redis-server, and builds the baseline's
// worker binary (recording its commit for the report) and this
// checkout's.
func mustSideBySide(b *testing.B, topic string, events, keys int) sideBySide {
	b.Helper()
	broker, _ := mustBrokerProcess(b, topic)
	if events > 0 {
		size := len(eventJSON(newUUID(), "SHP-000000"))
		publishBacklog(b, broker, topic, int64(events)*int64(size), size, keys)
	}
	srv := mustRedis(b)
	base, baseCommit := baseWorker(b)
	results.setCPUBase(baseCommit)
	return sideBySide{
		broker: broker, topic: topic,
		srv: srv, redisCPU: serverCPU(b, srv.MustClient(b, 0)),
		base: base, current: binary(b, "cmd/notification-worker"),
	}
}

// env is the environment of a worker binary reading the topic in a
// consumer group of its own, bench-<name>-<n>. With redisURL it uses the
// Redis store under key prefixes of their own, numbered keys (a run that
// must find another's records passes that run's number), with both
// channels on the console (asked for by name: beside Redis the worker
// assumes no console); without, the memory store.
func (s sideBySide) env(name, redisURL string, keys int64) map[string]string {
	env := map[string]string{
		"KAFKA_BROKERS":  s.broker,
		"KAFKA_TOPIC":    s.topic,
		"KAFKA_GROUP_ID": fmt.Sprintf("bench-%s-%d", name, groupSeq.Add(1)),
	}
	if redisURL != "" {
		// Keys in the layout that is used (compact, by default).
		env["REDIS_URL"] = redisURL
		env["IDEMPOTENCY_KEY_PREFIX"] = fmt.Sprintf("bench-%s-%d:", name, keys)
		env["IDEMPOTENCY_COMPACT_KEY_PREFIX"] = fmt.Sprintf("%c%d:", name[0], keys)
		env["SMS_NOTIFIER"], env["EMAIL_NOTIFIER"] = "console", "console"
	}
	return env
}

// mustBrokerProcess starts the kfake broker as a child process holding
// topic in partitions partitions, and returns its address and a stop
// function (SIGTERM, then SIGKILL), also called when b ends: a backlog of a
// GiB is the broker's memory, given back as soon as a case is done with it.
func mustBrokerProcess(b *testing.B, topic string) (addr string, stop func()) {
	b.Helper()
	port := integration.FreePort(b)
	cmd := exec.Command(binary(b, "integration/kfakebroker"), "-port", strconv.Itoa(port), "-partitions", strconv.Itoa(partitions), "-topics", topic)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start kfakebroker: %v", err)
	}
	done := make(chan struct{})
	listening := make(chan struct{})
	go func() {
		// Read stderr to its end before Wait, as exec requires.
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "kfake listening on") {
				said = true
				close(listening)
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	b.Cleanup(stop)
	select {
	case <-listening:
	case <-done:
		b.Fatalf("kfakebroker exited at start")
	case <-time.After(30 * time.Second):
		b.Fatalf("kfakebroker did not listen within 30s")
	}
	return "127.0.0.1:" + strconv.Itoa(port), stop
}

// paddedEvent is a valid one-SMS event (eventJSON) of about size bytes:
// its data carries a note of filler, which no template shows.
func paddedEvent(shipment string, size int) []byte {
	base := eventJSON(newUUID(), shipment)
	pad := size - len(base) - len(`,"note":""`)
	if pad <= 0 {
		return base
	}
	// Insert the note into data, before its closing brace and the event's.
	head := base[:len(base)-2]
	return fmt.Appendf(nil, `%s,"note":%q}}`, head, strings.Repeat("x", pad))
}

// publishBacklog writes about total bytes of events of recordSize bytes to
// topic, keys drawn round robin from keys shipments, in produce requests of
// about 1 MiB (so record batches stay at or under the 1 MiB a producer
// usually sends), and returns how many records it wrote.
func publishBacklog(b *testing.B, broker, topic string, total int64, recordSize, keys int) int {
	b.Helper()
	p, err := kafka.NewPublisher(kafka.Config{Brokers: []string{broker}})
	if err != nil {
		b.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	n := int(total / int64(recordSize))
	perRequest := max(partitions, (1<<20)/recordSize)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for from := 0; from < n; from += perRequest {
		msgs := make([]kafka.Message, 0, perRequest)
		for i := from; i < min(from+perRequest, n); i++ {
			shipment := fmt.Sprintf("SHP-%06d", i%keys)
			msgs = append(msgs, kafka.Message{Key: []byte(shipment), Value: paddedEvent(shipment, recordSize)})
		}
		if err := p.Publish(ctx, topic, msgs...); err != nil {
			b.Fatalf("Publish: %v", err)
		}
	}
	return n
}

// slowTwilio is the Twilio double, in this process, answering every send
// after delay. Its env points a worker at it.
type slowTwilio struct {
	d   *double.Double
	env map[string]string
}

func mustSlowTwilio(b *testing.B, delay time.Duration) *slowTwilio {
	b.Helper()
	const sid, token = "ACbench", "benchsecret"
	d := double.New(sid, token)
	if delay > 0 {
		d.Fail(double.Fault{Delay: double.Duration(delay)})
	}
	srv := httptest.NewServer(d)
	b.Cleanup(srv.Close)
	return &slowTwilio{d: d, env: map[string]string{
		"TWILIO_ACCOUNT_SID": sid,
		"TWILIO_AUTH_TOKEN":  token,
		"TWILIO_FROM_NUMBER": "+15550001111",
		"TWILIO_API_URL":     srv.URL,
	}}
}

// procStatus reads a field of /proc/<pid>/status in bytes ("VmHWM", "VmRSS").
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			fs := strings.Fields(v) // "123456 kB"
			if len(fs) != 2 || fs[1] != "kB" {
				return 0, fmt.Errorf("%s: %q", field, v)
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux this runs on.
const clockTicks = 100

// procCPU returns the user and system CPU time process pid used so far.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// after its closing parenthesis (utime and stime are fields 14 and 15).
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("/proc/pid/stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("/proc/pid/stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// sentSeries is the worker's count of SMS sent.
const sentSeries = `notification_worker_notifications_total{channel="sms",outcome="sent"}`

// heapGoalSeries is the heap size at which the Go runtime collects next:
// with GOGC=100, twice what the last collection left live.
const heapGoalSeries = "go_memstats_next_gc_bytes"

// metricValue reads one series from the worker's /metrics (0 when absent).
func metricValue(ctx context.Context, w *integration.Worker, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.HTTPAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, nil
}

// stopWorker stops w with SIGTERM (killing it after integration.StopGrace).
func stopWorker(b *testing.B, w *integration.Worker) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		b.Logf("stop worker: %v", err)
	}
}
