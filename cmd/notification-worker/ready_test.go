package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/harborlight/notification-worker/internal/devbroker"
	"github.com/harborlight/notification-worker/internal/wait"
)

// TestMain_ReadyzSpare: two workers on a one-partition topic. The one the
// group gives no partition is a spare, and its /readyz answers 200 with
// consumer "spare": a StatefulSet scaled past the partition count must
// finish its rollout, and a PodDisruptionBudget must not count the spare
// as down.
func TestMain_ReadyzSpare(t *testing.T) {
	topic, group := uniqueName("spare"), uniqueName("group")
	emb, err := devbroker.Start(1, []string{topic, topic + ".dlq"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	env := map[string]string{
		"KAFKA_BROKERS":    emb.Brokers()[0],
		"KAFKA_TOPIC":      topic,
		"KAFKA_GROUP_ID":   group,
		"HTTP_ADDR":        "127.0.0.1:0",
		"SEND_TIMEOUT":     "2s",
		"SHUTDOWN_TIMEOUT": "5s",
	}
	workers := make([]*Main, 2)
	for i := range workers {
		workers[i] = &Main{Config: MustLoadConfig(t, env), Stdout: &discard{}}
		MustOpen(t, workers[i])
		MustRun(t, workers[i])
	}
	wait.For(t, waitWithin, "one worker assigned, the other a ready spare", func() (bool, string) {
		var got []string
		assigned, spare := 0, 0
		for _, w := range workers {
			code, body := readyz(t, w)
			got = append(got, fmt.Sprintf("%d %v", code, body))
			if code != http.StatusOK || body["ready"] != true {
				continue
			}
			switch body["consumer"] {
			case consumerAssigned:
				assigned++
			case consumerSpare:
				spare++
			}
		}
		return assigned == 1 && spare == 1, fmt.Sprint(got)
	})
}

// discard is an io.Writer that keeps nothing.
type discard struct{}

func (*discard) Write(p []byte) (int, error) { return len(p), nil }
