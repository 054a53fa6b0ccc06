package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/harborlight/notification-worker/config"
	"github.com/harborlight/notification-worker/internal/docsection"
)

const (
	chartValues     = "../../deploy/helm/notification-worker/values.yaml"
	chartSchema     = "../../deploy/helm/notification-worker/values.schema.json"
	kustomizeConfig = "../../deploy/k8s/configmap.yaml"
	chartUpdateHint = "go test ./cmd/notification-worker -run TestHelmValuesEnv -update"
)

// renderValuesEnv renders the env section of the chart's values.yaml: every
// variable the worker reads (what the README's table lists), each with its
// default and meaning as comment lines, then set to the value
// deploy/k8s/configmap.yaml gives it, or commented out when it gives none.
// A secret variable is never a value there: its line says where it goes.
func renderValuesEnv(set map[string]string) string {
	var b strings.Builder
	for n, v := range config.Reference {
		if n > 0 {
			b.WriteString("\n")
		}
		head := v.Name
		if v.Default != "" {
			head += " (default " + v.Default + ")"
		}
		meaning := v.Meaning
		if v.Secret {
			meaning += " Secret: set it through secretEnv, never here."
		}
		for _, line := range wrap(head+": "+meaning, 74) {
			b.WriteString("  # " + line + "\n")
		}
		switch value, ok := set[v.Name]; {
		case v.Secret:
		case ok:
			b.WriteString("  " + v.Name + ": " + strconv.Quote(value) + "\n")
		default:
			b.WriteString("  # " + v.Name + ": \"\"\n")
		}
	}
	return b.String()
}

// wrap breaks s into lines of at most width runes at spaces (a longer word
// keeps a line of its own).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// valuesEnvSchema renders the JSON schema of the env value: a string for
// each variable the worker reads but the secret ones, and nothing else, so
// that `helm install` refuses a misspelt setting and a secret value.
func valuesEnvSchema() map[string]any {
	props := map[string]any{}
	for _, v := range config.Reference {
		if !v.Secret {
			props[v.Name] = map[string]any{"type": "string", "description": v.Meaning}
		}
	}
	return map[string]any{
		"type":                 "object",
		"description":          "The worker's settings, as strings: the ConfigMap its pods read. Secret settings go in secretEnv.",
		"additionalProperties": false,
		"properties":           props,
	}
}

// TestHelmValuesEnv fails when the chart's values.yaml env section, or the
// env schema of its values.schema.json, is not what config.Reference (the
// providers' settings among them) renders, with deploy/k8s/configmap.yaml's
// values: the chart documents every setting as the README does, sets what
// the Kustomize base sets, and refuses what the worker does not read. With
// -update it rewrites both.
func TestHelmValuesEnv(t *testing.T) {
	b, err := os.ReadFile(kustomizeConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatalf("%s: %v", kustomizeConfig, err)
	}
	known := map[string]bool{}
	for _, v := range config.Reference {
		known[v.Name] = !v.Secret
	}
	for _, name := range slices.Sorted(maps.Keys(cm.Data)) {
		if !known[name] {
			t.Errorf("%s sets %s, which is not a setting the worker reads, or is a secret", kustomizeConfig, name)
		}
	}
	docsection.Section{
		Path: chartValues, Begin: "  # --- generated: begin ---", End: "  # --- generated: end ---",
		What: "the env section", From: "config.Reference, the providers' settings and " + kustomizeConfig, Hint: chartUpdateHint,
	}.Check(t, renderValuesEnv(cm.Data), *update)

	raw, err := os.ReadFile(chartSchema)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("%s: %v", chartSchema, err)
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		t.Fatalf("%s: no properties", chartSchema)
	}
	want := roundTrip(t, valuesEnvSchema())
	if reflect.DeepEqual(props["env"], want) {
		return
	}
	if !*update {
		t.Errorf("%s: properties.env is not the schema of the settings the worker reads; run\n\t%s", chartSchema, chartUpdateHint)
		return
	}
	props["env"] = want
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(schema); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(chartSchema, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote properties.env of %s", chartSchema)
}

// roundTrip returns v as encoding/json reads it back, to compare with a
// parsed document.
func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
