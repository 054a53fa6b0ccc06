package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The release the chart is rendered as: named as deploy/k8s names its
// objects, so that the two can be compared.
const (
	releaseName      = "notification-worker"
	releaseNamespace = "default"
)

// object is one Kubernetes object, as YAML decodes it.
type object = map[string]any

// lintChart runs Helm's own lint on the chart in dir with values, as
// `helm lint --strict` does: any message above information fails.
func lintChart(dir string, values map[string]any) error {
	var errs []error
	for _, m := range lint.RunAll(dir, values, releaseNamespace).Messages {
		if m.Severity > support.InfoSev {
			errs = append(errs, m)
		}
	}
	return errors.Join(errs...)
}

// renderChart renders the chart in dir with values over its own, as
// `helm template` does (the values schema applies), and returns the
// objects in the order of their templates' names.
func renderChart(dir string, values map[string]any) ([]object, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	vals, err := util.CoalesceValues(chrt, values)
	if err != nil {
		return nil, err
	}
	opts := common.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, IsInstall: true}
	top, err := util.ToRenderValuesWithSchemaValidation(chrt, vals, opts, common.DefaultCapabilities, false)
	if err != nil {
		return nil, err
	}
	rendered, err := engine.Render(chrt, top)
	if err != nil {
		return nil, err
	}
	var out []object
	for _, name := range slices.Sorted(maps.Keys(rendered)) {
		if base := path.Base(name); strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		objs, err := decodeAll([]byte(rendered[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, objs...)
	}
	return out, nil
}

// buildKustomization builds the kustomization in dir with kustomize's own
// code, as `kubectl kustomize` does.
func buildKustomization(dir string) ([]object, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	b, err := resMap.AsYaml()
	if err != nil {
		return nil, err
	}
	return decodeAll(b)
}

// decodeAll decodes every non-empty document of a YAML stream.
func decodeAll(b []byte) ([]object, error) {
	var out []object
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := docs.Read()
		if err == io.EOF {
			return out, nil
		}
		var o object
		if err == nil {
			err = yaml.Unmarshal(doc, &o)
		}
		if err != nil {
			return nil, err
		}
		if len(o) > 0 {
			out = append(out, o)
		}
	}
}

// writeObjects writes objs to w as one YAML stream.
func writeObjects(w io.Writer, objs []object) error {
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "---\n%s", b); err != nil {
			return err
		}
	}
	return nil
}

// shutdownDefault is SHUTDOWN_TIMEOUT's default (the worker's configuration
// reference), for a ConfigMap that does not set it.
const shutdownDefault = 30 * time.Second

// checkObjects checks what no schema can, on a set of objects the
// operator applies together: the StatefulSet's grace period exceeds the
// ConfigMap's SHUTDOWN_TIMEOUT, or in-flight sends are killed before they
// are committed; its pods get no service-link variables; and the
// NetworkPolicy lets the worker reach SMTP_PORT, or every email times out.
func checkObjects(objs []object) error {
	var errs []error
	env := map[string]string{}
	for _, o := range objs {
		if o["kind"] == "ConfigMap" {
			for k, v := range mapAt(o, "data") {
				env[k], _ = v.(string)
			}
		}
	}
	for _, o := range objs {
		name := fmt.Sprintf("%s %v", o["kind"], mapAt(o, "metadata")["name"])
		switch o["kind"] {
		case "StatefulSet":
			pod := mapAt(o, "spec", "template", "spec")
			shutdown := shutdownDefault
			if s := env["SHUTDOWN_TIMEOUT"]; s != "" {
				d, err := time.ParseDuration(s)
				if err != nil {
					errs = append(errs, fmt.Errorf("SHUTDOWN_TIMEOUT=%q: %w", s, err))
					continue
				}
				shutdown = d
			}
			grace, ok := pod["terminationGracePeriodSeconds"].(float64)
			if !ok {
				errs = append(errs, fmt.Errorf("%s sets no terminationGracePeriodSeconds (the default 30 s does not exceed SHUTDOWN_TIMEOUT's default)", name))
			} else if time.Duration(grace)*time.Second <= shutdown {
				errs = append(errs, fmt.Errorf("%s: terminationGracePeriodSeconds (%v) must exceed SHUTDOWN_TIMEOUT (%v), or in-flight sends are killed before they are committed", name, grace, shutdown))
			}
			if links, ok := pod["enableServiceLinks"].(bool); !ok || links {
				errs = append(errs, fmt.Errorf("%s: its pods must set enableServiceLinks: false, or every Service of the namespace adds variables such as REDIS_PORT to the worker's environment", name))
			}
		case "NetworkPolicy":
			port := env["SMTP_PORT"]
			if port == "" {
				continue
			}
			if !egressPorts(o)[port] {
				errs = append(errs, fmt.Errorf("%s allows no egress to SMTP_PORT (%s): every email would time out", name, port))
			}
		}
	}
	return errors.Join(errs...)
}

// egressPorts returns every port a NetworkPolicy's egress rules name.
func egressPorts(np object) map[string]bool {
	ports := map[string]bool{}
	rules, _ := mapAt(np, "spec")["egress"].([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		list, _ := rule["ports"].([]any)
		for _, p := range list {
			port, _ := p.(map[string]any)
			ports[fmt.Sprint(port["port"])] = true
		}
	}
	return ports
}

// mapAt returns the map at the path of keys under o, or nil.
func mapAt(o map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		o, _ = o[k].(map[string]any)
	}
	return o
}

// checkChart lints the chart in dir with its defaults and with each values
// file of its ci/ folder, renders each, checks the objects, and writes each
// rendering to out/NAME.yaml (default.yaml for the defaults) for
// kubeconform.
func checkChart(dir, out string) error {
	sets := map[string]map[string]any{"default": nil}
	files, _ := filepath.Glob(filepath.Join(dir, "ci", "*.yaml"))
	for _, f := range files {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			return err
		}
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = v
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(sets)) {
		if err := lintChart(dir, sets[name]); err != nil {
			errs = append(errs, fmt.Errorf("lint, %s values: %w", name, err))
			continue
		}
		objs, err := renderChart(dir, sets[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("render, %s values: %w", name, err))
			continue
		}
		if err := checkObjects(objs); err != nil {
			errs = append(errs, fmt.Errorf("%s values: %w", name, err))
		}
		var b bytes.Buffer
		if err := writeObjects(&b, objs); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, name+".yaml"), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// checkKustomization builds the kustomization in dir, checks the objects,
// and writes them to out for kubeconform.
func checkKustomization(dir, out string) error {
	objs, err := buildKustomization(dir)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := writeObjects(&b, objs); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return err
	}
	return checkObjects(objs)
}
