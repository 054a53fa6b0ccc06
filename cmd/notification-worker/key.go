package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// runKey prints, for each event_id in args, the Redis keys of its
// notifications on every channel: the compact and the readable key, under
// the prefixes cfg configures. It reads no Redis: an operator passes the key
// to redis-cli (docs/runbook.md says how to read the value).
func runKey(cfg config.Config, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return &usageError{"key: want at least one event_id"}
	}
	rcfg, err := storeConfig(cfg)
	if err != nil {
		return err
	}
	both := "only these"
	if rcfg.ReadBoth {
		both = "both"
	}
	fmt.Fprintf(stdout, "# IDEMPOTENCY_KEY_FORMAT=%s: the worker writes %s keys and reads %s\n", rcfg.Format, rcfg.Format, both)
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT_ID\tCHANNEL\tCOMPACT_KEY\tREADABLE_KEY")
	for _, id := range args {
		for _, ch := range []ports.Channel{ports.ChannelSMS, ports.ChannelEmail} {
			k := domain.NotificationKey(id, ch)
			compact, readable := rcfg.Key(k), rcfg.OtherKey(k)
			if rcfg.Format == redis.Readable {
				compact, readable = readable, compact
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", id, ch, compact, readable)
		}
	}
	return w.Flush()
}
