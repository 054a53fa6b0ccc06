package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/integration"
)

// The worker's memory under a backlog: a GiB of records waiting, a
// provider that takes 2 s a send, every setting at its default.
const (
	backlogBytes  = 1 << 30
	largeRecord   = 200 << 10
	smallRecord   = 1 << 10
	rssNotifier   = 2 * time.Second
	rssBound      = 192 << 20
	rssKeys       = 5000
	rssPlateau    = 5 * time.Second // VmHWM within rssStep this long: the peak is reached
	rssStep       = 1 << 20
	rssAtLeast    = 10 * time.Second // of reading the backlog before a plateau counts
	rssTimeBound  = 45 * time.Second // whatever happens, the run stops here
	rssIdleSample = 3 * time.Second
)

// rssRun is one worker's memory measurement.
type rssRun struct {
	recordSize int   // 0: idle, no backlog
	records    int   // published before the worker started
	peak       int64 // VmHWM when the run stopped
	heapGoal   int64 // the largest heap goal seen: twice the live heap (GOGC=100)
	// anon is the largest RssAnon sampled: the resident memory the Go
	// runtime mapped, without the binary's file-backed pages, which the
	// kernel can drop and read again.
	anon int64
	// limited says GOMEMLIMIT was set: the heap goal is then capped by
	// it, and half of it is no longer the live heap.
	limited bool
	sent    int // sends the provider double saw during the run
	// pacedRetries is the worker's count of records retried to wait for
	// their sender's pace when the run stopped.
	pacedRetries float64
	elapsed      time.Duration
	plateau      bool // stopped on a plateau, not on the time bound
}

// Names of the worker process measurements.
const (
	runRSSIdle  = "rss/idle"
	runRSSLarge = "rss/200KiB"
	runRSSSmall = "rss/1KiB"
	// runRSSLimited is the 200 KiB backlog with the soft limit the worker
	// sets in a pod whose memory limit is podLimit.
	runRSSLimited = "rss/200KiB/limited"
	podLimit      = 128 << 20
	podSoftLimit  = podLimit / 10 * 9 // memlimit.DefaultRatio of it
	// runRSSPaced is the 200 KiB backlog with SMS_RATE_LIMIT at rssPace a
	// second, far below the 32 a second the slots allow: the records
	// fetched wait for their sender's turn, retried as paced.
	runRSSPaced = "rss/200KiB/paced"
	rssPace     = 2
)

// pacedRetriesSeries is the worker's count of records retried to wait for
// their sender's pace.
const pacedRetriesSeries = `notification_worker_retries_total{kind="paced",topic="shipment-events"}`

// BenchmarkWorkerPeakRSS runs the worker binary, with default settings and
// the Redis store, against a kfake broker process holding a GiB backlog in
// 8 partitions, with a Twilio double that answers each send after 2 s, and
// reads the worker's peak RSS (VmHWM). The run stops once the peak has not
// grown by 1 MiB for 5 s (after at least 10 s), or after 45 s: the point is the
// peak while the backlog is read, not draining it at 32 sends a second.
// The baseline is the same worker idle, on an empty topic. A last run
// repeats the 200 KiB backlog with GOMEMLIMIT at 90% of 128 MiB, what the
// worker sets itself in a pod of that limit: the smallest pod the live
// heap fits in with room to spare. Another repeats it with SMS_RATE_LIMIT
// at 2 a second: the records fetched then wait for their sender's turn
// rather than for the provider, and must stay within the same bound.
func BenchmarkWorkerPeakRSS(b *testing.B) {
	needRedis(b)
	srv := mustRedis(b)
	tw := mustSlowTwilio(b, rssNotifier)
	for range b.N {
		results.putRSS(runRSSIdle, measureRSS(b, srv.URL(), tw, 0))
		results.putRSS(runRSSLarge, measureRSS(b, srv.URL(), tw, largeRecord))
		results.putRSS(runRSSSmall, measureRSS(b, srv.URL(), tw, smallRecord))
		// As the worker would set it in a pod limited to podLimit.
		results.putRSS(runRSSLimited, measureRSS(b, srv.URL(), tw, largeRecord, "GOMEMLIMIT", strconv.Itoa(podSoftLimit)))
		paced := measureRSS(b, srv.URL(), tw, largeRecord, "SMS_RATE_LIMIT", strconv.Itoa(rssPace))
		if paced.pacedRetries == 0 {
			b.Fatalf("SMS_RATE_LIMIT=%d: no record was retried as paced in %s (%d sends): the run did not measure a paced backlog", rssPace, paced.elapsed, paced.sent)
		}
		results.putRSS(runRSSPaced, paced)
	}
	if r, ok := results.getRSS(runRSSLarge); ok {
		b.ReportMetric(float64(r.peak)/(1<<20), "peak-RSS-MiB-200KiB")
	}
}

// measureRSS runs one worker against a fresh broker holding a GiB backlog
// of recordSize records (none when 0), with the environment pairs in
// extra on top of the defaults.
func measureRSS(b *testing.B, redisURL string, tw *slowTwilio, recordSize int, extra ...string) rssRun {
	b.Helper()
	topic := "shipment-events"
	broker, stopBroker := mustBrokerProcess(b, topic)
	defer stopBroker()
	r := rssRun{recordSize: recordSize}
	if recordSize > 0 {
		r.records = publishBacklog(b, broker, topic, backlogBytes, recordSize, rssKeys)
	}
	env := map[string]string{
		"KAFKA_BROKERS":          broker,
		"KAFKA_TOPIC":            topic,
		"REDIS_URL":              redisURL,
		"IDEMPOTENCY_KEY_PREFIX": fmt.Sprintf("bench-rss-%d:", prefixSeq.Add(1)),
		// Asked for by name: beside Redis the worker assumes no console.
		"EMAIL_NOTIFIER": "console",
	}
	for k, v := range tw.env {
		env[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
		r.limited = r.limited || extra[i] == "GOMEMLIMIT"
	}
	sentBefore := len(tw.d.Attempts())
	w := startWorker(b, env)
	defer stopWorker(b, w)
	if err := w.WaitReady(30 * time.Second); err != nil {
		b.Fatalf("worker not ready: %v", err)
	}
	start := time.Now()
	// A plateau is VmHWM within rssStep of where it stood rssPlateau ago:
	// the heap creeps by a page now and then long after the peak.
	var peak, level int64
	grewAt := start
	for {
		hwm, err := procStatus(w.PID(), "VmHWM")
		if err != nil {
			b.Fatalf("worker exited while measured: %v", err)
		}
		if anon, err := procStatus(w.PID(), "RssAnon"); err == nil {
			r.anon = max(r.anon, anon)
		}
		if goal, err := metricValue(context.Background(), w, heapGoalSeries); err == nil {
			r.heapGoal = max(r.heapGoal, int64(goal))
		}
		now := time.Now()
		peak = max(peak, hwm)
		if hwm > level+rssStep {
			level, grewAt = hwm, now
		}
		if recordSize == 0 && now.Sub(start) >= rssIdleSample {
			r.plateau = true
			break
		}
		if recordSize > 0 && now.Sub(start) >= rssAtLeast && now.Sub(grewAt) >= rssPlateau {
			r.plateau = true
			break
		}
		if now.Sub(start) >= rssTimeBound {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.peak, r.elapsed = peak, time.Since(start)
	r.pacedRetries, _ = metricValue(context.Background(), w, pacedRetriesSeries)
	r.sent = len(tw.d.Attempts()) - sentBefore
	if recordSize > 0 && r.sent == 0 {
		b.Fatalf("no send reached the Twilio double in %s: the worker did not handle the backlog\n%v", r.elapsed, lastLines(w.Logs(), 20))
	}
	return r
}

// littleLatency and littleInFlight: Little's law puts the most a worker
// can do at MaxInFlight / latency.
const (
	littleInFlight = 1024
	littleLatency  = 250 * time.Millisecond
	littleRounds   = 3
	runLittle      = "throughput/MaxInFlight=1024"
)

// littleLimit is Little's-law limit in records a second.
func littleLimit() float64 { return float64(littleInFlight) / littleLatency.Seconds() }

// BenchmarkThroughputLittlesLaw measures the worker (the real consumer and
// domain, in this process) with MaxInFlight 1024, a notifier that takes
// 250 ms a send, the Redis store, and 5000 distinct shipments: it cannot do
// more than 1024 / 0.25 s = 4096 records a second, and should come close.
func BenchmarkThroughputLittlesLaw(b *testing.B) {
	needRedis(b)
	const events, keys = 24 * littleInFlight, 5000 // 24 sends per slot: 6 s at the limit
	br := mustBroker(b, events, keys)
	srv := mustRedis(b)
	for range b.N {
		bestOf(b, littleRounds, []variant{{runLittle, func(b *testing.B) measurement {
			return run{
				maxInFlight: littleInFlight,
				store:       mustRedisStore(b, srv),
				latency:     littleLatency,
				want:        events,
				within:      time.Minute,
			}.measure(b, br)
		}}})
	}
}

// cpuRun is the worker process's CPU time over the records it sent.
type cpuRun struct {
	records   int
	cpu       time.Duration // the worker's user and system time
	serverCPU time.Duration // redis-server's, for the Redis store
	elapsed   time.Duration
}

func (c cpuRun) perRecord() time.Duration {
	if c.records == 0 {
		return 0
	}
	return c.cpu / time.Duration(c.records)
}

func (c cpuRun) serverPerRecord() time.Duration {
	if c.records == 0 {
		return 0
	}
	return c.serverCPU / time.Duration(c.records)
}

// Names of the CPU measurements: this checkout's worker, and the
// baseline revision's (baseWorker) measured beside it.
const (
	runCPUMemory     = "cpu/memory"
	runCPURedis      = "cpu/redis"
	runCPUMemoryBase = "cpu/memory/base"
	runCPURedisBase  = "cpu/redis/base"
)

// cpuRounds is how many times each of the four CPU runs is repeated,
// interleaved; the least CPU per record of each is kept, as other work on
// the machine only ever adds to it.
const cpuRounds = 2

// BenchmarkWorkerCPUPerRecord runs the worker binary (default settings,
// console notifier: a send that takes no time) against a kfake broker
// process, with the memory store and then the Redis store, and reads the
// CPU time the worker process spent per record sent, from the first record
// to the last (its /proc stat, so neither the broker's nor this process's).
// The baseline revision's worker (BENCH_BASE) runs the same, interleaved
// with this checkout's, on the same topic, each with a group of its own.
func BenchmarkWorkerCPUPerRecord(b *testing.B) {
	needRedis(b)
	const events, keys = 20000, 5000
	sbs := mustSideBySide(b, "shipment-events", events, keys)
	measure := func(bin, name, redisURL string) cpuRun {
		// Keys of their own: every run sends every record.
		env := sbs.env("cpu", redisURL, prefixSeq.Add(1))
		profile := profiler(b, env, name)
		w := startWorkerBinary(b, bin, env)
		defer stopWorker(b, w)
		return measureCPU(b, w, events, sbs.redisCPU, profile)
	}
	runs := []struct {
		name, bin, redis string
	}{
		{runCPUMemoryBase, sbs.base, ""},
		{runCPUMemory, sbs.current, ""},
		{runCPURedisBase, sbs.base, sbs.srv.URL()},
		{runCPURedis, sbs.current, sbs.srv.URL()},
	}
	for range b.N {
		best := map[string]cpuRun{}
		for range cpuRounds {
			for _, r := range runs {
				m := measure(r.bin, r.name, r.redis)
				if old, ok := best[r.name]; !ok || m.perRecord() < old.perRecord() {
					best[r.name] = m
				}
			}
		}
		for name, m := range best {
			results.putCPU(name, m)
		}
	}
}

// measureCPU polls w's sent count until it reaches want and returns the
// worker's CPU time (and redis-server's) from its first send to then.
// profile, when not nil, is called once at the first send (see profiler).
func measureCPU(b *testing.B, w *integration.Worker, want int, serverCPU func() time.Duration, profile func()) cpuRun {
	b.Helper()
	return measureCPUOf(b, w, []string{sentSeries}, want, 2*time.Minute, serverCPU, profile)
}

// measureCPUOf is measureCPU counting the sum of series (counters of the
// worker's /metrics) instead of the sends, within limit.
func measureCPUOf(b *testing.B, w *integration.Worker, series []string, want int, limit time.Duration, serverCPU func() time.Duration, profile func()) cpuRun {
	b.Helper()
	sentCount := func(ctx context.Context, w *integration.Worker) (int, error) {
		total := 0.0
		for _, s := range series {
			v, err := metricValue(ctx, w, s)
			if err != nil {
				return int(total), err
			}
			total += v
		}
		return int(total), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var (
		from, cpu0, srv0 = 0, time.Duration(0), time.Duration(0)
		started          time.Time
	)
	for {
		n, err := sentCount(ctx, w)
		if err != nil && ctx.Err() != nil {
			b.Fatalf("worker counted %d of %d %s in %v\n%v", n, want, series, limit, lastLines(w.Logs(), 20))
		}
		if err == nil && n > 0 && started.IsZero() {
			if cpu0, err = procCPU(w.PID()); err != nil {
				b.Fatalf("worker exited: %v", err)
			}
			srv0, from, started = serverCPU(), n, time.Now()
			if profile != nil {
				profile()
			}
		}
		if err == nil && n >= want {
			cpu1, err := procCPU(w.PID())
			if err != nil {
				b.Fatalf("worker exited: %v", err)
			}
			return cpuRun{records: n - from, cpu: cpu1 - cpu0, serverCPU: serverCPU() - srv0, elapsed: time.Since(started)}
		}
		select {
		case <-ctx.Done():
			b.Fatalf("worker counted %d of %d %s in %v\n%v", n, want, series, limit, lastLines(w.Logs(), 20))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lastLines returns the last n of lines.
func lastLines(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}

// budgetOfDefaults is MAX_BUFFERED_BYTES at its default, which the memory
// rows are read against.
const budgetOfDefaults = kafka.DefaultMaxBufferedBytes

// profiler returns nil unless BENCH_PROFILE_DIR names a directory: then it
// gives the worker a debug listener (DEBUG_ADDR in env) and returns a
// function that, called at the first send, takes a CPU profile of
// BENCH_PROFILE_SECONDS (default 3) in the background into
// <dir>/<name>.pprof, for `go tool pprof <binary> <file>`. Profiling costs
// the worker a little CPU: the figures of a profiled run are not the ones
// to report.
func profiler(b *testing.B, env map[string]string, name string) func() {
	b.Helper()
	dir := os.Getenv("BENCH_PROFILE_DIR")
	if dir == "" {
		return nil
	}
	secs := os.Getenv("BENCH_PROFILE_SECONDS")
	if secs == "" {
		secs = "3"
	}
	addr := fmt.Sprintf("127.0.0.1:%d", integration.FreePort(b))
	env["DEBUG_ADDR"] = addr
	file := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".pprof")
	var wg sync.WaitGroup
	b.Cleanup(wg.Wait)
	return func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=" + secs)
			if err != nil {
				b.Logf("profile %s: %v", name, err)
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil {
				err = os.WriteFile(file, body, 0o644)
			}
			if err != nil {
				b.Logf("profile %s: %v", name, err)
			}
		}()
	}
}
