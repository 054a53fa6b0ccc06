//go:build integration

package integration_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/harborlight/notification-worker/integration"
)

// TestRedrive: the worker dead-letters two malformed records on Apache
// Kafka; `notification-worker redrive` puts them back on the topic with
// their key, headers (traceparent) and original timestamp, and commits its
// group's offsets on the dead letter topic. A dry run and a run filtered to
// another kind write nothing; a second run redrives nothing.
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
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, integration.WorkerBinary(t), append([]string{"redrive"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
		for k, v := range rig.WorkerEnv(nil) {
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
		committed, err := rig.Kafka.CommittedOffsets(ctx, rig.Group+".redrive", dlq)
		if err != nil {
			t.Fatal(err)
		}
		ends, err := rig.Kafka.EndOffsets(ctx, dlq)
		if err != nil {
			t.Fatal(err)
		}
		for p, end := range ends {
			if end > 0 && committed[p] != end {
				t.Errorf("group %s.redrive committed %v on %s, want its ends %v", rig.Group, committed, dlq, ends)
				break
			}
		}
	})

	t.Run("SecondRunRedrivesNothing", func(t *testing.T) {
		code, stdout, _ := redrive()
		if code != 0 || !strings.Contains(stdout, "0 dead letters read, 0 redriven") {
			t.Fatalf("exit %d, stdout %q", code, stdout)
		}
		if got := mustEndTotal(t, rig.Kafka, rig.Topic); got != topicEnd+2 {
			t.Errorf("topic end %d after a second run, want %d", got, topicEnd+2)
		}
	})
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
