package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/config"
)

// maxLineBytes bounds one JSON line read by publish.
const maxLineBytes = 4 << 20

// runPublish sends events to a real Kafka (KAFKA_BROKERS), keyed by their
// shipment_id, for trying a stack by hand: JSON lines from a file or stdin,
// or -sample N generated events. Lines are sent as they are, valid or not,
// so it can feed the dead letter path too.
func runPublish(ctx context.Context, cio cmdIO, args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	topic := fs.String("topic", "", "topic to publish to (default KAFKA_TOPIC)")
	sample := fs.Int("sample", 0, "publish N generated sample events instead of reading input")
	if err := parseFlags(fs, "publish [-topic T] [-sample N] [file]\n\nPublishes JSON lines from file (or stdin, or -) to KAFKA_BROKERS, keyed by shipment_id.", args, cio.stdout); err != nil {
		return err
	}
	cfg, err := config.Load(cio.lookup)
	if err != nil {
		return err
	}
	k := kafka.LoadSettings(cfg.Settings())
	if *topic == "" {
		*topic = k.Topic
	}
	stdin, stdout := cio.stdin, cio.stdout
	if len(k.Brokers) == 0 {
		return &usageError{"publish: KAFKA_BROKERS is empty: an embedded broker would vanish with this process (try `make run` for the embedded demo)"}
	}

	var msgs []kafka.Message
	switch {
	case *sample > 0:
		events, _ := sampleEvents(*sample)
		for _, ev := range events {
			msgs = append(msgs, kafka.Message{Key: []byte(ev.ShipmentID), Value: ev.json()})
		}
	default:
		in := stdin
		if fs.NArg() > 0 && fs.Arg(0) != "-" {
			f, err := os.Open(fs.Arg(0))
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		if msgs, err = readLines(in); err != nil {
			return err
		}
	}
	if len(msgs) == 0 {
		return &usageError{"publish: nothing to publish"}
	}

	pub, err := kafka.NewPublisher(k)
	if err != nil {
		return err
	}
	defer pub.Close()
	if err := pub.Publish(ctx, *topic, msgs...); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %d records to %s\n", len(msgs), *topic)
	return nil
}

// readLines reads one record per non-empty line, keyed by the line's
// shipment_id when it has one (a line that is not JSON is sent unkeyed).
func readLines(r io.Reader) ([]kafka.Message, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	var msgs []kafka.Message
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var head struct {
			ShipmentID string `json:"shipment_id"`
		}
		_ = json.Unmarshal(line, &head)
		m := kafka.Message{Value: append([]byte(nil), line...)}
		if head.ShipmentID != "" {
			m.Key = []byte(head.ShipmentID)
		}
		msgs = append(msgs, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("publish: read input: %w", err)
	}
	return msgs, nil
}
