package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/harborlight/notification-worker/adapters/redis"
	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/domain"
	"github.com/harborlight/notification-worker/ports"
)

// keyTimeout bounds key --redis: connecting, and reading every key.
const keyTimeout = 30 * time.Second

// runKey prints, for each event_id in args, the Redis keys of its
// notifications on every channel of the worker (channels): the compact and the readable key, under
// the prefixes the environment configures. With --redis it also reads them
// from the Redis the environment names (REDIS_URL) and decodes what each
// holds. An event_id the worker would refuse is refused here too.
func runKey(ctx context.Context, cio cmdIO, args []string) error {
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	read := fs.Bool("redis", false, "read each key from REDIS_URL and decode what it holds: a sent record's time, fingerprint and provider id, or a claim's token and lease")
	if err := parseFlags(fs, "key [--redis] EVENT_ID...", args, cio.stdout); err != nil {
		return err
	}
	ids := fs.Args()
	if len(ids) == 0 {
		return &usageError{"key: want at least one event_id"}
	}
	var bad []error
	for _, id := range ids {
		if err := domain.CheckEventID(id); err != nil {
			bad = append(bad, err)
		}
	}
	if len(bad) > 0 {
		return &usageError{"key: " + errors.Join(bad...).Error()}
	}
	cfg, err := config.Load(cio.lookup)
	if err != nil {
		return err
	}
	rcfg := storeConfig(cfg)
	if *read {
		return readKeys(ctx, rcfg, ids, cio.stdout)
	}
	both := "only these"
	if rcfg.ReadBoth {
		both = "both"
	}
	fmt.Fprintf(cio.stdout, "# IDEMPOTENCY_KEY_FORMAT=%s: the worker writes %s keys and reads %s\n", rcfg.Format, rcfg.Format, both)
	w := tabwriter.NewWriter(cio.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT_ID\tCHANNEL\tCOMPACT_KEY\tREADABLE_KEY")
	for _, id := range ids {
		for _, ch := range channelNames(channels) {
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

// readKeys prints what Redis holds under every key of ids' notifications,
// one line a key, decoded. It needs REDIS_URL.
func readKeys(ctx context.Context, rcfg redis.Config, ids []string, stdout io.Writer) error {
	if rcfg.URL == "" {
		return &config.Error{Problems: []config.Problem{{Var: "REDIS_URL", Reason: "required with key --redis"}}, LogFormat: "text"}
	}
	ctx, cancel := context.WithTimeout(ctx, keyTimeout)
	defer cancel()
	rs, err := redis.New(rcfg)
	if err != nil {
		return err
	}
	defer rs.Close()
	now := time.Now()
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "EVENT_ID\tCHANNEL\tFORMAT\tKEY\tTTL\tHOLDS")
	for _, id := range ids {
		for _, ch := range channelNames(channels) {
			found, err := rs.Inspect(ctx, domain.NotificationKey(id, ch))
			if err != nil {
				return err
			}
			for _, f := range found {
				ttl := "-"
				switch {
				case f.Exists && f.TTL >= 0:
					ttl = f.TTL.Round(time.Second).String()
				case f.Exists:
					ttl = "none"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", id, ch, f.Format, f.Key, ttl, describe(f, now))
			}
		}
	}
	return w.Flush()
}

// describe says what f holds, as the worker reads it.
func describe(f redis.Found, now time.Time) string {
	c := f.Claim
	switch {
	case !f.Exists:
		return "nothing"
	case !f.Decoded:
		return fmt.Sprintf("a value no worker writes: %.64q", f.Raw)
	case c.State == ports.AlreadySent:
		r := c.Receipt
		s := "sent at " + r.SentAt.UTC().Format(time.RFC3339)
		if r.Fingerprint != "" {
			s += ", fingerprint " + r.Fingerprint
		} else {
			s += ", no fingerprint"
		}
		if r.ProviderID != "" {
			s += ", provider id " + r.ProviderID
		}
		return s
	}
	l := c.Lease
	s := "claim, token " + l.Token
	if !l.Passed(now) {
		return fmt.Sprintf("%s, leased from %s until %s (live)", s, l.Start.UTC().Format(time.RFC3339), l.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s, leased from %s until %s (expired: abandoned, the next claim takes it over)", s, l.Start.UTC().Format(time.RFC3339), l.Until.UTC().Format(time.RFC3339))
}

// parseFlags parses args into fs, flags before, between or after the
// other arguments (key ID --redis), which fs.Args then returns in order;
// those after "--" are never flags. On -h, -help or --help it prints the
// command's synopsis and flags to stdout and returns flag.ErrHelp; a bad
// flag is a *usageError.
func parseFlags(fs *flag.FlagSet, synopsis string, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: notification-worker %s\n", synopsis)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return flag.ErrHelp
		}
		if err != nil {
			return &usageError{fs.Name() + ": " + err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if stop := len(args) - len(rest) - 1; stop >= 0 && args[stop] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Parsing "--" alone sets no flag and leaves fs.Args the positional.
	return fs.Parse(append([]string{"--"}, positional...))
}
