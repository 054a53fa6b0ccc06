package bench

import (
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
)

// TestMain prints the table once every benchmark of the run has finished,
// so each ratio is taken against a baseline measured in this same process.
// A run without -bench records nothing and prints nothing.
func TestMain(m *testing.M) {
	results.loadBefore = loadAverage()
	code := m.Run()
	results.print(os.Stdout)
	os.Exit(code)
}

// loadAverage returns the 1, 5 and 15 minute load averages: the machine is
// shared, and the reader of the table should know how busy it was.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// results collects what the benchmarks measured, by name, for the table.
var results = &registry{runs: map[string]measurement{}, rss: map[string]rssRun{}, cpu: map[string]cpuRun{}, startup: map[string]time.Duration{}, rates: map[string]rateRun{}, brownouts: map[string]brownoutRun{}}

type registry struct {
	mu   sync.Mutex
	runs map[string]measurement
	keys []keyMemory
	rss  map[string]rssRun
	cpu  map[string]cpuRun
	// startup is each worker's time from its start to /readyz 200.
	startup map[string]time.Duration
	// rates are the SMS backlog runs at the provider's pace.
	rates map[string]rateRun
	// brownouts are the backlogs drained through a Twilio brownout.
	brownouts map[string]brownoutRun
	// cpuBase is the baseline's commit of the cpu/*/base runs.
	cpuBase string
	// loadBefore is the load average when the run started.
	loadBefore string
}

func (r *registry) put(name string, m measurement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[name] = m
}

func (r *registry) get(name string) (measurement, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.runs[name]
	return m, ok
}

func (r *registry) putRSS(name string, m rssRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rss[name] = m
}

func (r *registry) getRSS(name string) (rssRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.rss[name]
	return m, ok
}

func (r *registry) putCPU(name string, m cpuRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cpu[name] = m
}

func (r *registry) getCPU(name string) (cpuRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.cpu[name]
	return m, ok
}

func (r *registry) putRate(name string, m rateRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rates[name] = m
}

func (r *registry) getRate(name string) (rateRun, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.rates[name]
	return m, ok
}

func (r *registry) setKeys(k keyMemory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, k)
}

// Names of the measurements, shared by the benchmarks and the table.
const (
	runSequential  = "concurrency/MaxInFlight=1"
	runConcurrent  = "concurrency/MaxInFlight=64"
	runNoStore     = "store/none"
	runMemoryStore = "store/memory"
	runRedisStore  = "store/redis"
	// runRedisOneFormat is the Redis store with IDEMPOTENCY_READ_BOTH_FORMATS=false.
	runRedisOneFormat = "store/redis_one_format"
	runTwilioFresh    = "twilio/client-per-send"
	runTwilioPool     = "twilio/pooled"
	runTracingOff     = "tracing/off"
	runTracingNoop    = "tracing/noop-provider"
	runTracingOn      = "tracing/on"
	// The consumer on each broker.
	runBrokerKfake  = "broker/kfake"
	runBrokerApache = "broker/apache-kafka"
)

// outageRun names an outage measurement.
func outageRun(outage string) string { return "outage/" + outage + "/breaker" }

func (r *registry) print(w io.Writer) {
	r.mu.Lock()
	empty := len(r.runs) == 0 && len(r.keys) == 0 && len(r.rss) == 0 && len(r.cpu) == 0 && len(r.startup) == 0 && len(r.rates) == 0 && len(r.brownouts) == 0
	r.mu.Unlock()
	if empty {
		return
	}
	host, _ := os.Hostname()
	fmt.Fprintf(w, "\n## notification-worker capacity, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, %s; load average %s at the start, %s at the end.\n",
		host, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version(), r.loadBefore, loadAverage())
	fmt.Fprintln(w, "Every ratio is against a baseline measured in this run. Each rate is the fastest of the interleaved rounds listed beside it;")
	fmt.Fprintln(w, "a rate runs from the first record reaching the handler to the last measured record finishing.")
	r.printConcurrency(w)
	r.printStores(w)
	r.printReplicas(w)
	r.printOutage(w)
	r.printKeys(w)
	r.printTwilio(w)
	r.printTracing(w)
	r.printBrokers(w)
	r.printRSS(w)
	r.printLittle(w)
	r.printCPU(w)
	r.printCoTenant(w)
	r.printReplay(w)
	r.printStartup(w)
	r.printRateLimit(w)
	r.printBrownout(w)
	fmt.Fprintln(w)
}

func (r *registry) printBrokers(w io.Writer) {
	kf, okKf := r.get(runBrokerKfake)
	ak, okAk := r.get(runBrokerApache)
	if !okKf && !okAk {
		return
	}
	fmt.Fprintf(w, "\n### 7. The consumer on each broker (MaxInFlight 64, memory store, zero-latency notifier, %d partitions)\n\n", partitions)
	fmt.Fprintln(w, "kfake runs in this process (its CPU counts in worker CPU/record); Apache Kafka in its container, on the same 2 CPUs.")
	fmt.Fprintln(w, "Join is the time from starting the consumer to its first record (group join, first fetch), in the fastest round.")
	fmt.Fprintln(w)
	header(w, "broker", "records", "records/s", "rounds (records/s)", "ratio vs kfake", "worker CPU/record", "join")
	if okKf {
		row(w, "kfake (embedded, franz-go)", fmt.Sprint(kf.records), rate(kf), roundRates(kf), "1.00x (baseline)", us(kf.cpuPerRecord()), ms(kf.join))
	}
	if okAk {
		row(w, "Apache Kafka "+integration.KafkaVersion+" (KRaft, 1 node)", fmt.Sprint(ak.records), rate(ak), roundRates(ak), ratio(ak, kf, okKf), us(ak.cpuPerRecord()), ms(ak.join))
	} else {
		row(w, "Apache Kafka "+integration.KafkaVersion, "n/a", "not run: see the benchmark's log", "", "", "", "")
	}
}

func mibs(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func (r *registry) printRSS(w io.Writer) {
	idle, okIdle := r.getRSS(runRSSIdle)
	large, okLarge := r.getRSS(runRSSLarge)
	small, okSmall := r.getRSS(runRSSSmall)
	limited, okLimited := r.getRSS(runRSSLimited)
	paced, okPaced := r.getRSS(runRSSPaced)
	if !okIdle && !okLarge && !okSmall && !okLimited && !okPaced {
		return
	}
	fmt.Fprintf(w, "\n### 8. Worker memory under a backlog (worker binary, default settings: MAX_BUFFERED_BYTES %s, MAX_IN_FLIGHT 64; Redis store; Twilio double answering after %v; kfake broker in its own process)\n\n",
		mibs(budgetOfDefaults), rssNotifier)
	fmt.Fprintf(w, "Peak RSS is the worker process's VmHWM. A run stops once it has not grown by %s for %v (after at least %v), or at %v.\n", mibs(rssStep), rssPlateau, rssAtLeast, rssTimeBound)
	fmt.Fprintln(w, "The baseline is the same worker idle on an empty topic; growth over it is read against the byte budget. Live heap is half the")
	fmt.Fprintln(w, "largest heap goal the worker reported (go_memstats_next_gc_bytes, sampled with VmHWM): what a collection left, at GOGC=100.")
	fmt.Fprintln(w, "Anonymous RSS is the largest RssAnon sampled: RSS without the binary's file-backed pages, which the kernel can drop.")
	fmt.Fprintln(w, "Under GOMEMLIMIT the heap goal is capped, so the live heap is not shown; its target is on the anonymous RSS.")
	fmt.Fprintln(w)
	header(w, "backlog", "records", "seconds", "sends during the run", "stopped on", "peak RSS", "peak anonymous RSS", "live heap", "growth over idle", "growth / MAX_BUFFERED_BYTES", "target")
	stopped := func(m rssRun) string {
		if m.plateau {
			return "plateau"
		}
		return "time bound"
	}
	if okIdle {
		row(w, "none (idle)", "0", fmt.Sprintf("%.1f", idle.elapsed.Seconds()), "0", stopped(idle), mibs(idle.peak), mibs(idle.anon), mibs(idle.heapGoal/2), "baseline", "", "")
	}
	for _, c := range []struct {
		label string
		m     rssRun
		ok    bool
		bound int64
	}{
		{"1 GiB of 200 KiB records, 8 partitions", large, okLarge, rssBound},
		{"1 GiB of 1 KiB records, 8 partitions", small, okSmall, rssBound},
		{fmt.Sprintf("1 GiB of 200 KiB records, GOMEMLIMIT %s (as in a pod limited to %s)", mibs(podSoftLimit), mibs(podLimit)), limited, okLimited, podLimit},
		{fmt.Sprintf("1 GiB of 200 KiB records, SMS_RATE_LIMIT %d/s: records wait for their sender's turn (%.0f paced retries)", rssPace, paced.pacedRetries), paced, okPaced, rssBound},
	} {
		if !c.ok {
			continue
		}
		growth, ratio := "n/a (baseline not run)", "n/a"
		if okIdle {
			growth = mibs(c.m.peak - idle.peak)
			ratio = fmt.Sprintf("%.2fx", float64(c.m.peak-idle.peak)/float64(budgetOfDefaults))
		}
		measured, what, live := c.m.peak, "RSS", mibs(c.m.heapGoal/2)
		if c.m.limited {
			measured, what, live = c.m.anon, "anonymous RSS", "(goal capped)"
		}
		target := fmt.Sprintf("%s < %s: met", what, mibs(c.bound))
		if measured >= c.bound {
			target = fmt.Sprintf("%s < %s: MISSED", what, mibs(c.bound))
		}
		row(w, c.label, fmt.Sprint(c.m.records), fmt.Sprintf("%.1f", c.m.elapsed.Seconds()), fmt.Sprint(c.m.sent), stopped(c.m), mibs(c.m.peak), mibs(c.m.anon), live, growth, ratio, target)
	}
}

func (r *registry) printLittle(w io.Writer) {
	m, ok := r.get(runLittle)
	if !ok {
		return
	}
	fmt.Fprintf(w, "\n### 9. Throughput against Little's law (MaxInFlight %d, notifier latency %v, Redis store, 5000 shipments, %d partitions)\n\n", littleInFlight, littleLatency, partitions)
	fmt.Fprintln(w, "CPU is this process's per record (the consumer, the in-process broker, the domain), and what it takes at the limit. A slot is")
	fmt.Fprintln(w, "held for the send and the store calls around it (Claim and Record, wall time per record): the limit assumes those take nothing.")
	fmt.Fprintln(w)
	header(w, "records", "seconds", "records/s", "rounds (records/s)", "CPU/record", "CPUs needed at the limit", "store time p50", "store time p99", "Little's-law limit", "ratio", "target")
	ratio := m.perSecond() / littleLimit()
	target := ">= 0.95: met"
	if ratio < 0.95 {
		target = ">= 0.95: MISSED"
	}
	row(w, fmt.Sprint(m.records), fmt.Sprintf("%.2f", m.elapsed.Seconds()), rate(m), roundRates(m), us(m.cpuPerRecord()),
		fmt.Sprintf("%.2f", m.cpuPerRecord().Seconds()*littleLimit()), ms(m.percentile(50)), ms(m.percentile(99)),
		fmt.Sprintf("%.0f/s", littleLimit()), fmt.Sprintf("%.3f", ratio), target)
}

// cpuTarget is the most worker CPU per record with Redis this checkout
// may spend, as a share of the baseline revision's in the same run: a
// change may make the worker clearer at a small cost, not at a large one.
const cpuTarget = 1.1

func (r *registry) setCPUBase(commit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cpuBase = commit
}

func (r *registry) printCPU(w io.Writer) {
	_, okMem := r.getCPU(runCPUMemory)
	_, okRed := r.getCPU(runCPURedis)
	if !okMem && !okRed {
		return
	}
	r.mu.Lock()
	baseCommit := r.cpuBase
	r.mu.Unlock()
	fmt.Fprintln(w, "\n### 10. CPU per record of the worker process (worker binary, default settings, console notifier: a send takes no time; kfake broker in its own process)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "From the first record sent to the last, the worker's user and system time (/proc/<pid>/stat) over the records sent; redis-server's from INFO cpu. "+
		"The baseline is the worker of %s (BENCH_BASE, default HEAD~1), built in this run and measured interleaved with this checkout's, %d rounds each, the least CPU per record kept.\n", baseCommit, cpuRounds)
	fmt.Fprintln(w)
	header(w, "store", "worker", "records", "seconds", "worker CPU/record", "redis-server CPU/record", "vs memory", "vs baseline", "target")
	for _, v := range []struct {
		store, base, cur string
		target           bool
	}{{"memory", runCPUMemoryBase, runCPUMemory, false}, {"redis", runCPURedisBase, runCPURedis, true}} {
		for _, who := range []string{v.base, v.cur} {
			m, ok := r.getCPU(who)
			if !ok {
				continue
			}
			// Each worker's Redis run is read against its own memory run.
			name, vsBase, target, memOf := "this checkout", "", "reported", runCPUMemory
			if who == v.base {
				name, vsBase, memOf = "baseline "+baseCommit, "1.00x (baseline)", runCPUMemoryBase
			} else if b, ok := r.getCPU(v.base); ok && b.perRecord() > 0 {
				x := float64(m.perRecord()) / float64(b.perRecord())
				vsBase = fmt.Sprintf("%.2fx", x)
				if v.target {
					target = fmt.Sprintf("<= %gx: met", cpuTarget)
					if x > cpuTarget {
						target = fmt.Sprintf("<= %gx: MISSED", cpuTarget)
					}
				}
			}
			vsMem, server := "1.00x", ""
			if v.store == "redis" {
				vsMem, server = "n/a", us(m.serverPerRecord())
				if mm, ok := r.getCPU(memOf); ok && mm.perRecord() > 0 {
					vsMem = fmt.Sprintf("%.2fx", float64(m.perRecord())/float64(mm.perRecord()))
				}
			}
			row(w, v.store, name, fmt.Sprint(m.records), fmt.Sprintf("%.2f", m.elapsed.Seconds()), us(m.perRecord()), server, vsMem, vsBase, target)
		}
	}
}

// ratio formats got/base, or n/a when the baseline did not run.
func ratio(got, base measurement, ok bool) string {
	if !ok || base.perSecond() == 0 {
		return "n/a (baseline not run)"
	}
	return fmt.Sprintf("%.2fx", got.perSecond()/base.perSecond())
}

// verdict says whether got/base meets target.
func verdict(got, base measurement, ok bool, target float64) string {
	if !ok || base.perSecond() == 0 {
		return "n/a"
	}
	if got.perSecond()/base.perSecond() >= target {
		return fmt.Sprintf(">= %gx: met", target)
	}
	return fmt.Sprintf(">= %gx: MISSED", target)
}

func row(w io.Writer, cells ...string) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
}

func header(w io.Writer, cells ...string) {
	row(w, cells...)
	seps := make([]string, len(cells))
	for i := range seps {
		seps[i] = "---"
	}
	row(w, seps...)
}

func rate(m measurement) string {
	s := fmt.Sprintf("%.0f", m.perSecond())
	if m.timedOut {
		s += " (time bound hit)"
	}
	return s
}

// roundRates lists every round's rate, slash-separated.
func roundRates(m measurement) string {
	if len(m.rounds) == 0 {
		return "1 round"
	}
	parts := make([]string, len(m.rounds))
	for i, r := range m.rounds {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, " / ")
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond)) }

func (r *registry) printConcurrency(w io.Writer) {
	seq, okSeq := r.get(runSequential)
	con, okCon := r.get(runConcurrent)
	if !okSeq && !okCon {
		return
	}
	fmt.Fprintf(w, "\n### 1. Key-ordered concurrency (notifier latency %v, %d partitions, memory store)\n\n", concurrencyLatency, partitions)
	header(w, "consumer", "records measured", "seconds", "records/s", "rounds (records/s)", "ratio vs MaxInFlight 1", "target")
	if okSeq {
		row(w, "MaxInFlight 1", fmt.Sprint(seq.records), fmt.Sprintf("%.2f", seq.elapsed.Seconds()), rate(seq), roundRates(seq), "1.00x (baseline)", "")
	}
	if okCon {
		row(w, "MaxInFlight 64", fmt.Sprint(con.records), fmt.Sprintf("%.2f", con.elapsed.Seconds()), rate(con), roundRates(con), ratio(con, seq, okSeq), verdict(con, seq, okSeq, 20))
	}
}

func (r *registry) printStores(w io.Writer) {
	none, okNone := r.get(runNoStore)
	mem, okMem := r.get(runMemoryStore)
	red, okRed := r.get(runRedisStore)
	one, okOne := r.get(runRedisOneFormat)
	if !okNone && !okMem && !okRed {
		return
	}
	fmt.Fprintf(w, "\n### 2. Idempotency store cost (zero-latency notifier, MaxInFlight 64, %d partitions)\n\n", partitions)
	fmt.Fprintln(w, "Store time is, per record, the wall time spent in Claim and Record together. Under load it includes waiting for one")
	fmt.Fprintln(w, "of the 2 CPUs (64 handlers, the broker and redis-server share them); the last columns time the same two calls from")
	fmt.Fprintln(w, "one caller at a time (2000 fresh keys), the store's own round trip. Worker CPU is this process's (the consumer, the")
	fmt.Fprintln(w, "in-process broker, the domain); redis-server's is read from INFO cpu. Both are barely moved by other work on the machine.")
	fmt.Fprintln(w, "\"redis\" is the store as deployed: compact keys, and a GET of the readable key with every claim (IDEMPOTENCY_READ_BOTH_FORMATS);")
	fmt.Fprintln(w, "\"redis, one format\" leaves that GET out.")
	fmt.Fprintln(w)
	header(w, "store", "records", "records/s", "rounds (records/s)", "ratio vs memory", "worker CPU/record", "redis-server CPU/record", "store time p50", "store time p99", "one caller: p50", "one caller: p99", "target")
	for _, c := range []struct {
		name   string
		m      measurement
		ok     bool
		target string
	}{
		{"none", none, okNone, ""},
		{"memory", mem, okMem, "baseline"},
		{"redis", red, okRed, verdict(red, mem, okMem, 0.5)},
		{"redis, one format", one, okOne, verdict(one, mem, okMem, 0.5)},
	} {
		if !c.ok {
			continue
		}
		s50, s99 := "", ""
		if one, ok := r.get(storeName(c.name) + serial); ok {
			s50, s99 = ms(one.percentile(50)), ms(one.percentile(99))
		}
		row(w, c.name, fmt.Sprint(c.m.records), rate(c.m), roundRates(c.m), ratio(c.m, mem, okMem), us(c.m.cpuPerRecord()), us(c.m.serverCPUPerRecord()), ms(c.m.percentile(50)), ms(c.m.percentile(99)), s50, s99, c.target)
	}
	if okRed && okMem {
		fmt.Fprintf(w, "\nRedis adds, per record, over the memory store: under load %s at p50 and %s at p99; one caller at a time",
			overhead(red.percentile(50), mem.percentile(50)), overhead(red.percentile(99), mem.percentile(99)))
		oneRed, ok1 := r.get(runRedisStore + serial)
		oneMem, ok2 := r.get(runMemoryStore + serial)
		if ok1 && ok2 {
			fmt.Fprintf(w, " %s at p50 and %s at p99", overhead(oneRed.percentile(50), oneMem.percentile(50)), overhead(oneRed.percentile(99), oneMem.percentile(99)))
		}
		fmt.Fprintln(w, ".")
	}
}

// overhead is what the Redis store adds to the memory store's percentile.
// Under load a percentile includes waiting for a CPU, which the faster
// memory store's run can do more of: a negative difference says nothing
// about Redis, so it is not printed as one.
func overhead(redis, memory time.Duration) string {
	if redis < memory {
		return "nothing measurable (the memory store's run waited longer for a CPU)"
	}
	return ms(redis - memory)
}

// storeName maps a row label of the store table to its measurement name.
func storeName(label string) string {
	return "store/" + strings.NewReplacer(", ", "_", " ", "_").Replace(label)
}

func (r *registry) printOutage(w io.Writer) {
	type cell struct {
		label, name string
	}
	cells := []cell{
		{"Redis up", outageRun("up")},
		{"Redis killed", outageRun("killed")},
		{"Redis unresponsive (SIGSTOP)", outageRun("unresponsive")},
	}
	measured := false
	for _, c := range cells {
		if _, ok := r.get(c.name); ok {
			measured = true
		}
	}
	if !measured {
		return
	}
	fmt.Fprintf(w, "\n### 3. Redis outage, fail open (IDEMPOTENCY_TIMEOUT 200ms; breaker: %d failures, %v cooldown, probe Store.Ping; zero-latency notifier, MaxInFlight %d)\n\n",
		outageBreakerFailures, outageBreakerCooldown, outageMaxInFlight)
	header(w, "condition", "records", "seconds", "records/s", "rounds (records/s)", "ratio vs Redis up (same wiring)", "store time p50", "store time p99", "target")
	for _, c := range cells {
		m, ok := r.get(c.name)
		if !ok {
			continue
		}
		up, okUp := r.get(outageRun("up"))
		rt, target := ratio(m, up, okUp), ""
		if strings.HasPrefix(c.name, "outage/up/") {
			rt = "1.00x (baseline)"
		} else {
			target = verdict(m, up, okUp, 0.5)
		}
		row(w, c.label, fmt.Sprint(m.records), fmt.Sprintf("%.2f", m.elapsed.Seconds()), rate(m), roundRates(m), rt, ms(m.percentile(50)), ms(m.percentile(99)), target)
	}
}

func (r *registry) printKeys(w io.Writer) {
	r.mu.Lock()
	ks := slices.Clone(r.keys)
	r.mu.Unlock()
	if len(ks) == 0 {
		return
	}
	base := ks[0]
	fmt.Fprintf(w, "\n### 4. Memory per idempotency key (redis-server %s, %d sent records written by Store.Record, TTL 48h, each format in a fresh server)\n\n", base.version, base.keys)
	fmt.Fprintln(w, "used_memory growth / keys adds the expires table entry and the hash buckets, which MEMORY USAGE leaves out. The target is <= 128 bytes.")
	fmt.Fprintln(w)
	header(w, "format", "key, e.g.", "key bytes", "value, e.g.", "value bytes", "MEMORY USAGE", "used_memory / key", "vs the release before", "<= 128 B")
	for _, k := range ks {
		target := "met"
		if k.usedPerKey > 128 {
			target = "MISSED"
		}
		row(w, k.label, "`"+k.exampleKey+"`", fmt.Sprint(k.keyLen), "`"+k.exampleValue+"`", fmt.Sprint(k.valueLen),
			fmt.Sprintf("%.1f", k.memoryUsage), fmt.Sprintf("%.1f", k.usedPerKey), fmt.Sprintf("%.2fx", k.usedPerKey/base.usedPerKey), target)
	}
	k := ks[len(ks)-1]
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Projection at the 48h TTL for %q: keys alive = 2 days of notifications, one key per notification; one Redis, no persistence; a replica holds the same again.\n", k.label)
	fmt.Fprintln(w)
	header(w, "notifications / day", "keys alive", "by MEMORY USAGE", "by used_memory growth", "with one replica (used_memory)")
	for _, perDay := range []int64{1_000_000, 10_000_000, 100_000_000} {
		alive := 2 * perDay
		row(w, fmt.Sprintf("%d M", perDay/1_000_000), fmt.Sprintf("%d M", alive/1_000_000),
			bytesIEC(float64(alive)*k.memoryUsage), bytesIEC(float64(alive)*k.usedPerKey), bytesIEC(2*float64(alive)*k.usedPerKey))
	}
}

func (r *registry) printTwilio(w io.Writer) {
	before, okBefore := r.get(runTwilioFresh)
	after, okAfter := r.get(runTwilioPool)
	if !okBefore && !okAfter {
		return
	}
	fmt.Fprintf(w, "\n### 5. Twilio connections (the Twilio adapter against the zero-latency Twilio double over loopback HTTP, MaxInFlight 64, memory store, %d partitions)\n\n", partitions)
	fmt.Fprintln(w, "New connections are counted at the double's listener over the whole run; against the real API each one is a TCP and a TLS handshake.")
	fmt.Fprintln(w, "Before: Go's default transport (2 idle connections per host) and a twilio-go client per send; after: one client and a pool of MaxInFlight connections.")
	fmt.Fprintln(w)
	header(w, "Twilio adapter", "SMS", "records/s", "rounds (records/s)", "new connections", "new connections per 1000 SMS", "ratio vs before")
	if okBefore {
		row(w, "before: client per send, default pool", fmt.Sprint(before.records), rate(before), roundRates(before), fmt.Sprint(before.conns), perThousand(before), "1.00x (baseline)")
	}
	if okAfter {
		row(w, "after: one client, pool of 64", fmt.Sprint(after.records), rate(after), roundRates(after), fmt.Sprint(after.conns), perThousand(after), ratio(after, before, okBefore))
	}
}

// perThousand is m's new connections per 1000 records.
func perThousand(m measurement) string {
	if m.records == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", float64(m.conns)*1000/float64(m.records))
}

func bytesIEC(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", b/(1<<20))
	}
	return fmt.Sprintf("%.0f KiB", b/(1<<10))
}

func (r *registry) printTracing(w io.Writer) {
	off, okOff := r.get(runTracingOff)
	if !okOff {
		return
	}
	fmt.Fprintf(w, "\n### 6. Tracing cost (zero-latency notifier, memory store, MaxInFlight 64, %d partitions)\n\n", partitions)
	fmt.Fprintln(w, "Off is what the worker runs without OTEL_EXPORTER_OTLP_ENDPOINT: nothing decorated. On samples every record (a record")
	fmt.Fprintln(w, "span, and claim, send and record children), batches the spans to an exporter that discards them, and writes the")
	fmt.Fprintln(w, "record's log line with its trace_id and span_id.")
	fmt.Fprintln(w)
	header(w, "tracing", "records", "records/s", "rounds (records/s)", "ratio vs off", "worker CPU/record")
	for _, c := range []struct{ label, name string }{
		{"off", runTracingOff},
		{"decorators over a no-op provider", runTracingNoop},
		{"on (SDK, batch span processor)", runTracingOn},
	} {
		m, ok := r.get(c.name)
		if !ok {
			continue
		}
		rt := ratio(m, off, okOff)
		if c.name == runTracingOff {
			rt = "1.00x (baseline)"
		}
		row(w, c.label, fmt.Sprint(m.records), rate(m), roundRates(m), rt, us(m.cpuPerRecord()))
	}
}

func (r *registry) putStartup(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.startup[name] = d
}

func (r *registry) baseCommit() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cpuBase
}

func (r *registry) printReplay(w io.Writer) {
	cur, ok := r.getCPU(runReplay)
	if !ok {
		return
	}
	base, okBase := r.getCPU(runReplayBase)
	fmt.Fprintf(w, "\n### 13. A replay: %d records already sent, read again by a fresh group (worker binary, Redis store; every record suppressed as a duplicate)\n\n", replayEvents)
	fmt.Fprintf(w, "From the first record handled to the last (suppressed, or sent where a Claim failed open under load); the baseline is the worker of %s, on the same records and keys.\n\n", r.baseCommit())
	header(w, "worker", "records", "seconds", "records/s", "worker CPU/record", "redis-server CPU/record", "CPU vs baseline")
	perSec := func(m cpuRun) string {
		if m.elapsed <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.0f", float64(m.records)/m.elapsed.Seconds())
	}
	if okBase {
		row(w, "baseline "+r.baseCommit(), fmt.Sprint(base.records), fmt.Sprintf("%.2f", base.elapsed.Seconds()), perSec(base), us(base.perRecord()), us(base.serverPerRecord()), "1.00x (baseline)")
	}
	vs := "n/a (baseline not run)"
	if okBase && base.perRecord() > 0 {
		vs = fmt.Sprintf("%.2fx", float64(cur.perRecord())/float64(base.perRecord()))
	}
	row(w, "this checkout", fmt.Sprint(cur.records), fmt.Sprintf("%.2f", cur.elapsed.Seconds()), perSec(cur), us(cur.perRecord()), us(cur.serverPerRecord()), vs)
}

func (r *registry) printStartup(w io.Writer) {
	r.mu.Lock()
	got := maps.Clone(r.startup)
	r.mu.Unlock()
	if len(got) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### 14. Start-up: the worker binary from its start to GET /readyz 200 (kfake broker process, empty topic; polled every %v, fastest of %d rounds)\n\n", startupPoll, startupRounds)
	header(w, "store", "worker", "start to /readyz", "target")
	for _, v := range []struct{ store, base, cur string }{
		{"memory", startupKafkaBase, startupKafka}, {"redis", startupKafkaRedisB, startupKafkaRedis},
	} {
		if d, ok := got[v.base]; ok {
			row(w, v.store, "baseline "+r.baseCommit(), ms(d), "reported")
		}
		if d, ok := got[v.cur]; ok {
			target := fmt.Sprintf("<= %v: met", startupTarget)
			if d > startupTarget {
				target = fmt.Sprintf("<= %v: MISSED", startupTarget)
			}
			row(w, v.store, "this checkout", ms(d), target)
		}
	}
}
