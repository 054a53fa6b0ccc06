//go:build integration

package integration_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/integration"
)

// TestRedrive: the worker dead-letters two malformed records on Apache
// Kafka; `notification-worker redrive` puts them back on the topic with
// their key, headers (traceparent) and original timestamp, and marks each
// in the dead letter topic. A dry run and a run filtered to another kind
// write nothing; a second run redrives nothing.
func TestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := startFaultRig(t, faultRigOptions{})
	w := rig.StartWorker(nil)

	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	// Before the test, to the millisecond Kafka keeps.
	original := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	poison := []*kgo.Record{
		{Key: []byte("SHP-redrive-1"), Value: []byte(`{"event_id":"evt-redrive-1","type":`), Timestamp: original,
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceparent)}}},
		{Key: []byte("SHP-redrive-2"), Value: []byte(`{"event_id":"evt-redrive-2"`), Timestamp: original,
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceparent)}}},
	}
	rig.PublishRecords(ctx, poison...)
	if _, err := w.WaitLog("event_dead_lettered", len(poison), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// Stopped, so that the redriven records are not dead-lettered again
	// while the test counts.
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dlq := rig.Topic + ".dlq"
	topicEnd := mustEndTotal(t, rig.Kafka, rig.Topic)

	redrive := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		return redriveCommand(t, rig.WorkerEnv(nil), args...)
	}

	t.Run("DryRunWritesNothing", func(t *testing.T) {
		code, stdout, _ := redrive("--dry-run")
		if code != 0 || !strings.Contains(stdout, "2 dead letters read, 2 would be redriven") {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if got := mustEndTotal(t, rig.Kafka, rig.Topic); got != topicEnd {
			t.Errorf("topic end %d after a dry run, want %d", got, topicEnd)
		}
	})

	t.Run("OtherKindWritesNothing", func(t *testing.T) {
		code, stdout, _ := redrive("--reason", "retryable")
		if code != 0 || !strings.Contains(stdout, "0 redriven, 2 of other kinds passed over") {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if got := mustEndTotal(t, rig.Kafka, rig.Topic); got != topicEnd {
			t.Errorf("topic end %d after a run for another kind, want %d", got, topicEnd)
		}
	})

	t.Run("Redriven", func(t *testing.T) {
		code, stdout, _ := redrive()
		if code != 0 || !strings.Contains(stdout, "2 dead letters read, 2 redriven") {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if got := mustEndTotal(t, rig.Kafka, rig.Topic); got != topicEnd+2 {
			t.Fatalf("topic end %d after the redrive, want %d", got, topicEnd+2)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		recs, err := rig.Kafka.ReadTopic(rctx, rig.Topic, int(topicEnd)+2)
		if err != nil {
			t.Fatal(err)
		}
		copies := map[string]int{}
		for _, r := range recs {
			copies[string(r.Key)]++
			if !r.Timestamp.Equal(original) {
				t.Errorf("%s at %d/%d: timestamp %s, want %s", r.Key, r.Partition, r.Offset, r.Timestamp, original)
			}
			if len(r.Headers) != 1 || faultHeader(r, "traceparent") != traceparent {
				t.Errorf("%s at %d/%d: headers %v, want only traceparent", r.Key, r.Partition, r.Offset, r.Headers)
			}
		}
		for _, p := range poison {
			if copies[string(p.Key)] != 2 {
				t.Errorf("topic holds %s %d times, want 2 (the original and the redriven)", p.Key, copies[string(p.Key)])
			}
		}
		markers, err := rig.Kafka.ReadTopic(rctx, dlq, len(poison)*2)
		if err != nil {
			t.Fatal(err)
		}
		marked := 0
		for _, r := range markers {
			if faultHeader(r, kafka.HeaderDLQRedriven) == kafka.MarkerRedriven {
				marked++
			}
		}
		if marked != len(poison) {
			t.Errorf("%s holds %d markers, want one per dead letter (%d)", dlq, marked, len(poison))
		}
	})

	t.Run("SecondRunRedrivesNothing", func(t *testing.T) {
		code, stdout, _ := redrive()
		if code != 0 || !strings.Contains(stdout, "2 dead letters read, 0 redriven, 2 already redriven passed over") {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if got := mustEndTotal(t, rig.Kafka, rig.Topic); got != topicEnd+2 {
			t.Errorf("topic end %d after a second run, want %d", got, topicEnd+2)
		}
	})
}

// TestRedrive_AtMostOnceWhateverTheFilters: on Apache Kafka, any sequence
// of `notification-worker redrive` runs redrives each dead letter at most
// once: -reason then a plain run, a plain run then -reason, the same
// filter twice, overlapping filters (-reason and -since, -from and
// -reason); a dead letter written between two runs is redriven by the
// next.
func TestRedrive_AtMostOnceWhateverTheFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := integration.SharedKafka(t)
	topic := faultName(t)
	dlq := topic + ".dlq"
	for _, name := range []string{topic, dlq} {
		if err := k.CreateTopic(ctx, name, 2); err != nil {
			t.Fatal(err)
		}
	}
	env := k.Env(topic, topic+"-group")
	// Wherever a worker has run, the broker's group coordinator is up; a
	// fresh broker has none until its offsets topic is made.
	faultWait(t, 60*time.Second, "the group coordinator", func() (bool, string) {
		_, err := k.CommittedOffsets(ctx, topic+"-group.redrive", dlq)
		return err == nil, fmt.Sprint(err)
	})

	n := 0
	// deadLetters writes a dead letter of each kind, as the worker writes
	// them, valued dl-1, dl-2 and on.
	deadLetters := func(kinds ...string) {
		t.Helper()
		var recs []*kgo.Record
		for _, kind := range kinds {
			n++
			recs = append(recs, &kgo.Record{Topic: dlq, Key: []byte(fmt.Sprintf("SHP-%d", n)), Value: []byte(fmt.Sprintf("dl-%d", n)),
				Headers: []kgo.RecordHeader{
					{Key: kafka.HeaderDLQKind, Value: []byte(kind)},
					{Key: kafka.HeaderDLQReason, Value: []byte("a reason of kind " + kind)},
					{Key: kafka.HeaderDLQOriginalTopic, Value: []byte(topic)},
					{Key: kafka.HeaderDLQOriginalPartition, Value: []byte(strconv.Itoa(n % 2))},
					{Key: kafka.HeaderDLQOriginalOffset, Value: []byte(strconv.Itoa(n))},
				}})
		}
		if err := k.PublishRecords(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	// want is how many times the topic must hold each dead letter's record.
	want := map[string]int{}
	run := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := redriveCommand(t, env, args...)
		if code != 0 {
			t.Fatalf("redrive %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		recs, err := k.ReadTopic(rctx, topic, int(mustEndTotal(t, k, topic)))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, r := range recs {
			got[string(r.Value)]++
		}
		if !maps.Equal(got, want) {
			t.Errorf("after redrive %v the topic holds %v, want %v", args, got, want)
		}
		return stdout
	}

	deadLetters("permanent", "retryable", "unavailable", "permanent")
	want["dl-1"], want["dl-4"] = 1, 1
	run("-reason", "permanent")
	want["dl-2"], want["dl-3"] = 1, 1
	run()
	run("-reason", "permanent")
	run()

	deadLetters("retryable", "permanent")
	want["dl-5"], want["dl-6"] = 1, 1
	run()
	run("-reason", "permanent")

	// -since this time reads only what is written next.
	cut := time.Now()
	deadLetters("paced", "retryable", "permanent")
	want["dl-8"] = 1
	run("-reason", "retryable")
	want["dl-7"], want["dl-9"] = 1, 1
	run("-since", cut.Format(time.RFC3339Nano))
	run("-from", "0:0,1:0", "-reason", "permanent")

	if stdout := run("-dry-run"); !strings.Contains(stdout, "9 dead letters read, 0 would be redriven") ||
		!strings.Contains(stdout, "9 already redriven passed over") {
		t.Errorf("a last dry run printed %q, want 9 read, 0 to redrive, 9 already redriven", stdout)
	}
}

// redriveCommand runs `notification-worker redrive args...` in env and
// returns its exit status and output.
func redriveCommand(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, integration.WorkerBinary(t), append([]string{"redrive"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("redrive %v: %v", args, err)
	}
	t.Logf("redrive %v: exit %d\n%s%s", args, cmd.ProcessState.ExitCode(), out.String(), errOut.String())
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// mustEndTotal returns the sum of topic's end offsets: how many records it
// holds, as nothing is deleted during a test.
func mustEndTotal(t *testing.T, k *integration.Kafka, topic string) int64 {
	t.Helper()
	ends, err := k.EndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ends {
		n += e
	}
	return n
}
