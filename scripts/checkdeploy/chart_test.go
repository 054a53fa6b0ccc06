package main

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The deploy/ folders, relative to this package.
const (
	chartDir      = "../../deploy/helm/notification-worker"
	kustomizeBase = "../../deploy/k8s"
	kustomizeMon  = "../../deploy/k8s/monitoring"
	kedaExample   = "../../deploy/k8s/keda-scaledobject.yaml"
)

// helmOnly are the labels and annotations only Helm adds: its bookkeeping
// labels (which also keep two releases of one namespace apart), and the
// pod template's checksum of the ConfigMap, which rolls the pods when the
// settings change (kustomize's users run `kubectl rollout restart`).
var helmOnly = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart", "checksum/config"}

// comparable returns o without what only Helm adds, and with each
// container's env in name order (none refers to another, so their order
// carries nothing).
func comparable(o any) any {
	switch x := o.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, v := range x {
			if slices.Contains(helmOnly, k) {
				continue
			}
			v = comparable(v)
			if m, ok := v.(map[string]any); ok && len(m) == 0 && k == "annotations" {
				continue
			}
			out[k] = v
		}
		if env, ok := out["env"].([]any); ok {
			env = slices.Clone(env)
			slices.SortFunc(env, func(a, b any) int {
				return strings.Compare(fmt.Sprint(a.(map[string]any)["name"]), fmt.Sprint(b.(map[string]any)["name"]))
			})
			out["env"] = env
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = comparable(v)
		}
		return out
	}
	return o
}

// byKindName indexes objs as "Kind name".
func byKindName(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		out[fmt.Sprintf("%s %v", o["kind"], mapAt(o, "metadata")["name"])] = comparable(o).(map[string]any)
	}
	return out
}

// differences lists where a and b differ, by path.
func differences(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(mergeKeys(am, bm))) {
			out = append(out, differences(path+"."+k, am[k], bm[k])...)
		}
		return out
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		var out []string
		for i := range as {
			out = append(out, differences(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: chart %v, kustomize %v", path, a, b)}
}

func mergeKeys(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// wantSameObjects fails t unless chart and kustomize hold the same objects,
// naming each difference.
func wantSameObjects(t *testing.T, chart, kustomize []object) {
	t.Helper()
	c, k := byKindName(chart), byKindName(kustomize)
	for _, name := range slices.Sorted(maps.Keys(mergeKeys(anyMap(c), anyMap(k)))) {
		switch co, ko := c[name], k[name]; {
		case co == nil:
			t.Errorf("%s: kustomize builds it, the chart does not render it", name)
		case ko == nil:
			t.Errorf("%s: the chart renders it, kustomize does not build it", name)
		default:
			for _, d := range differences(name, co, ko) {
				t.Error(d)
			}
		}
	}
}

func anyMap(m map[string]object) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mustRender(t *testing.T, values map[string]any) []object {
	t.Helper()
	objs, err := renderChart(chartDir, values)
	if err != nil {
		t.Fatalf("render %s: %v", chartDir, err)
	}
	return objs
}

func mustBuild(t *testing.T, dir string) []object {
	t.Helper()
	objs, err := buildKustomization(dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	return objs
}

// kinds returns the objects of objs whose kind is one of kinds.
func kinds(objs []object, kinds ...string) []object {
	var out []object
	for _, o := range objs {
		if slices.Contains(kinds, fmt.Sprint(o["kind"])) {
			out = append(out, o)
		}
	}
	return out
}

// The chart at its defaults renders the objects the Kustomize base builds,
// but for what only Helm adds.
func TestChart_DefaultsAreTheKustomizeBase(t *testing.T) {
	wantSameObjects(t, mustRender(t, nil), mustBuild(t, kustomizeBase))
}

// With its monitoring toggles on, the chart adds the objects of
// deploy/k8s/monitoring: the same ServiceMonitor, and the same rules.
func TestChart_MonitoringIsTheKustomizeMonitoring(t *testing.T) {
	objs := mustRender(t, map[string]any{
		"serviceMonitor": map[string]any{"enabled": true},
		"prometheusRule": map[string]any{"enabled": true},
	})
	wantSameObjects(t, kinds(objs, "ServiceMonitor", "PrometheusRule"), mustBuild(t, kustomizeMon))
}

// With keda.enabled, the chart renders the ScaledObject that
// deploy/k8s/keda-scaledobject.yaml shows (commented out), on the brokers,
// group and topic the worker is given, and the StatefulSet leaves its
// replicas to KEDA.
func TestChart_KEDAIsTheKustomizeExample(t *testing.T) {
	b, err := os.ReadFile(kedaExample)
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(b), "\n# apiVersion:")
	if !ok {
		t.Fatalf("%s: no commented apiVersion: line", kedaExample)
	}
	var uncommented strings.Builder
	for _, line := range strings.SplitAfter("# apiVersion:"+example, "\n") {
		line = strings.TrimPrefix(line, "#")
		uncommented.WriteString(strings.TrimPrefix(line, " "))
	}
	want, err := decodeAll([]byte(uncommented.String()))
	if err != nil {
		t.Fatalf("%s, uncommented: %v", kedaExample, err)
	}
	objs := mustRender(t, map[string]any{"keda": map[string]any{"enabled": true}})
	wantSameObjects(t, kinds(objs, "ScaledObject"), want)
	for _, sts := range kinds(objs, "StatefulSet") {
		if r, ok := mapAt(sts, "spec")["replicas"]; ok {
			t.Errorf("with keda.enabled the StatefulSet sets replicas: %v; KEDA owns them, and every upgrade would reset them", r)
		}
	}
}

// The chart holds no secret: it renders no Secret, and its values schema
// refuses a secret setting in env, as it refuses a misspelt one, naming it.
func TestChart_SecretsByReferenceOnly(t *testing.T) {
	if s := kinds(mustRender(t, nil), "Secret"); len(s) > 0 {
		t.Errorf("the chart renders a Secret: %v", s)
	}
	for _, name := range []string{"REDIS_URL", "TWILIO_AUTH_TOKEN", "IDEMPOTENCY_FAILUR_MODE"} {
		_, err := renderChart(chartDir, map[string]any{"env": map[string]any{name: "x"}})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("env.%s: render error %v, want the schema to refuse it, naming it", name, err)
		}
	}
}

// checkObjects refuses what no schema sees, in the chart's rendering as in
// any other: a grace period within SHUTDOWN_TIMEOUT, service links, a
// NetworkPolicy closed to SMTP_PORT; and passes the chart's defaults.
func TestCheckObjects(t *testing.T) {
	if err := checkObjects(mustRender(t, nil)); err != nil {
		t.Fatalf("the chart's defaults: %v", err)
	}
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"grace within SHUTDOWN_TIMEOUT", map[string]any{"terminationGracePeriodSeconds": 30}, "must exceed SHUTDOWN_TIMEOUT"},
		{"SHUTDOWN_TIMEOUT raised past the grace", map[string]any{"env": map[string]any{"SHUTDOWN_TIMEOUT": "1m"}}, "must exceed SHUTDOWN_TIMEOUT"},
		{"SMTP_PORT moved: the chart opens the new one", map[string]any{"env": map[string]any{"SMTP_PORT": "2525"}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := checkObjects(mustRender(t, c.values))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	objs := mustRender(t, nil)
	for _, o := range objs {
		switch o["kind"] {
		case "StatefulSet":
			delete(mapAt(o, "spec", "template", "spec"), "enableServiceLinks")
		case "NetworkPolicy":
			mapAt(o, "spec")["egress"] = []any{}
		}
	}
	err := checkObjects(objs)
	for _, want := range []string{"enableServiceLinks: false", "no egress to SMTP_PORT"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("service links on and SMTP closed: error %v, want one saying %q", err, want)
		}
	}
}
