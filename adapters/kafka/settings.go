package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harborlight/notification-worker/ports"
)

// Provider is Kafka as the worker's event source (EVENT_SOURCE=kafka),
// configured by KAFKA_BROKERS. Its settings are the consumer's, the dead
// letter producer's and the publisher's; the record policy's and the
// worker's budgets (MAX_IN_FLIGHT, MAX_BUFFERED_BYTES, RETRY_*) are the
// worker's. The worker builds the consumer itself, from LoadSettings.
var Provider = ports.Provider{
	Name:     "kafka",
	Variable: ports.SourceVariable,
	Settings: []ports.Setting{
		{Name: "KAFKA_BROKERS", Meaning: "Comma-separated `host:port` list of Kafka brokers; required with `EVENT_SOURCE=kafka`, empty with `EVENT_SOURCE=embedded` (which takes neither TLS nor SASL)."},
		{Name: "KAFKA_TOPIC", Default: "shipment-events", Meaning: "Topic the shipment events are consumed from."},
		{Name: "KAFKA_GROUP_ID", Default: "notification-worker", Meaning: "Consumer group; every replica of the worker must share it."},
		{Name: "KAFKA_CLIENT_ID", Default: "${HOSTNAME}", Meaning: "Kafka `client.id` of every connection, so that broker logs, metrics and client quotas tell the pods apart. Default: the pod's name (`HOSTNAME`)."},
		{Name: "HOSTNAME", Default: "notification-worker", Meaning: "Set by Kubernetes to the pod's name (by Docker to the container id); not for an operator to set. Read only as the default of `KAFKA_CLIENT_ID`."},
		{Name: "KAFKA_DLQ_TOPIC", Default: "${KAFKA_TOPIC}.dlq", Meaning: "Dead letter topic for poison records and records out of retries. Must differ from `KAFKA_TOPIC`."},
		{Name: "KAFKA_REBALANCE_STRATEGY", Default: StrategyCooperativeSticky, Meaning: "`cooperative-sticky`: a rebalance moves only the partitions that change hands, the others keep being consumed. `range`: eager, every rebalance stops every partition. `cooperative-sticky,range`: the first step of moving a group from `range` (docs/runbook.md); members with `range` and with `cooperative-sticky` cannot share a group."},
		{Name: "KAFKA_GROUP_INSTANCE_ID", Meaning: "Static group membership: an id unique in the group and stable across restarts of one replica (in Kubernetes, a StatefulSet's pod name). A restart back within `KAFKA_SESSION_TIMEOUT` gets its partitions back with no rebalance; the member does not leave the group at shutdown. Empty: a dynamic member, which leaves at shutdown."},
		{Name: "KAFKA_SESSION_TIMEOUT", Default: "10s", Meaning: "How long the group waits for a silent member before giving its partitions away (6s to 30m, within the broker's group session bounds). With `KAFKA_GROUP_INSTANCE_ID` it is also the longest a restart may take without a rebalance, and how long a crashed member's partitions stand still."},
		{Name: "KAFKA_TLS", Default: "false", Meaning: "Connect to the brokers over TLS."},
		{Name: "KAFKA_TLS_CA_FILE", Meaning: "PEM file of the CA that signed the brokers' certificates, read at start (a file that cannot be read or holds no certificate is refused with the other variables). Empty: the system roots. Needs `KAFKA_TLS=true`."},
		{Name: "KAFKA_SASL_MECHANISM", Meaning: "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`. Empty: no SASL. Needs `KAFKA_SASL_USERNAME` and `KAFKA_SASL_PASSWORD`."},
		{Name: "KAFKA_SASL_USERNAME", Meaning: "SASL user name."},
		{Name: "KAFKA_SASL_PASSWORD", Meaning: "SASL password.", Secret: true},
	},
	Load: func(s ports.Settings) bool {
		LoadSettings(s)
		return s.Set("KAFKA_BROKERS")
	},
}

// LoadSettings reads the Provider's settings through s into a Config, the
// one place their rules are written: each variable is checked, and a bad
// one reported with s.Fail (and left zero); so is a combination that
// cannot take effect (TLS or SASL without brokers, a CA file without TLS,
// half a SASL setting). It reads KAFKA_TLS_CA_FILE into Config.TLS, and
// sets no other field: the worker's.
func LoadSettings(s ports.Settings) Config {
	cfg := Config{
		Brokers:           s.HostPorts("KAFKA_BROKERS"),
		Topic:             topic(s, "KAFKA_TOPIC"),
		GroupID:           s.String("KAFKA_GROUP_ID"),
		ClientID:          s.String("KAFKA_CLIENT_ID"),
		RebalanceStrategy: oneOfFold(s, "KAFKA_REBALANCE_STRATEGY", rebalanceStrategies),
		SessionTimeout:    s.Duration("KAFKA_SESSION_TIMEOUT", 6*time.Second),
		SASLMechanism:     oneOfFold(s, "KAFKA_SASL_MECHANISM", saslMechanisms),
		SASLUsername:      s.String("KAFKA_SASL_USERNAME"),
		SASLPassword:      s.String("KAFKA_SASL_PASSWORD"),
	}
	// The DLQ default derives from KAFKA_TOPIC; when that is bad, the one
	// problem is reported once, against the variable the operator set.
	if cfg.Topic != "" || s.Set("KAFKA_DLQ_TOPIC") {
		cfg.DLQTopic = topic(s, "KAFKA_DLQ_TOPIC")
	}
	if CheckDLQTopic(cfg.Topic, cfg.DLQTopic) != nil {
		s.Fail("KAFKA_DLQ_TOPIC", "must differ from KAFKA_TOPIC, or dead-lettered records come straight back")
	}
	// A group.instance.id follows a topic name's rules.
	if cfg.GroupInstanceID = s.String("KAFKA_GROUP_INSTANCE_ID"); cfg.GroupInstanceID != "" && CheckTopicName(cfg.GroupInstanceID) != nil {
		s.Fail("KAFKA_GROUP_INSTANCE_ID", "want up to 249 letters, digits, '.', '_' or '-' (not \".\" or \"..\"), unique in the group")
		cfg.GroupInstanceID = ""
	}
	if cfg.SessionTimeout > 30*time.Minute {
		s.Fail("KAFKA_SESSION_TIMEOUT", "must be at most 30m (the broker's group.max.session.timeout.ms default)")
	}
	cfg.TLS = security(s)
	return cfg
}

// security reads KAFKA_TLS and KAFKA_TLS_CA_FILE into the TLS settings,
// nil for plaintext, and rejects TLS and SASL settings that cannot take
// effect: on the embedded broker (no KAFKA_BROKERS, which speaks neither),
// without their counterparts, or a CA file while TLS is off. Each is a
// deployment that believes it is secured and is not.
func security(s ports.Settings) *tls.Config {
	tlsOn := s.Bool("KAFKA_TLS") // false, and reported, when no boolean
	_, err := strconv.ParseBool(s.String("KAFKA_TLS"))
	tlsOff := err == nil && !tlsOn
	sasl := []string{"KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"}
	if !s.Set("KAFKA_BROKERS") {
		if tlsOn {
			s.Fail("KAFKA_TLS", "true, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset KAFKA_TLS")
		}
		// KAFKA_TLS=false configures nothing, so it is left alone.
		for _, name := range append([]string{"KAFKA_TLS_CA_FILE"}, sasl...) {
			if s.Set(name) {
				s.Fail(name, "set, but KAFKA_BROKERS is empty and the embedded broker takes neither TLS nor SASL; set KAFKA_BROKERS or unset "+name)
			}
		}
		return nil
	}
	// A mechanism takes both credentials; credentials without one would
	// be ignored.
	for _, name := range sasl[1:] {
		if s.Set(sasl[0]) && !s.Set(name) {
			s.Fail(name, "required when KAFKA_SASL_MECHANISM is set")
		}
	}
	if given := slices.IndexFunc(sasl[1:], s.Set); !s.Set(sasl[0]) && given >= 0 {
		s.Fail(sasl[0], "required when "+sasl[1+given]+" is set")
	}
	if s.Set("KAFKA_TLS_CA_FILE") && tlsOff {
		s.Fail("KAFKA_TLS_CA_FILE", "set, but KAFKA_TLS is false; set KAFKA_TLS=true to use it")
	}
	if !tlsOn {
		return nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := s.String("KAFKA_TLS_CA_FILE"); f != "" {
		pem, err := os.ReadFile(f)
		t.RootCAs = x509.NewCertPool()
		if err == nil && !t.RootCAs.AppendCertsFromPEM(pem) {
			err = errors.New("holds no PEM certificate")
		}
		if err != nil {
			s.Fail("KAFKA_TLS_CA_FILE", "want a readable PEM file of the CA: "+err.Error())
		}
	}
	return t
}

// oneOfFold returns the one of allowed that name's value is, letter case
// aside; "" when unset.
func oneOfFold(s ports.Settings, name string, allowed []string) string {
	v := s.String(name)
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return a
		}
	}
	if v != "" {
		s.Fail(name, "want one of "+strings.Join(allowed, ", "))
	}
	return ""
}

func topic(s ports.Settings, name string) string {
	v := s.String(name)
	if err := CheckTopicName(v); err != nil {
		s.Fail(name, "want a Kafka topic name: it "+err.Error())
		return ""
	}
	return v
}
