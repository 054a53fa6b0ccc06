package prometheus_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/harborlight/notification-worker/adapters/prometheus"
	"github.com/harborlight/notification-worker/ports"
)

// The files the operator deploys, relative to this package.
const (
	rulesFile      = "../../deploy/prometheus/rules.yaml"
	prometheusRule = "../../deploy/k8s/monitoring/prometheusrule.yaml"
	dashboardFile  = "../../deploy/grafana/notification-worker.json"
	dashboardTests = "../../deploy/grafana/dashboard_test.yaml"
	statefulSet    = "../../deploy/k8s/statefulset.yaml"
	runbookFile    = "../../docs/runbook.md"
	runbookURL     = "https://github.com/harborlight/notification-worker/blob/main/docs/runbook.md#"
)

// exported returns the name of every sample the worker's registry exports,
// a histogram's _bucket, _sum and _count included, with every labelled
// metric given a series (as a running worker's are).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, f := range gatherAll(t) {
		names[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[f.GetName()+s] = true
			}
		}
	}
	return names
}

// gatherAll returns every metric family the worker's registry exports,
// with every labelled metric given a series, as a running worker's are: a
// vector with no series is not gathered at all, so a new labelled metric
// that New does not export at 0 needs its series made here.
func gatherAll(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	m := prometheus.New()
	m.KnowTopic("shipment-events")
	m.KnowChannels(ports.ChannelSMS, ports.ChannelEmail)
	m.ConsumerLag("shipment-events", 0, 0)
	m.WatchBreaker(func() bool { return false })
	for _, ch := range []ports.Channel{ports.ChannelSMS, ports.ChannelEmail} {
		_, _ = m.InstrumentNotifier(ch, nopNotifier{}).Send(context.Background(), ports.Message{})
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	return families
}

type nopNotifier struct{}

func (nopNotifier) Send(context.Context, ports.Message) (ports.Receipt, error) {
	return ports.Receipt{}, nil
}

// metricName matches the metric names a query may use: the worker's own,
// the Go and process collectors' on its registry, and the cluster's series
// of the worker's container (clusterMetrics).
var metricName = regexp.MustCompile(`\b(?:notification_worker|process|go)_[a-z0-9_]+\b|\b(?:container_memory_working_set_bytes|kube_pod_container_resource_limits)\b`)

// clusterMetrics are the series the dashboard reads from the cluster's own
// exporters rather than from the worker: what the kubelet and the
// container's limit say of its memory.
var clusterMetrics = map[string]string{
	"container_memory_working_set_bytes": "cAdvisor",
	"kube_pod_container_resource_limits": "kube-state-metrics",
}

// labelLists matches the parts of a query that hold label names or
// matchers, not metric names.
var labelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\{[^}]*\}`)

// checkQuery fails t for a query naming a metric the worker does not
// export, or naming none of the worker's.
func checkQuery(t *testing.T, where, query string, names map[string]bool) {
	t.Helper()
	// Label names (in by (...), on (...), {...}) are not metrics.
	bare := labelLists.ReplaceAllString(query, "")
	found := metricName.FindAllString(bare, -1)
	if len(found) == 0 {
		t.Errorf("%s: the query names no metric of the worker's: %s", where, query)
	}
	for _, n := range found {
		if !names[n] {
			t.Errorf("%s: %s is not exported by the worker (a rename?): %s", where, n, query)
		}
	}
}

type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func mustRules(t *testing.T, path string) ruleGroups {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ruleGroups `yaml:",inline"`
		Kind       string     `yaml:"kind"`
		Spec       ruleGroups `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if doc.Kind == "PrometheusRule" {
		return doc.Spec
	}
	return doc.ruleGroups
}

// aggregatedByNamespaceJob matches an aggregation that keeps the labels
// locating the problem: by (namespace, job, ...).
var aggregatedByNamespaceJob = regexp.MustCompile(`\bby\s*\(\s*namespace\s*,\s*job\b`)

// jobMatcher matches a selector on the job label: the job is whatever the
// scrape configuration calls it (a Helm release, a ServiceMonitor's
// jobLabel), so a rule finds the worker by its own metrics instead.
var jobMatcher = regexp.MustCompile(`\bjob\s*(?:=|!=|=~|!~)`)

// Every alert names metrics the worker exports, is written as the
// kubernetes-mixin writes alerts (severity critical or warning, a summary
// and a description, a for:, an expression aggregated by namespace and
// job), selects no job by name, and links a section of the runbook that
// exists.
func TestAlertRules_MetricsAndRunbookLinks(t *testing.T) {
	names := exported(t)
	anchors := runbookAnchors(t)
	rules := mustRules(t, rulesFile)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			checkQuery(t, "alert "+r.Alert, r.Expr, names)
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.For == "" {
				t.Errorf("alert %s: no for:, so one bad scrape fires it", r.Alert)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if !aggregatedByNamespaceJob.MatchString(r.Expr) {
				t.Errorf("alert %s: the expression is not aggregated by (namespace, job, ...), so it cannot fire for one namespace: %s", r.Alert, r.Expr)
			}
			if jobMatcher.MatchString(r.Expr) {
				t.Errorf("alert %s: the expression selects a job by name, so a job named otherwise never fires it: %s", r.Alert, r.Expr)
			}
			link, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookURL)
			if !ok || !anchors[link] {
				t.Errorf("alert %s: runbook_url %q is not %s<a section of docs/runbook.md>", r.Alert, r.Annotations["runbook_url"], runbookURL)
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no alert", rulesFile)
	}
}

// prometheusRuleHint rewrites the PrometheusRule from the rules file.
const prometheusRuleHint = "go test ./adapters/prometheus -run TestAlertRules_PrometheusRuleIsRulesFile -update"

// The PrometheusRule is the rules file: its own head up to "spec:", then
// the rules file from "groups:" on, comments included, indented under spec.
// With -update it is rewritten so.
func TestAlertRules_PrometheusRuleIsRulesFile(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	crd, err := os.ReadFile(prometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(crd), "\nspec:\n")
	if !ok {
		t.Fatalf("%s: no spec: line", prometheusRule)
	}
	at := strings.Index(string(rules), "\ngroups:\n")
	if at < 0 {
		t.Fatalf("%s: no groups: line", rulesFile)
	}
	var want strings.Builder
	want.WriteString(head + "\nspec:\n")
	for _, line := range strings.SplitAfter(string(rules[at+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			want.WriteString("  ")
		}
		want.WriteString(line)
	}
	if want.String() == string(crd) {
		if !reflect.DeepEqual(mustRules(t, rulesFile), mustRules(t, prometheusRule)) {
			t.Errorf("%s: the groups read differently from %s's once indented", prometheusRule, rulesFile)
		}
		return
	}
	if *update {
		if err := os.WriteFile(prometheusRule, []byte(want.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s from %s", prometheusRule, rulesFile)
		return
	}
	t.Errorf("%s is not %s's groups under its spec; run\n\t%s", prometheusRule, rulesFile, prometheusRuleHint)
}

// dashboardSelector matches the selector every metric of a dashboard query
// carries: the namespace and the pods the dashboard's variables pick, and
// for the cluster's series of a pod (which has other containers, and a
// series for the pod as a whole) the worker's container too.
func dashboardSelector(container string) *regexp.Regexp {
	return regexp.MustCompile(`\b(?:notification_worker|process|go)_[a-z0-9_]+\{namespace="\$namespace", pod=~"\$pod"` +
		`|\b(?:container_memory_working_set_bytes|kube_pod_container_resource_limits)\{namespace="\$namespace", pod=~"\$pod", container="` + regexp.QuoteMeta(container) + `"`)
}

type dashboard struct {
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			AllValue string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func mustDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash dashboard
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return dash
}

// workerContainer returns the name of the worker's container in the
// StatefulSet.
func workerContainer(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(statefulSet)
	if err != nil {
		t.Fatal(err)
	}
	var sts struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Name string `yaml:"name"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &sts); err != nil {
		t.Fatalf("%s: %v", statefulSet, err)
	}
	if c := sts.Spec.Template.Spec.Containers; len(c) == 1 {
		return c[0].Name
	}
	t.Fatalf("%s: want one container", statefulSet)
	return ""
}

// Every query of the dashboard names metrics the worker exports (or the
// cluster's series of its container), each filtered by the namespace and
// pod variables (so two namespaces, or the pods of a rollout, are not
// mixed), "All" pods means the worker's pods, not every pod of the
// namespace, and every panel the runbook names (as **Title** panel) is on
// the dashboard.
func TestDashboard_QueriesAndRunbookPanels(t *testing.T) {
	dash := mustDashboard(t)
	variables := map[string]bool{}
	for _, v := range dash.Templating.List {
		variables[v.Name] = true
		if v.AllValue != "" {
			t.Errorf("%s: variable %s has allValue %q: \"All\" would select pods that are not the worker's", dashboardFile, v.Name, v.AllValue)
		}
	}
	for _, v := range []string{"datasource", "namespace", "pod"} {
		if !variables[v] {
			t.Errorf("%s has no %s variable", dashboardFile, v)
		}
	}
	names := exported(t)
	for n := range clusterMetrics {
		names[n] = true
	}
	selector := dashboardSelector(workerContainer(t))
	titles := map[string]bool{}
	for _, p := range dash.Panels {
		titles[p.Title] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			checkQuery(t, "panel "+p.Title, q.Expr, names)
			bare := labelLists.ReplaceAllStringFunc(q.Expr, func(m string) string {
				if strings.HasPrefix(m, "{") {
					return m // a selector: keep it, it is what is checked
				}
				return ""
			})
			if n, filtered := len(metricName.FindAllString(labelLists.ReplaceAllString(q.Expr, ""), -1)), len(selector.FindAllString(bare, -1)); n != filtered {
				t.Errorf("panel %q: %d of its %d metrics are not filtered by {namespace=\"$namespace\", pod=~\"$pod\"} (and the worker's container, for the cluster's series): %s", p.Title, n-filtered, n, q.Expr)
			}
		}
	}
	runbook, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile(`\*\*([^*]+)\*\*\s+panel`).FindAllStringSubmatch(string(runbook), -1)
	if len(named) == 0 {
		t.Errorf("%s names no dashboard panel (as **Title** panel)", runbookFile)
	}
	for _, m := range named {
		title := strings.Join(strings.Fields(m[1]), " ") // a title may wrap
		if !titles[title] {
			t.Errorf("%s refers to the panel %q, which %s does not have", runbookFile, title, dashboardFile)
		}
	}
}

// testedPanels are the panels each of whose queries promtool runs on
// series (dashboard_test.yaml), because what they show depends on more
// than a metric's name: which series a selector keeps, which values a
// comparison drops.
var testedPanels = []string{"Memory against the limit"}

// The promtool tests of the dashboard test its queries as they are: each
// expr there is a query of the dashboard with the variables given
// (namespace prod, every pod), and every query of testedPanels is tested.
func TestDashboard_PromtoolTestsAreTheQueries(t *testing.T) {
	b, err := os.ReadFile(dashboardTests)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Exprs []struct {
				Expr string `yaml:"expr"`
			} `yaml:"promql_expr_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatalf("%s: %v", dashboardTests, err)
	}
	tested := map[string]bool{}
	for _, c := range tests.Tests {
		for _, e := range c.Exprs {
			tested[e.Expr] = true
		}
	}
	given := strings.NewReplacer(`"$namespace"`, `"prod"`, `"$pod"`, `".*"`)
	queries := map[string]bool{}
	for _, p := range mustDashboard(t).Panels {
		for _, q := range p.Targets {
			expr := given.Replace(q.Expr)
			queries[expr] = true
			if slices.Contains(testedPanels, p.Title) && !tested[expr] {
				t.Errorf("panel %q: %s has no promql_expr_test of\n\t%s", p.Title, dashboardTests, expr)
			}
		}
	}
	for e := range tested {
		if !queries[e] {
			t.Errorf("%s tests a query the dashboard does not have (edited since?):\n\t%s", dashboardTests, e)
		}
	}
}

// runbookAnchors returns the anchors of docs/runbook.md's headings, as
// GitHub renders them: lower case, punctuation dropped, spaces as hyphens.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			anchors[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return anchors
}
