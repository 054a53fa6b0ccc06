// Package bench measures the worker's capacity on the machine it runs on:
// key-ordered concurrency against one-at-a-time handling, the cost of the
// idempotency store (Redis, memory, none), throughput during a Redis outage
// with and without the circuit breaker, the memory one idempotency key
// takes in Redis, the connections the Twilio adapter opens per 1000 SMS
// with the throughput they cost, the cost of tracing (off, over a no-op
// provider, on), throughput against Little's law at MaxInFlight 1024, and
// the worker process itself: its peak RSS under a GiB backlog and its CPU
// per record; a rate-limit co-tenant's latency on the worker's Redis, alone
// and beside the worker at its peak, and the cost of AOF persistence; an
// SMS backlog sent by three worker processes of one group to a Twilio
// double that limits the sender's pace, without SMS_RATE_LIMIT and with it
// shared through one Redis (BENCH_RATE_SMS sets the backlog, default
// 10 000: 200 s at the pace).
//
// Everything runs through the real pieces (the Sarama consumer on the
// embedded kfake broker, the domain service, the real stores, a real
// redis-server on a free loopback port); only the notifier is a double, so
// its latency is a known constant, except in the Twilio benchmark, where
// the real Twilio adapter sends to the in-process Twilio double. The worker
// process benchmarks run the worker binary and the kfake broker command
// (integration/kfakebroker) as child processes, so what is read from /proc
// is the worker's alone; the Twilio double they send to runs in this
// process. Every ratio is computed against a baseline measured in the same
// run, and the run ends by printing one table (see report_test.go). The
// benchmarks only run with -bench, so
// `go test ./...` compiles this package and runs nothing:
//
//	go test -run '^$' -bench . -benchtime 1x -count 1 -timeout 35m ./integration/bench/
//
// The Redis benchmarks need redis-server on PATH and are skipped without it.
package bench
