package main

import (
	"fmt"
	"io"
	"testing"

	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/internal/wait"
)

// The group member's client.id, as the broker reports it, is the pod's
// name by default, so broker logs and client quotas tell pods apart;
// KAFKA_CLIENT_ID replaces it.
func TestMain_KafkaClientID(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"DefaultsToThePodName", map[string]string{"HOSTNAME": "notification-worker-3"}, "notification-worker-3"},
		{"Set", map[string]string{"HOSTNAME": "notification-worker-3", "KAFKA_CLIENT_ID": "nw-blue"}, "nw-blue"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			topic, group := uniqueName("clientid"), uniqueName("group")
			emb := MustStartEmbedded(t, topic)
			env := map[string]string{"KAFKA_BROKERS": emb.Brokers()[0], "KAFKA_TOPIC": topic, "KAFKA_GROUP_ID": group, "HTTP_ADDR": "off"}
			for k, v := range tt.env {
				env[k] = v
			}
			m := &Main{Config: MustLoadConfig(t, env), Stdout: io.Discard}
			MustOpen(t, m)
			MustRun(t, m)

			sc := sarama.NewConfig()
			sc.Version = sarama.V2_4_0_0
			admin, err := sarama.NewClusterAdmin(emb.Brokers(), sc)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			wait.For(t, waitWithin, "the group's member", func() (bool, string) {
				groups, err := admin.DescribeConsumerGroups([]string{group})
				if err != nil || len(groups) != 1 || len(groups[0].Members) != 1 {
					return false, fmt.Sprintf("%v, %+v", err, groups)
				}
				for _, mem := range groups[0].Members {
					if mem.ClientId != tt.want {
						t.Fatalf("member client id %q, want %q", mem.ClientId, tt.want)
					}
				}
				return true, ""
			})
		})
	}
}
