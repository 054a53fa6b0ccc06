package prometheus_test

import (
	"flag"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/internal/docsection"
)

var update = flag.Bool("update", false, "rewrite the metric list of ../../docs/runbook.md from the registry")

const (
	metricsBegin      = "<!-- metrics:begin -->"
	metricsEnd        = "<!-- metrics:end -->"
	metricsUpdateHint = "go test ./adapters/prometheus -update"
)

// renderMetricList renders the worker's own metrics (those prefixed
// prometheus.Namespace, not the Go and process collectors') as the
// runbook's Markdown table: name, type, label names and help, in the order
// Gather returns them (sorted by name).
func renderMetricList(families []*dto.MetricFamily) string {
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	var b strings.Builder
	b.WriteString("<!-- Generated from the metrics registry (adapters/prometheus): change a metric's help there, then run `" + metricsUpdateHint + "`. -->\n\n")
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), prometheus.Namespace+"_") {
			continue
		}
		var labels []string
		for _, series := range f.GetMetric() {
			for _, l := range series.GetLabel() {
				if name := "`" + l.GetName() + "`"; !slices.Contains(labels, name) {
					labels = append(labels, name)
				}
			}
		}
		typ := strings.ToLower(f.GetType().String())
		b.WriteString("| `" + f.GetName() + "` | " + typ + " | " + strings.Join(labels, ", ") + " | " + cell(f.GetHelp()) + " |\n")
	}
	return b.String()
}

// TestRunbookMetricList fails when the runbook's metric list (between its
// metrics markers) is not what the registry exports, so that the list an
// operator reads cannot drift from /metrics: a metric added, renamed or
// removed, a label or a help text changed. With -update it rewrites that
// section, and only it.
func TestRunbookMetricList(t *testing.T) {
	docsection.Section{
		Path: runbookFile, Begin: metricsBegin, End: metricsEnd,
		What: "the metric list", From: "what the registry exports", Hint: metricsUpdateHint,
	}.Check(t, renderMetricList(gatherAll(t)), *update)
}
