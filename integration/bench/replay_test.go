package bench

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/harborlight/notification-worker/integration"
)

// duplicateSeries is the worker's count of SMS suppressed as already sent.
const duplicateSeries = `notification_worker_notifications_total{channel="sms",outcome="duplicate"}`

// Names of the replay and start-up measurements, this checkout's and the
// baseline revision's.
const (
	runReplay          = "replay/redis"
	runReplayBase      = "replay/redis/base"
	replayEvents       = 200000
	replayLimit        = 5 * time.Minute // for one pass over the replay's records
	startupRounds      = 5
	startupLimit       = 30 * time.Second
	startupTarget      = time.Second
	startupPoll        = 5 * time.Millisecond
	startupKafka       = "start/kafka"
	startupKafkaBase   = "start/kafka/base"
	startupKafkaRedis  = "start/kafka+redis"
	startupKafkaRedisB = "start/kafka+redis/base"
)

// BenchmarkWorkerReplay measures a replay after an incident: 200 000
// records, every one already sent, read again by a fresh consumer group
// of the worker binary with the Redis store, which suppresses each as a
// duplicate. One worker first sends them all (console notifier, keys under
// one prefix); then the baseline revision's worker and this checkout's
// each replay the topic with a group of their own against those keys. It
// reports records handled a second (suppressed, or sent where a Claim
// failed open under load) and the CPU of the worker and of redis-server
// per record, from the first to the last.
func BenchmarkWorkerReplay(b *testing.B) {
	needRedis(b)
	const keys = 5000
	sbs := mustSideBySide(b, "replayed-events", replayEvents, keys)
	seq := prefixSeq.Add(1) // one set of keys: the replays find the first pass's records
	pass := func(bin string, series ...string) cpuRun {
		w := startWorkerBinary(b, bin, sbs.env("replay", sbs.srv.URL(), seq))
		defer stopWorker(b, w)
		return measureCPUOf(b, w, series, replayEvents, replayLimit, sbs.redisCPU, nil)
	}
	for range b.N {
		pass(sbs.current, sentSeries) // the incident: every record sent once
		// A replay counts the records suppressed and the ones sent: on a
		// loaded machine a Claim past IDEMPOTENCY_TIMEOUT fails open and
		// sends, as configured, and that record is still handled.
		results.putCPU(runReplayBase, pass(sbs.base, duplicateSeries, sentSeries))
		results.putCPU(runReplay, pass(sbs.current, duplicateSeries, sentSeries))
	}
}

// BenchmarkWorkerStartup measures the worker binary from its start to
// GET /readyz answering 200 (polled every 5 ms), with the memory store and
// with the Redis store, against a kfake broker process holding an empty
// topic: what a rolling deploy of static members waits on per pod. The
// baseline revision's worker runs interleaved with this checkout's; the
// fastest of 5 rounds of each is kept.
func BenchmarkWorkerStartup(b *testing.B) {
	needRedis(b)
	sbs := mustSideBySide(b, "startup-events", 0, 0)
	start := func(bin, redisURL string) time.Duration {
		env := sbs.env("start", redisURL, prefixSeq.Add(1))
		started := time.Now()
		w := startWorkerBinary(b, bin, env)
		defer stopWorker(b, w)
		return untilReady(b, w, started)
	}
	runs := []struct{ name, bin, redis string }{
		{startupKafkaBase, sbs.base, ""}, {startupKafka, sbs.current, ""},
		{startupKafkaRedisB, sbs.base, sbs.srv.URL()}, {startupKafkaRedis, sbs.current, sbs.srv.URL()},
	}
	for range b.N {
		got := map[string][]time.Duration{}
		for range startupRounds {
			for _, r := range runs {
				got[r.name] = append(got[r.name], start(r.bin, r.redis))
			}
		}
		for name, ds := range got {
			results.putStartup(name, slices.Min(ds))
		}
	}
}

// untilReady returns the time from started until w's /readyz answered 200.
func untilReady(b *testing.B, w *integration.Worker, started time.Time) time.Duration {
	b.Helper()
	hc := &http.Client{Timeout: time.Second}
	for time.Since(started) < startupLimit {
		resp, err := hc.Get("http://" + w.HTTPAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(started)
			}
		}
		time.Sleep(startupPoll)
	}
	b.Fatalf("worker not ready %v after its start\n%v", startupLimit, lastLines(w.Logs(), 20))
	return 0
}
