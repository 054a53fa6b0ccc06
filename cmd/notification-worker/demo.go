package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/harborlight/notification-worker/adapters/console"
	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/adapters/memory"
	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/ports"
)

// Demo sizes: 14 events fan out to 24 notifications, plus one poison record.
const (
	demoEvents  = 14
	demoTimeout = 2 * time.Minute
)

// runDemo replays the 2026-04-02 incident with no infrastructure: sample
// events go to an embedded broker, a worker sends each notification to the
// console, then the group's offsets are deleted and a new worker replays
// the partitions from offset 0, as the rebalance did. The in-memory store
// stands in for Redis, which outlives the restart. It fails if any
// notification was sent twice or any was never handled.
func runDemo(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{
		Level: cfg.LogLevel,
		// Keep the demo's output to what it shows: no timestamps, no
		// configuration dump.
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if (len(groups) == 0 && a.Key == slog.TimeKey) || (len(groups) > 0 && groups[0] == "config") {
				return slog.Attr{}
			}
			return a
		},
	}))

	if embeddedBroker == nil {
		return errNoEmbeddedBroker
	}
	k := kafka.LoadSettings(cfg.Settings())
	brokers, stop, err := embeddedBroker(k.Topic, k.DLQTopic)
	if err != nil {
		return err
	}
	defer stop()
	cfg = cfg.With("KAFKA_BROKERS", strings.Join(brokers, ","))
	// The demo's workers serve no probes: two of them run in turn, and the
	// default :8080 may be taken on a developer's machine.
	cfg.HTTPAddr = ""

	notifications, err := publishDemo(ctx, cfg, stdout)
	if err != nil {
		return err
	}

	store := memory.New(nil)
	sends := &countingNotifier{next: console.New(stdout), perKey: map[string]int{}}
	var sent, suppressed int
	for phase, title := range []string{
		"first delivery",
		"the consumer group restarts from offset 0, as on 2026-04-02",
	} {
		fmt.Fprintf(stdout, "== phase %d: %s\n", phase+1, title)
		if phase == 1 {
			if err := deleteGroup(ctx, cfg); err != nil {
				return err
			}
		}
		notifiers := map[ports.Channel]ports.Notifier{}
		for _, ch := range channelNames(channels) {
			notifiers[ch] = sends
		}
		metrics := prometheus.New()
		m := &Main{Config: cfg, Stdout: stdout, Deps: Deps{Logger: log, Store: store, Notifiers: notifiers, Metrics: metrics}}
		if err := runUntil(ctx, m, func() bool {
			c := countsOf(metrics)
			return c.sent+c.suppressed >= notifications && c.deadLettered >= 1
		}); err != nil {
			return fmt.Errorf("phase %d: %w", phase+1, err)
		}
		c := countsOf(metrics)
		fmt.Fprintf(stdout, "== phase %d: sent %d, duplicates suppressed %d, dead-lettered %d\n",
			phase+1, c.sent, c.suppressed, c.deadLettered)
		sent, suppressed = sent+c.sent, suppressed+c.suppressed
	}

	dup := sends.duplicates()
	fmt.Fprintf(stdout, "sent %d, duplicates suppressed %d, duplicate sends %d\n", sent, suppressed, dup)
	switch {
	case dup > 0:
		return fmt.Errorf("%d notifications were sent more than once", dup)
	case sent != notifications:
		return fmt.Errorf("sent %d notifications, want %d", sent, notifications)
	}
	return nil
}

// runUntil opens m, runs it until done reports true, then stops it the way
// SIGTERM would, so it commits what it handled.
func runUntil(ctx context.Context, m *Main, done func() bool) error {
	defer m.Close()
	if err := m.Open(ctx); err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- m.Run(runCtx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case err := <-errc:
			return fmt.Errorf("worker stopped early: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not every record was handled in time: %w", ctx.Err())
		case <-tick.C:
		}
	}
	stop()
	return <-errc
}

// deleteGroup deletes the group's committed offsets once its last member has
// left (the broker may need a moment to see the leave).
func deleteGroup(ctx context.Context, cfg config.Config) error {
	k := kafka.LoadSettings(cfg.Settings())
	var err error
	for range 50 {
		if err = kafka.DeleteGroup(ctx, k); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return err
}

// counts is what one phase's worker counted, as its /metrics shows it.
type counts struct{ sent, suppressed, deadLettered int }

func countsOf(metrics *prometheus.Metrics) counts {
	return counts{
		sent:         counted(metrics, "notifications_total", "outcome", string(ports.OutcomeSent)),
		suppressed:   counted(metrics, "notifications_total", "outcome", string(ports.OutcomeDuplicate)),
		deadLettered: counted(metrics, "records_dead_lettered_total", "", ""),
	}
}

// counted returns the sum of the counters named name (without the
// namespace) whose label is value; every one of them when label is "".
func counted(metrics *prometheus.Metrics, name, label, value string) int {
	families, err := metrics.Registry().Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != prometheus.Namespace+"_"+name {
			continue
		}
		for _, series := range f.GetMetric() {
			if label == "" || slices.ContainsFunc(series.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == label && l.GetValue() == value
			}) {
				total += series.GetCounter().GetValue()
			}
		}
	}
	return int(total)
}

// countingNotifier counts what reached the provider, per idempotency key:
// the demo's proof that nothing was sent twice.
type countingNotifier struct {
	next ports.Notifier

	mu     sync.Mutex
	perKey map[string]int
}

func (c *countingNotifier) Send(ctx context.Context, m ports.Message) (ports.Receipt, error) {
	r, err := c.next.Send(ctx, m)
	if err == nil {
		c.mu.Lock()
		c.perKey[m.IdempotencyKey]++
		c.mu.Unlock()
	}
	return r, err
}

func (c *countingNotifier) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.perKey {
		n += k - 1
	}
	return n
}

// publishDemo publishes the demo's sample events and one malformed record
// to cfg's topic, and returns how many notifications the events make.
func publishDemo(ctx context.Context, cfg config.Config, stdout io.Writer) (notifications int, err error) {
	events, notifications := sampleEvents(demoEvents)
	msgs := make([]kafka.Message, 0, len(events)+1)
	for _, ev := range events {
		msgs = append(msgs, kafka.Message{Key: []byte(ev.ShipmentID), Value: ev.json()})
	}
	msgs = append(msgs, kafka.Message{Key: []byte("SHP-broken"), Value: []byte(`{"type":"shipment.delivered","shipment_id":"SHP-broken"`)})
	k := kafka.LoadSettings(cfg.Settings())
	pub, err := kafka.NewPublisher(k)
	if err != nil {
		return 0, err
	}
	err = pub.Publish(ctx, k.Topic, msgs...)
	pub.Close()
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stdout, "== published %d shipment events (%d notifications) and 1 malformed record to %s\n",
		len(events), notifications, k.Topic)
	return notifications, nil
}
