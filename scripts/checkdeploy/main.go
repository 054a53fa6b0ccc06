// Command checkdeploy checks deploy/ offline, for scripts/check-deploy.sh,
// with the Kubernetes ecosystem's own code: Helm's chart loader, engine and
// lint, kustomize's build, and the Kubernetes OpenAPI document. It is a Go
// module of its own, so that the worker's module neither builds nor
// downloads any of it.
//
//	checkdeploy -swagger swagger.json -out DIR Deployment.apps/v1 ConfigMap.v1 ...
//	checkdeploy -crd servicemonitors-crd.json -out DIR
//	checkdeploy -kustomize deploy/k8s -out built.yaml
//	checkdeploy -chart deploy/helm/notification-worker -out DIR
//
// -swagger turns the Kubernetes OpenAPI v2 document (swagger.json, as the
// k8s.io/kubernetes module ships it under api/openapi-spec/) into
// standalone, strict JSON schemas that kubeconform reads from a local
// directory: kubeconform normally downloads its schemas, and the machines
// this project builds on reach no network but the package registries.
// Each argument is Kind.version for the core group or Kind.group/version
// otherwise. The files are named as kubeconform's default location names
// them ({{ .ResourceKind }}{{ .KindSuffix }}.json, lower case):
// deployment-apps-v1.json, configmap-v1.json, poddisruptionbudget-policy-v1.json.
//
// -crd (a CustomResourceDefinition, JSON or YAML, such as those the
// Prometheus Operator's and KEDA's modules ship) writes the schema of each
// version of that custom kind instead, made strict the same way.
//
// "Strict" follows openapi2jsonschema --strict, the tool that produces
// kubeconform's usual schemas: every $ref is inlined, an object with declared
// properties rejects any other property (a typo such as `readinessprobe`
// fails instead of being dropped by the API server), an int-or-string accepts
// both, and a quantity accepts a string or a number (`cpu: 1`).
//
// -kustomize builds a kustomization as `kubectl kustomize` does, writes the
// objects to -out, and checks them (checkObjects). -chart lints a Helm
// chart as `helm lint --strict` does and renders it as `helm template`
// does, with its defaults and with each values file of its ci/ folder,
// checks each rendering the same way, and writes it to -out/NAME.yaml.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	swagger := flag.String("swagger", "", "path of the Kubernetes swagger.json (OpenAPI v2)")
	crd := flag.String("crd", "", "path of a CustomResourceDefinition, as JSON or YAML")
	kustomization := flag.String("kustomize", "", "directory of a kustomization to build and check")
	chart := flag.String("chart", "", "directory of a Helm chart to lint, render and check")
	out := flag.String("out", "", "where the schemas, or the objects built, are written")
	flag.Parse()
	var err error
	switch {
	case *out == "":
		err = errUsage
	case *crd != "":
		err = runCRD(*crd, *out)
	case *kustomization != "":
		err = checkKustomization(*kustomization, *out)
	case *chart != "":
		err = checkChart(*chart, *out)
	case *swagger != "" && flag.NArg() > 0:
		err = run(*swagger, *out, flag.Args())
	default:
		err = errUsage
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintln(os.Stderr, "usage: checkdeploy -out PATH (-swagger swagger.json Kind.group/version ... | -crd FILE | -kustomize DIR | -chart DIR)")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkdeploy:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(swaggerPath, out string, kinds []string) error {
	raw, err := os.ReadFile(swaggerPath)
	if err != nil {
		return err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", swaggerPath, err)
	}
	if len(doc.Definitions) == 0 {
		return fmt.Errorf("%s: no definitions: not an OpenAPI v2 document", swaggerPath)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, k := range kinds {
		kind, group, version, err := parseKind(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		name, def := findGVK(doc.Definitions, kind, group, version)
		if def == nil {
			errs = append(errs, fmt.Errorf("%s: no definition with that group, version and kind", k))
			continue
		}
		e := expander{defs: doc.Definitions, stack: map[string]bool{}}
		schema := e.expand(def).(map[string]any)
		schema["$schema"] = "http://json-schema.org/schema#"
		schema["description"] = fmt.Sprintf("%s (%s), strict, generated from the Kubernetes OpenAPI document by scripts/checkdeploy", kind, name)
		b, err := json.MarshalIndent(schema, "", " ")
		if err != nil {
			return err
		}
		file := strings.ToLower(kind)
		if group != "" {
			// kubeconform's KindSuffix keeps only the group's first label
			// (policy, apps, networking for networking.k8s.io).
			file += "-" + strings.ToLower(strings.SplitN(group, ".", 2)[0])
		}
		file += "-" + strings.ToLower(version) + ".json"
		if err := os.WriteFile(filepath.Join(out, file), b, 0o644); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// runCRD writes the strict schema of every version of the custom kind the
// CRD at path defines.
func runCRD(path, out string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if raw, err = yaml.YAMLToJSON(raw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var crd struct {
		Kind string `json:"kind"`
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" || len(crd.Spec.Versions) == 0 {
		return fmt.Errorf("%s: not a CustomResourceDefinition with versions", path)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, v := range crd.Spec.Versions {
		if v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("%s: version %s has no openAPIV3Schema", path, v.Name)
		}
		e := expander{stack: map[string]bool{}}
		schema := e.expand(v.Schema.OpenAPIV3Schema).(map[string]any)
		schema["$schema"] = "http://json-schema.org/schema#"
		schema["description"] = fmt.Sprintf("%s.%s/%s, strict, generated from its CustomResourceDefinition by scripts/checkdeploy", crd.Spec.Names.Kind, crd.Spec.Group, v.Name)
		b, err := json.MarshalIndent(schema, "", " ")
		if err != nil {
			return err
		}
		file := strings.ToLower(crd.Spec.Names.Kind) + "-" + strings.ToLower(strings.SplitN(crd.Spec.Group, ".", 2)[0]) + "-" + strings.ToLower(v.Name) + ".json"
		if err := os.WriteFile(filepath.Join(out, file), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// parseKind splits "Deployment.apps/v1" and "ConfigMap.v1".
func parseKind(s string) (kind, group, version string, err error) {
	kind, gv, ok := strings.Cut(s, ".")
	if !ok || kind == "" || gv == "" {
		return "", "", "", fmt.Errorf("%q: want Kind.version or Kind.group/version", s)
	}
	if g, v, ok := strings.Cut(gv, "/"); ok {
		return kind, g, v, nil
	}
	return kind, "", gv, nil
}

// findGVK returns the definition whose x-kubernetes-group-version-kind names
// exactly kind, group and version.
func findGVK(defs map[string]map[string]any, kind, group, version string) (string, map[string]any) {
	for name, def := range defs {
		gvks, _ := def["x-kubernetes-group-version-kind"].([]any)
		for _, x := range gvks {
			m, _ := x.(map[string]any)
			if m["kind"] == kind && m["group"] == group && m["version"] == version {
				return name, def
			}
		}
	}
	return "", nil
}

type expander struct {
	defs  map[string]map[string]any
	stack map[string]bool // definitions being expanded, to cut recursive types
}

const refPrefix = "#/definitions/"

// Definitions whose JSON form is not what their OpenAPI "type" says.
var special = map[string]map[string]any{
	// resource.Quantity marshals as a string but unmarshals a number too.
	// The pattern is its grammar (number, then an SI or binary suffix or an
	// exponent), so "256mi" or "1 cpu" fails here and not at apply time.
	"io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": []any{
		map[string]any{"type": "string", "pattern": `^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`},
		map[string]any{"type": "number"}}},
}

func (e *expander) expand(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, el := range x {
			out[i] = e.expand(el)
		}
		return out
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok && strings.HasPrefix(ref, refPrefix) {
			name := strings.TrimPrefix(ref, refPrefix)
			if s, ok := special[name]; ok {
				return s
			}
			if e.stack[name] {
				return map[string]any{} // a recursive type (JSONSchemaProps): accept anything below
			}
			def, ok := e.defs[name]
			if !ok {
				return map[string]any{}
			}
			e.stack[name] = true
			defer delete(e.stack, name)
			return e.expand(def)
		}
		out := make(map[string]any, len(x))
		for k, el := range x {
			if strings.HasPrefix(k, "x-kubernetes-") || k == "description" {
				continue // documentation and server-side hints: no constraint for a validator
			}
			if k == "properties" {
				// Property names are data, not keywords: expand each value
				// but never drop or reinterpret a name ("format", "description").
				props, _ := el.(map[string]any)
				p := make(map[string]any, len(props))
				for name, s := range props {
					p[name] = e.expand(s)
				}
				out[k] = p
				continue
			}
			out[k] = e.expand(el)
		}
		if out["format"] == "int-or-string" {
			delete(out, "type")
			delete(out, "format")
			out["oneOf"] = []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}}
		}
		if _, hasProps := out["properties"]; hasProps {
			if _, set := out["additionalProperties"]; !set {
				out["additionalProperties"] = false
			}
		}
		return out
	}
	return v
}
