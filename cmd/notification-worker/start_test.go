package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/harborlight/notification-worker/internal/logtest"
	"github.com/harborlight/notification-worker/internal/wait"
)

// silentAddr returns a loopback address that accepts connections and
// never answers on them, as a broker behind a broken proxy does.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A dependency that does not answer within STARTUP_TIMEOUT stops the
// worker with exit 3 and one line on stderr, in the configured format,
// naming the dependency and what to check; a broker that accepts and
// never answers is given up on by then too.
func TestRun_UnreachableDependencyExits3WithOneLine(t *testing.T) {
	for _, tt := range []struct {
		name, dependency string
		env              map[string]string
	}{
		{"KafkaRefused", "kafka", map[string]string{"KAFKA_BROKERS": closedAddr(t)}},
		{"KafkaSilent", "kafka", map[string]string{"KAFKA_BROKERS": silentAddr(t)}},
		{"RedisRefused", "redis", map[string]string{"EVENT_SOURCE": "embedded", "REDIS_URL": "redis://" + closedAddr(t),
			"SMS_NOTIFIER": "console", "EMAIL_NOTIFIER": "console"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setEnv(t, merged(map[string]string{"HTTP_ADDR": "off", "STARTUP_TIMEOUT": "1s"}, tt.env))
			start := time.Now()
			code, stdout, stderr := runCmd(t, "", "worker")
			if code != 3 {
				t.Fatalf("exit %d, want 3\nstderr: %s\nstdout: %s", code, stderr, stdout)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("gave up after %v, STARTUP_TIMEOUT being 1s", took)
			}
			var line struct {
				Level, Msg, Dependency, Check, Error string
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line); err != nil {
				t.Fatalf("stderr is not one JSON line (%v): %s", err, stderr)
			}
			if line.Msg != "worker_start_failed" || line.Level != "ERROR" || line.Dependency != tt.dependency || line.Check == "" || line.Error == "" {
				t.Errorf("stderr line %+v, want worker_start_failed at ERROR naming %s, with its error and what to check", line, tt.dependency)
			}
		})
	}
	t.Run("TextFormat", func(t *testing.T) {
		setEnv(t, map[string]string{"HTTP_ADDR": "off", "STARTUP_TIMEOUT": "1s", "LOG_FORMAT": "text", "KAFKA_BROKERS": closedAddr(t)})
		code, _, stderr := runCmd(t, "", "worker")
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if code != 3 || len(lines) != 1 || !strings.Contains(lines[0], "msg=worker_start_failed") || !strings.Contains(lines[0], "dependency=kafka") {
			t.Fatalf("exit %d, stderr %q; want 3 and one text line worker_start_failed, dependency=kafka", code, stderr)
		}
	})
}

// Within STARTUP_TIMEOUT the worker waits for a dependency that is not up
// yet, saying so, and starts once it answers.
func TestRun_WaitsForKafkaWithinStartupTimeout(t *testing.T) {
	addr := closedAddr(t)
	setEnv(t, map[string]string{"HTTP_ADDR": "off", "KAFKA_BROKERS": addr, "STARTUP_TIMEOUT": "2m"})
	mustStartAndStop(t, func(stdout *logtest.Buffer) {
		wait.For(t, waitWithin, "a worker_start_waiting line for kafka", func() (bool, string) {
			return strings.Contains(stdout.String(), `"msg":"worker_start_waiting","dependency":"kafka"`), stdout.String()
		})
		_, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		broker, err := kfake.NewCluster(kfake.Ports(p), kfake.SeedTopics(embeddedPartitions, "shipment-events", "shipment-events.dlq"))
		if err != nil {
			t.Fatalf("start a broker on %s: %v", addr, err)
		}
		t.Cleanup(broker.Close)
	})
}

// serviceLinks returns the variables Kubernetes sets in a pod for a
// Service named name with clusterIP and ports, by port name (the first in
// name order being the Service's first port), as the kubelet writes them
// (pkg/kubelet/envvars): the simple _SERVICE_HOST and _SERVICE_PORT ones,
// and the Docker-link ones.
func serviceLinks(name, clusterIP string, ports map[string]int) map[string]string {
	prefix := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	out := map[string]string{prefix + "_SERVICE_HOST": clusterIP}
	names := slices.Sorted(maps.Keys(ports))
	for n, portName := range names {
		port := strconv.Itoa(ports[portName])
		hostPort := "tcp://" + net.JoinHostPort(clusterIP, port)
		if n == 0 {
			out[prefix+"_SERVICE_PORT"] = port
			out[prefix+"_PORT"] = hostPort
		}
		out[prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(portName, "-", "_"))] = port
		link := prefix + "_PORT_" + port + "_TCP"
		out[link] = hostPort
		out[link+"_PROTO"] = "tcp"
		out[link+"_PORT"] = port
		out[link+"_ADDR"] = clusterIP
	}
	return out
}

// In a namespace with Services named redis, kafka, smtp, twilio and
// notification-worker, Kubernetes sets their links beside the worker's
// settings (REDIS_PORT, KAFKA_SERVICE_HOST, SMTP_PORT=tcp://...): the
// worker starts, and neither refuses nor reports them; a variable with a
// setting's prefix that names none is reported once.
func TestRun_ServiceLinksIgnoredUnknownVariablesLogged(t *testing.T) {
	env := map[string]string{"EVENT_SOURCE": "embedded", "HTTP_ADDR": "127.0.0.1:0", "KAFKA_FETCH_BYTES": "1048576"}
	links := merged(
		serviceLinks("redis", "10.96.0.7", map[string]int{"redis": 6379}),
		serviceLinks("kafka", "10.96.0.8", map[string]int{"kafka": 9092, "kafka-controller": 9093}),
		serviceLinks("smtp", "10.96.0.9", map[string]int{"smtp": 587}),
		serviceLinks("twilio", "10.96.0.10", map[string]int{"https": 443}),
		serviceLinks("notification-worker", "10.96.0.11", map[string]int{"http": 8080}),
	)
	setEnv(t, merged(env, links))
	stdout := mustStartAndStop(t, nil)
	var unknown []string
	for _, l := range logLines(t, stdout, "config_unknown_variable") {
		unknown = append(unknown, fmt.Sprint(l["variable"]))
	}
	if !slices.Equal(unknown, []string{"KAFKA_FETCH_BYTES"}) {
		t.Errorf("config_unknown_variable for %v, want KAFKA_FETCH_BYTES alone, once", unknown)
	}
	if !strings.Contains(stdout, `"port":587`) {
		t.Errorf("the start-up line does not show SMTP's default port: SMTP_PORT=%s was taken as a setting", links["SMTP_PORT"])
	}
}

// IDEMPOTENCY_STORE=memory asked for beside real providers starts, with a
// warning naming them.
func TestRun_MemoryStoreBesideRealProvidersWarns(t *testing.T) {
	setEnv(t, merged(providersEnv, map[string]string{"EVENT_SOURCE": "embedded", "HTTP_ADDR": "127.0.0.1:0", "IDEMPOTENCY_STORE": "memory"}))
	lines := logLines(t, mustStartAndStop(t, nil), "memory_store_with_real_providers")
	if len(lines) != 1 || lines[0]["level"] != "WARN" || fmt.Sprint(lines[0]["notifiers"]) != "[twilio smtp]" {
		t.Errorf("memory_store_with_real_providers lines %v, want one warning naming twilio and smtp", lines)
	}
}

// mustStartAndStop runs the worker command on the process's environment
// until its consumer started, then stops it as SIGTERM does; it returns
// what the worker wrote to stdout, failing unless it exited 0. meanwhile,
// when not nil, runs while the worker starts, on its stdout.
func mustStartAndStop(t *testing.T, meanwhile func(stdout *logtest.Buffer)) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr logtest.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"worker"}, strings.NewReader(""), &stdout, &stderr) }()
	if meanwhile != nil {
		meanwhile(&stdout)
	}
	wait.For(t, waitWithin, "the consumer to start", func() (bool, string) {
		return strings.Contains(stdout.String(), `"msg":"consumer_started"`), stdout.String() + stderr.String()
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after a clean shutdown, want 0; stderr: %s", code, stderr.String())
		}
	case <-time.After(waitWithin):
		t.Fatalf("run did not return within %v of the cancellation", waitWithin)
	}
	return stdout.String()
}

// logLines returns the JSON log lines in logs whose msg is msg.
func logLines(t *testing.T, logs, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(logs, "\n") {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == msg {
			out = append(out, line)
		}
	}
	return out
}
