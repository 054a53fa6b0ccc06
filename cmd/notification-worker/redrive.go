package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/harborlight/notification-worker/adapters/kafka"
	"github.com/harborlight/notification-worker/config"
)

// redriveProgressEvery is how many dead letters pass between two progress
// lines when stderr is not a terminal (on a terminal one line is redrawn).
const redriveProgressEvery = kafka.DefaultRedriveBatch

// maxReasonShown is how much of a reason the summary prints.
const maxReasonShown = 100

const redriveUsage = `redrive [flags]

Republishes the dead letters on KAFKA_DLQ_TOPIC to the topic each came from
(KAFKA_TOPIC when a dead letter does not name one), with its key, headers and
original timestamp. Each record is redriven at most once, whatever the flags
of this run and of earlier ones: after its batch is written, a marker for it
goes into the dead letter topic (header dlq.redriven), and every run passes
over the dead letters a marker names. A plain run redrives every dead letter
not redriven yet; -reason, -since and -from only narrow one run, and what
they leave waits for a later one. It reads up to the end each partition had
when the run began. Run one at a time. Kafka is reached as the worker
reaches it (KAFKA_BROKERS, KAFKA_TLS*, KAFKA_SASL_*).

Exit status: 0 done; 1 failed, or found dead letters whose record is gone
from its topic (marked so: later runs pass them over); 2 bad flags or
configuration. After a failure, rerun it: what was marked is not redriven
again, and a batch written but not marked yet is written again (the
idempotency store makes those copies send nothing).

flags:`

// runRedrive is the redrive command (see redriveUsage): the flags are
// checked here, the Kafka work is kafka.Redrive's. Progress goes to stderr,
// the summary to stdout.
func runRedrive(ctx context.Context, cio cmdIO, args []string) error {
	stdout, stderr := cio.stdout, cio.stderr
	fs := flag.NewFlagSet("redrive", flag.ContinueOnError)
	since := fs.String("since", "", "read only the dead letters written at or after this time: RFC 3339 (2026-04-02T09:00:00Z) or a duration before now (6h)")
	from := fs.String("from", "", "read only these partitions, from these offsets, as partition:offset,...")
	reason := fs.String("reason", "", "redrive only dead letters of this kind: "+strings.Join(kafka.RedriveKinds, ", "))
	dryRun := fs.Bool("dry-run", false, "count and print what would be redriven, by kind and reason; write nothing")
	if err := parseFlags(fs, redriveUsage, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("redrive: unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := config.Load(cio.lookup)
	if err != nil {
		return err
	}

	rcfg, err := redriveConfig(cfg, *since, *from, *reason, time.Now())
	if err != nil {
		return err
	}
	rcfg.DryRun = *dryRun
	rcfg.Progress = progressPrinter(stderr, isTerminal(stderr), *dryRun)

	res, err := kafka.Redrive(ctx, rcfg)
	if rcfg.Progress != nil && isTerminal(stderr) {
		fmt.Fprintln(stderr)
	}
	if errors.Is(err, kafka.ErrInvalidConfig) {
		return &usageError{"redrive: " + err.Error()}
	}
	// Also after a failure: what was redriven before it is marked.
	if res.Partitions != nil {
		printRedrive(stdout, rcfg, res)
	}
	return err
}

// redriveConfig checks the flags and the configuration together, naming
// every problem at once.
func redriveConfig(cfg config.Config, since, from, reason string, now time.Time) (kafka.RedriveConfig, error) {
	k := kafka.LoadSettings(cfg.Settings())
	var bad []string
	if len(k.Brokers) == 0 {
		bad = append(bad, "KAFKA_BROKERS is empty: there is no dead letter topic to read")
	}
	rcfg := kafka.RedriveConfig{
		Config: k,
		Kind:   reason,
	}
	rcfg.RetryInitialBackoff, rcfg.RetryMaxBackoff = cfg.RetryInitialBackoff, cfg.RetryMaxBackoff
	if reason != "" && !slices.Contains(kafka.RedriveKinds, reason) {
		bad = append(bad, fmt.Sprintf("-reason %q is not one of %s", reason, strings.Join(kafka.RedriveKinds, ", ")))
	}
	if since != "" && from != "" {
		bad = append(bad, "-since and -from cannot both be given")
	}
	if since != "" {
		t, err := parseSince(since, now)
		if err != nil {
			bad = append(bad, err.Error())
		}
		rcfg.Since = t
	}
	if from != "" {
		offsets, err := parseFrom(from)
		if err != nil {
			bad = append(bad, err.Error())
		}
		rcfg.From = offsets
	}
	if len(bad) > 0 {
		return kafka.RedriveConfig{}, &usageError{"redrive: " + strings.Join(bad, "; ")}
	}
	return rcfg, nil
}

// parseSince reads -since: an RFC 3339 time, or a positive duration
// before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("-since %q is neither an RFC 3339 time nor a positive duration", s)
	}
	return now.Add(-d), nil
}

// parseFrom reads -from: partition:offset pairs, comma-separated, each
// partition once.
func parseFrom(s string) (map[int32]int64, error) {
	out := map[int32]int64{}
	for _, pair := range strings.Split(s, ",") {
		ps, offs, ok := strings.Cut(strings.TrimSpace(pair), ":")
		p, perr := strconv.ParseInt(ps, 10, 32)
		off, oerr := strconv.ParseInt(offs, 10, 64)
		if !ok || perr != nil || oerr != nil || p < 0 || off < 0 {
			return nil, fmt.Errorf("-from %q: %q is not partition:offset", s, pair)
		}
		if _, dup := out[int32(p)]; dup {
			return nil, fmt.Errorf("-from %q: partition %d is given twice", s, p)
		}
		out[int32(p)] = off
	}
	return out, nil
}

// progressPrinter writes progress to w: on a terminal one line redrawn in
// place, otherwise a line every redriveProgressEvery dead letters and one
// as each partition ends.
func progressPrinter(w io.Writer, terminal, dryRun bool) func(kafka.RedriveProgress) {
	last, verb := 0, "redriven"
	if dryRun {
		verb = "to redrive"
	}
	return func(p kafka.RedriveProgress) {
		line := fmt.Sprintf("redrive: partition %d at offset %d of %d; %d dead letters read, %d %s",
			p.Partition, p.Next, p.End, p.Read, p.Redriven, verb)
		if terminal {
			fmt.Fprintf(w, "\r\033[K%s", line)
			return
		}
		if p.Read-last >= redriveProgressEvery || p.Next >= p.End {
			last = p.Read
			fmt.Fprintln(w, line)
		}
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printRedrive writes the summary of a run, complete or not.
func printRedrive(w io.Writer, cfg kafka.RedriveConfig, res kafka.RedriveResult) {
	verb := "redriven"
	if cfg.DryRun {
		verb = "would be redriven (dry run: nothing written)"
	}
	var ranges []string
	for _, p := range res.Partitions {
		ranges = append(ranges, fmt.Sprintf("%d:%d-%d", p.Partition, p.Start, p.End))
	}
	fmt.Fprintf(w, "%s, partition:offsets %s\n", cfg.DLQTopic, strings.Join(ranges, " "))
	fmt.Fprintf(w, "%d dead letters read, %d %s", res.Read, res.Redriven, verb)
	if res.PassedOver > 0 {
		fmt.Fprintf(w, ", %d of other kinds passed over", res.PassedOver)
	}
	if res.AlreadyRedriven > 0 {
		fmt.Fprintf(w, ", %d already redriven passed over", res.AlreadyRedriven)
	}
	if res.Gone > 0 {
		fmt.Fprintf(w, ", %d that cannot be redriven (value dropped, original record gone from its topic)", res.Gone)
	}
	if res.FromSource > 0 {
		fmt.Fprintf(w, ", %d of them read from their original topic (value dropped from the dead letter)", res.FromSource)
	}
	fmt.Fprintln(w)
	if len(res.ByReason) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNT\tKIND\tREASON")
	for _, rc := range res.ByReason {
		reason := strings.ReplaceAll(rc.Reason, "\n", " ")
		if len(reason) > maxReasonShown {
			reason = strings.ToValidUTF8(reason[:maxReasonShown], "") + "..."
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", rc.Count, rc.Kind, reason)
	}
	_ = tw.Flush()
}
