#!/usr/bin/env bash
# check-deploy.sh: validates deploy/ the way CI does, and fails on any
# invalid manifest.
#
#   1. deploy/compose.yaml with `docker compose config -q` (or the older
#      `docker-compose`), installing Debian's compose package if neither is
#      there.
#   2. deploy/k8s/*.yaml with kubeconform, strictly (unknown fields,
#      duplicate keys, wrong types, missing required fields, malformed
#      quantities), against JSON schemas generated here from the Kubernetes
#      OpenAPI document: kubeconform would otherwise download its schemas,
#      and these machines reach no network but the package registries. The
#      document comes with the k8s.io/kubernetes Go module (fetched by `go mod
#      download`, into the module cache, outside any go.mod);
#      scripts/checkdeploy turns it into kubeconform's schema files.
#      ServiceMonitor and PrometheusRule are validated against the
#      Prometheus Operator's CRDs, ScaledObject against KEDA's, which their
#      Go modules ship (fetched the same way), made strict by
#      scripts/checkdeploy too.
#   3. deploy/k8s/kustomization.yaml lists every manifest but the example
#      Secret and the optional KEDA ScaledObject; deploy/k8s and
#      deploy/k8s/monitoring, built with kustomize's own code, validate too,
#      and pass scripts/checkdeploy's checks of what no schema sees: the
#      grace period exceeds SHUTDOWN_TIMEOUT, the pods get no service links,
#      the NetworkPolicy opens SMTP_PORT.
#   4. The Helm chart (deploy/helm/notification-worker), with Helm's own
#      code: linted as `helm lint --strict` does and rendered as `helm
#      template` does, with its defaults and with each values file of its
#      ci/ folder; each rendering validates as in 2 and passes the checks
#      of 3. Then scripts/checkdeploy's tests: the chart's defaults render
#      the objects of deploy/k8s, its monitoring toggles those of
#      deploy/k8s/monitoring, its KEDA toggle the example ScaledObject.
#      scripts/checkdeploy is a Go module of its own: Helm and kustomize
#      (and the k8s.io modules they bring) are never built into, or
#      downloaded for, the worker's module.
#   5. The worker builds for linux/arm64 as well as linux/amd64 (the
#      Dockerfile copies the binary of the platform it builds for), and the
#      Dockerfile hard-codes no architecture. Neither binary links the
#      embedded broker (franz-go, kfake: `go version -m` lists no
#      github.com/twmb module; only `make run`'s -tags devbroker build has
#      it), and the one of this machine's architecture refuses
#      EVENT_SOURCE=embedded and the demo with exit 2.
#
# Idempotent; runs as root on a fresh Debian machine with Go. Needs root only
# to install the compose package. Talks to no network but the package
# registries (apt, the Go module proxy), and only when something is missing.
#
# Environment:
#   KUBECONFORM_VERSION   kubeconform to install (default v0.8.0)
#   K8S_VERSION           Kubernetes whose API the manifests are checked
#                         against (default v1.37.2, the k8s.io/kubernetes
#                         module version)
#   PROMETHEUS_OPERATOR_VERSION  the Prometheus Operator whose CRDs
#                         ServiceMonitor and PrometheusRule are checked
#                         against (default v0.89.0)
#   KEDA_VERSION          KEDA whose CRD ScaledObject is checked against
#                         (default v2.20.2)
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go toolchain go.mod asks for, as the Makefile sets it, for a run
# without make.
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}

kubeconform_version=${KUBECONFORM_VERSION:-v0.8.0}
k8s_version=${K8S_VERSION:-v1.37.2}
operator_version=${PROMETHEUS_OPERATOR_VERSION:-v0.89.0}
keda_version=${KEDA_VERSION:-v2.20.2}
# The kinds deploy/k8s uses; a new kind needs its entry here.
kinds=(StatefulSet.apps/v1 ConfigMap.v1 Service.v1 PodDisruptionBudget.policy/v1 Secret.v1 NetworkPolicy.networking.k8s.io/v1)

say() { printf 'check-deploy: [%4ss] %s\n' "$SECONDS" "$*" >&2; }
die() { say "$*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not installed"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- 1. compose -------------------------------------------------------------

compose_cmd() {
  if docker compose version >/dev/null 2>&1; then
    echo "docker compose"
  elif command -v docker-compose >/dev/null 2>&1; then
    echo "docker-compose"
  else
    return 1
  fi
}

if ! compose=$(compose_cmd); then
  [ "$(id -u)" -eq 0 ] || die "no docker compose or docker-compose, and installing one needs root"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Whichever compose package this Debian offers: the v2 plugin where it
  # exists, else the standalone docker-compose.
  installed=
  for pkg in docker-compose-plugin docker-compose-v2 docker-compose; do
    candidate=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
      say "installing $pkg $candidate"
      apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
      installed=$pkg
      break
    fi
  done
  [ -n "$installed" ] || die "apt offers no compose package"
  compose=$(compose_cmd) || die "$installed installed, but neither docker compose nor docker-compose runs"
fi
say "compose: $compose -f deploy/compose.yaml config -q"
# No daemon needed: config only parses, interpolates and validates.
$compose -f deploy/compose.yaml config -q || die "deploy/compose.yaml is invalid"

# --- 2. kubeconform on deploy/k8s ---------------------------------------------

gobin=$(go env GOPATH)/bin
kubeconform=$gobin/kubeconform
# `go install` leaves no version in -v ("development"); the build info has it.
installed_version() { go version -m "$kubeconform" 2>/dev/null | awk '$1 == "mod" {print $3}'; }
if [ ! -x "$kubeconform" ] || [ "$(installed_version)" != "$kubeconform_version" ]; then
  say "installing kubeconform $kubeconform_version"
  # From a scratch directory, so this module's go.mod is not touched.
  (cd "$work" && GOBIN=$gobin GOFLAGS= go install "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform_version")
fi

say "building scripts/checkdeploy (Helm, kustomize)"
checkdeploy=$work/checkdeploy
(cd scripts/checkdeploy && go build -o "$checkdeploy" .)

say "schemas: Kubernetes $k8s_version OpenAPI document, kinds ${kinds[*]}"
k8s_dir=$(cd "$work" && GOFLAGS= go mod download -json "k8s.io/kubernetes@$k8s_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
swagger=$k8s_dir/api/openapi-spec/swagger.json
[ -f "$swagger" ] || die "k8s.io/kubernetes@$k8s_version has no $swagger"
schemas=$work/schemas
"$checkdeploy" -swagger "$swagger" -out "$schemas" "${kinds[@]}"

say "schemas: Prometheus Operator $operator_version CRDs (ServiceMonitor, PrometheusRule)"
operator_dir=$(cd "$work" && GOFLAGS= go mod download -json "github.com/prometheus-operator/prometheus-operator@$operator_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
for crd in servicemonitors prometheusrules; do
  f=$operator_dir/jsonnet/prometheus-operator/$crd-crd.json
  [ -f "$f" ] || die "prometheus-operator@$operator_version has no $f"
  "$checkdeploy" -crd "$f" -out "$schemas"
done

say "schemas: KEDA $keda_version CRD (ScaledObject)"
keda_dir=$(cd "$work" && GOFLAGS= go mod download -json "github.com/kedacore/keda/v2@$keda_version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
f=$keda_dir/config/crd/bases/keda.sh_scaledobjects.yaml
[ -f "$f" ] || die "keda@$keda_version has no $f"
"$checkdeploy" -crd "$f" -out "$schemas"

validate() {
  # -strict: unknown fields and duplicate keys fail. The schemas are strict
  # too (additionalProperties false), generated by scripts/checkdeploy.
  "$kubeconform" -strict -summary -skip Kustomization \
    -schema-location "$schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json" "$@"
}
say "kubeconform $kubeconform_version: deploy/k8s"
validate deploy/k8s/ || die "deploy/k8s: invalid manifest"

# --- 3. kustomization ----------------------------------------------------------

# The resources: list, one "  - file" per line.
listed=$(awk '/^resources:/ {on=1; next} on && /^[^[:space:]-]/ {on=0} on && /^[[:space:]]*- / {print $2}' deploy/k8s/kustomization.yaml)
[ -n "$listed" ] || die "deploy/k8s/kustomization.yaml lists no resources"
for f in $listed; do
  [ -f "deploy/k8s/$f" ] || die "kustomization.yaml lists $f, which does not exist"
  [ "$f" != secret.example.yaml ] || die "kustomization.yaml must not list secret.example.yaml: its placeholder values would reach the cluster"
  [ "$f" != keda-scaledobject.yaml ] || die "kustomization.yaml must not list keda-scaledobject.yaml: it is optional, and needs KEDA's CRDs"
done
for f in deploy/k8s/*.yaml; do
  b=$(basename "$f")
  # keda-scaledobject.yaml: an optional, commented example (docs/runbook.md, "Scaling").
  case $b in kustomization.yaml | secret.example.yaml | keda-scaledobject.yaml) continue ;; esac
  grep -qx "$b" <<<"$listed" || die "deploy/k8s/$b is not listed in kustomization.yaml: it would never be applied"
done
for dir in deploy/k8s deploy/k8s/monitoring; do
  say "kustomize build $dir | checks | kubeconform"
  built=$work/$(echo "$dir" | tr / -).yaml
  "$checkdeploy" -kustomize "$dir" -out "$built" || die "$dir: the kustomize build fails or its objects fail the checks"
  validate "$built" || die "the kustomize build of $dir is invalid"
done

# --- 4. the Helm chart ---------------------------------------------------------

chart=deploy/helm/notification-worker
say "helm lint, helm template: $chart, defaults and ci/*.yaml"
"$checkdeploy" -chart "$chart" -out "$work/chart" || die "$chart: lint, render or checks failed"
validate "$work"/chart/*.yaml || die "$chart renders an invalid manifest"
say "go test scripts/checkdeploy: the chart against deploy/k8s"
(cd scripts/checkdeploy && go test -count=1 ./...) || die "$chart and deploy/k8s differ"

# --- 5. both architectures -------------------------------------------------------

grep -Eq '^COPY bin/notification-worker-.*[$][{]TARGETARCH' Dockerfile ||
  die "Dockerfile does not copy the binary of TARGETARCH (BuildKit sets it per platform): the image would hold one architecture whatever its platform"
for arch in amd64 arm64; do
  say "go build ./cmd/... for linux/$arch"
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -o "$work/$arch/" ./cmd/... ||
    die "./cmd/... does not build for linux/$arch"
  if go version -m "$work/$arch/notification-worker" | grep -F github.com/twmb/; then
    die "the production binary for linux/$arch links franz-go (above): the embedded broker belongs to the -tags devbroker build only"
  fi
done
bin="$work/$(go env GOARCH)/notification-worker"
for args in "EVENT_SOURCE=embedded $bin" "$bin demo"; do
  say "env -i $args: refused, exit 2"
  code=0
  env -i $args >/dev/null 2>&1 || code=$?
  [ "$code" = 2 ] || die "env -i $args exited $code, want 2 (no embedded broker in the production binary)"
done

say "ok"
