package kafka

import (
	"github.com/IBM/sarama"

	"github.com/harborlight/notification-worker/ports"
)

// recordHeaders returns a record's headers as the handler sees them, in
// their order, nil entries left out; nil when there are none. The values
// are shared with msg, not copied: the handler may not modify them, and
// the dead letter built from msg carries the same bytes.
func recordHeaders(hs []*sarama.RecordHeader) []ports.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]ports.Header, 0, len(hs))
	for _, h := range hs {
		if h != nil {
			out = append(out, ports.Header{Key: string(h.Key), Value: h.Value})
		}
	}
	return out
}
