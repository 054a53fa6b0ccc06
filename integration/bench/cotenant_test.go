package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/harborlight/notification-worker/adapters/redis/redistest"
	"github.com/harborlight/notification-worker/ports"
)

// The co-tenant: a workload shaped like the Carrier Adapter's rate-limit
// counters on the worker's Redis. Each request is an INCR of a per-client,
// per-minute counter and an EXPIRE of it, sent together from the
// co-tenant's own client, open loop at coTenantRate (a request starts at
// its time whether or not the ones before it were answered), at most
// coTenantMax requests and for at most coTenantWithin.
const (
	coTenantRate    = 2000 // requests per second
	coTenantMax     = 120_000
	coTenantWithin  = time.Minute
	coTenantAlone   = 3 * time.Second // how long the co-tenant runs alone
	coTenantClients = 1000            // distinct counters per minute
	coTenantEvents  = 20000
	coTenantKeys    = 5000
)

// Names of the co-tenant's measurements.
const (
	runCoTenantAlone = "cotenant/alone"
	// The control: the worker sending to another redis-server on this
	// machine, so the co-tenant shares the CPUs with it but not Redis.
	runCoTenantControl = "cotenant/control"
	runCoTenantSteady  = "cotenant/steady"
	runCoTenantReplay  = "cotenant/replay"
	// The same worker run without the co-tenant, and with AOF everysec.
	runPersistNone = "persistence/none"
	runPersistAOF  = "persistence/aof-everysec"
)

// coTenantRun is what one co-tenant run saw, and the worker beside it.
type coTenantRun struct {
	requests int
	p50, p99 time.Duration
	// worker is the worker's run beside the co-tenant; records 0 when
	// the co-tenant ran alone.
	worker measurement
	// workerCommands are the commands Redis ran for the worker (INFO
	// commandstats, every command but the co-tenant's INCR and EXPIRE
	// and the benchmark's INFO).
	workerCommands int64
}

var coTenantResults = struct {
	sync.Mutex
	runs map[string]coTenantRun
}{runs: map[string]coTenantRun{}}

// coTenant sends requests until stop is closed (or its bounds) and returns
// when and how long each took.
func coTenant(b *testing.B, srv *redistest.Server, stop <-chan struct{}) (sent []time.Time, took []time.Duration) {
	b.Helper()
	c := srv.MustClient(b, 0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	interval := time.Second / coTenantRate
	var failed error
loop:
	for i := 0; i < coTenantMax; i++ {
		at := start.Add(time.Duration(i) * interval)
		if time.Since(start) > coTenantWithin {
			break
		}
		select {
		case <-stop:
			break loop
		case <-time.After(time.Until(at)):
		}
		key := "rl:" + strconv.Itoa(i%coTenantClients) + ":" + strconv.FormatInt(at.Unix()/60, 10)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			t0 := time.Now()
			res := c.DoMulti(ctx, c.B().Incr().Key(key).Build(), c.B().Expire().Key(key).Seconds(120).Build())
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			for _, r := range res {
				if err := r.Error(); err != nil && failed == nil {
					failed = err
				}
			}
			sent, took = append(sent, t0), append(took, d)
		})
	}
	wg.Wait()
	if failed != nil {
		b.Fatalf("co-tenant: %v", failed)
	}
	return sent, took
}

// commandCalls sums INFO commandstats' calls, leaving out the co-tenant's
// commands and INFO itself.
func commandCalls(b *testing.B, c rueidis.Client) int64 {
	b.Helper()
	s, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		b.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for _, line := range strings.Split(s, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || name == "incr" || name == "expire" || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatalf("INFO commandstats %q: %v", line, err)
		}
		n += v
	}
	return n
}

// BenchmarkRedisCoTenant answers the RFC review's question with load: does
// the worker at its peak slow the rate-limit counters that share its
// Redis? The co-tenant runs alone; beside the worker sending to another
// redis-server (the control: the same competition for this machine's
// CPUs, without sharing Redis); beside the worker sending on its Redis
// (fresh records, the zero-latency notifier: the worker as fast as this
// machine lets it); and beside a replay storm (the same records again,
// every one found sent). No persistence; one round each.
//
// BenchmarkRedisCoTenant also measures the worker on a redis-server with
// AOF (appendfsync everysec) against one without persistence, interleaved
// rounds in the same run: what surviving a restart with the data costs.
func BenchmarkRedisCoTenant(b *testing.B) {
	needRedis(b)
	br := mustBroker(b, coTenantEvents, coTenantKeys)
	srv := mustRedis(b)
	admin := srv.MustClient(b, 0)
	for range b.N {
		stop := make(chan struct{})
		time.AfterFunc(coTenantAlone, func() { close(stop) })
		_, took := coTenant(b, srv, stop)
		alone := coTenantRun{requests: len(took)}
		alone.p50, alone.p99 = percentiles(took)

		beside := func(store ports.IdempotencyStore, storeServer rueidis.Client) coTenantRun {
			stop := make(chan struct{})
			var sent []time.Time
			var took []time.Duration
			done := make(chan struct{})
			go func() { defer close(done); sent, took = coTenant(b, srv, stop) }()
			calls0 := commandCalls(b, storeServer)
			t0 := time.Now()
			m := run{maxInFlight: 64, store: store, want: coTenantEvents, within: time.Minute}.measure(b, br)
			cr := coTenantRun{worker: m, workerCommands: commandCalls(b, storeServer) - calls0}
			close(stop)
			<-done
			// Only the requests made while the worker was handling records.
			from := t0.Add(m.join)
			to := from.Add(m.elapsed)
			var during []time.Duration
			for i, at := range sent {
				if !at.Before(from) && at.Before(to) {
					during = append(during, took[i])
				}
			}
			cr.requests = len(during)
			cr.p50, cr.p99 = percentiles(during)
			return cr
		}
		other := mustRedis(b)
		control := beside(mustRedisStore(b, other), other.MustClient(b, 0))
		store := mustRedisStore(b, srv)
		steady := beside(store, admin)
		replay := beside(store, admin)
		coTenantResults.Lock()
		coTenantResults.runs[runCoTenantAlone] = alone
		coTenantResults.runs[runCoTenantControl] = control
		coTenantResults.runs[runCoTenantSteady] = steady
		coTenantResults.runs[runCoTenantReplay] = replay
		coTenantResults.Unlock()
		results.put(runCoTenantSteady, steady.worker)
		results.put(runCoTenantReplay, replay.worker)

		// Persistence: the same worker run on a server without it and
		// on one with AOF everysec, interleaved.
		aof := redistest.MustStart(b, "--appendonly", "yes", "--appendfsync", "everysec")
		through := func(srv *redistest.Server) func(b *testing.B) measurement {
			cpu := serverCPU(b, srv.MustClient(b, 0))
			return func(b *testing.B) measurement {
				return run{maxInFlight: 64, store: mustRedisStore(b, srv), want: coTenantEvents, within: time.Minute, serverCPU: cpu}.measure(b, br)
			}
		}
		bestOf(b, storeRounds, []variant{
			{runPersistNone, through(srv)},
			{runPersistAOF, through(aof)},
		})
	}
}

// serverCPU returns a reader of redis-server's CPU time so far (INFO cpu,
// user and system).
func serverCPU(b *testing.B, c rueidis.Client) func() time.Duration {
	return func() time.Duration {
		var total float64
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, err := strconv.ParseFloat(info(b, c, "cpu", f), 64)
			if err != nil {
				b.Fatalf("INFO cpu %s: %v", f, err)
			}
			total += v
		}
		return time.Duration(total * float64(time.Second))
	}
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*50/100], s[min(len(s)-1, len(s)*99/100)]
}

func (r *registry) printCoTenant(w io.Writer) {
	coTenantResults.Lock()
	runs := coTenantResults.runs
	alone, okAlone := runs[runCoTenantAlone]
	coTenantResults.Unlock()
	if okAlone {
		fmt.Fprintf(w, "\n### 11. A rate-limit co-tenant on the worker's Redis (INCR + EXPIRE per request from its own client, open loop at %d requests/s; worker: MaxInFlight 64, zero-latency notifier, Redis store as deployed, its peak on this machine; no persistence; one round)\n\n", coTenantRate)
		fmt.Fprintln(w, "The co-tenant's latency is a request's round trip (both commands in one write); beside the worker, only the requests made while it")
		fmt.Fprintln(w, "was handling records count. The worker, its broker, the redis-servers and the co-tenant share this machine's CPUs, so the")
		fmt.Fprintln(w, "co-tenant also waits for a CPU: the control row runs the worker on another redis-server, and the rows below it differ from it")
		fmt.Fprintln(w, "by what sharing Redis itself costs. Worker commands are INFO commandstats deltas (all but INCR, EXPIRE and INFO) per record.")
		fmt.Fprintln(w)
		header(w, "co-tenant beside", "co-tenant requests", "co-tenant p50", "co-tenant p99", "worker records", "worker records/s", "worker Redis commands/record", "p99 <= 2x the control's")
		row(w, "nothing (alone)", fmt.Sprint(alone.requests), ms(alone.p50), ms(alone.p99), "", "", "", "")
		coTenantResults.Lock()
		control, okControl := runs[runCoTenantControl]
		coTenantResults.Unlock()
		for _, c := range []struct {
			label, name string
		}{
			{"control: the worker sending, to another redis-server", runCoTenantControl},
			{"the worker sending (fresh records)", runCoTenantSteady},
			{"a replay storm (records already sent)", runCoTenantReplay},
		} {
			coTenantResults.Lock()
			cr, ok := runs[c.name]
			coTenantResults.Unlock()
			if !ok {
				continue
			}
			target := "baseline"
			if c.name != runCoTenantControl {
				switch {
				case !okControl:
					target = "n/a"
				case cr.p99 <= 2*control.p99:
					target = "met"
				default:
					target = "MISSED"
				}
			}
			n := max(1, cr.worker.records)
			row(w, c.label, fmt.Sprint(cr.requests), ms(cr.p50), ms(cr.p99), fmt.Sprint(cr.worker.records), rate(cr.worker),
				fmt.Sprintf("%.2f", float64(cr.workerCommands)/float64(n)), target)
		}
	}
	none, okNone := r.get(runPersistNone)
	aof, okAOF := r.get(runPersistAOF)
	if okNone || okAOF {
		fmt.Fprintf(w, "\n### 12. Redis persistence cost (worker: MaxInFlight 64, zero-latency notifier, Redis store as deployed; %d interleaved rounds)\n\n", storeRounds)
		fmt.Fprintln(w, "AOF with appendfsync everysec keeps the sent records across a Redis restart, losing at most about a second of them.")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "redis-server's CPU per 1000 records/s is its CPU per record at that rate: the share of its one core the worker takes.")
		fmt.Fprintln(w)
		header(w, "redis-server", "records", "records/s", "rounds (records/s)", "ratio vs no persistence", "redis-server CPU/record", "redis-server CPU per 1000 records/s", "store time p99", "target")
		perThousand := func(m measurement) string {
			cpu := m.serverCPUPerRecord() * 1000
			return fmt.Sprintf("%.0f ms/s (%.1f%% of a core)", float64(cpu)/float64(time.Millisecond), float64(cpu)/float64(time.Second)*100)
		}
		if okNone {
			row(w, "no persistence", fmt.Sprint(none.records), rate(none), roundRates(none), "1.00x (baseline)", us(none.serverCPUPerRecord()), perThousand(none), ms(none.percentile(99)), "")
		}
		if okAOF {
			row(w, "AOF, appendfsync everysec", fmt.Sprint(aof.records), rate(aof), roundRates(aof), ratio(aof, none, okNone), us(aof.serverCPUPerRecord()), perThousand(aof), ms(aof.percentile(99)), verdict(aof, none, okNone, 0.8))
		}
	}
}
