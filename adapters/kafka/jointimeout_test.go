package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/adapters/kafka"
)

// The consumer's read timeout outlasts the longest the broker may hold a
// JoinGroup answer, its rebalance timeout, by the margin, whatever
// ShutdownTimeout makes that rebalance timeout.
func TestConsumerConfig_ReadTimeoutOutlastsRebalanceTimeout(t *testing.T) {
	for _, shutdown := range []time.Duration{0, time.Second, 30 * time.Second, 45 * time.Second, 10 * time.Minute} {
		cfg := kafka.Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", GroupID: "g", ShutdownTimeout: shutdown}
		sc := kafka.ConsumerSaramaConfig(cfg)
		rebalance, read := sc.Consumer.Group.Rebalance.Timeout, sc.Net.ReadTimeout
		if read < rebalance+kafka.JoinReadMargin {
			t.Errorf("ShutdownTimeout %v: Net.ReadTimeout %v, rebalance timeout %v: want the read timeout at least %v longer",
				shutdown, read, rebalance, kafka.JoinReadMargin)
		}
		if err := kafka.CheckJoinReadTimeout(sc); err != nil {
			t.Errorf("ShutdownTimeout %v: %v", shutdown, err)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("ShutdownTimeout %v: Sarama refuses the config: %v", shutdown, err)
		}
	}
}

// The rule refuses a read timeout that a held JoinGroup answer outlasts:
// Sarama's own defaults (30 s against a 60 s rebalance timeout) among
// them, and a read timeout equal to the rebalance timeout.
func TestCheckJoinReadTimeout_RefusesShortReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		read, rebalance time.Duration
		ok              bool
	}{
		{30 * time.Second, 60 * time.Second, false}, // Sarama's defaults
		{60 * time.Second, 60 * time.Second, false},
		{60*time.Second + kafka.JoinReadMargin - time.Millisecond, 60 * time.Second, false},
		{60*time.Second + kafka.JoinReadMargin, 60 * time.Second, true},
		{10 * time.Minute, 90 * time.Second, true},
	} {
		sc := sarama.NewConfig()
		sc.Net.ReadTimeout, sc.Consumer.Group.Rebalance.Timeout = tc.read, tc.rebalance
		err := kafka.CheckJoinReadTimeout(sc)
		switch {
		case tc.ok && err != nil:
			t.Errorf("read %v, rebalance %v: %v, want accepted", tc.read, tc.rebalance, err)
		case !tc.ok && err == nil:
			t.Errorf("read %v, rebalance %v: accepted, want refused", tc.read, tc.rebalance)
		case !tc.ok && !(strings.Contains(err.Error(), tc.read.String()) && strings.Contains(err.Error(), tc.rebalance.String())):
			t.Errorf("read %v, rebalance %v: %q does not name both timeouts", tc.read, tc.rebalance, err)
		}
	}
}
