#!/usr/bin/env bash
# build-images.sh: build, with no container registry, the local images the
# integration suite runs (integration/harness*.go falls back to them when the
# public image is not present), and the worker's production image.
#
#   notification-worker/redis:7             Debian's redis-server + the libraries ldd lists
#   notification-worker/mailpit:v1.33.1     mailpit built from source, static
#   notification-worker/kfake:dev           integration/kfakebroker (Kafka protocol, in memory)
#   notification-worker/twilio-double:dev   integration/twiliodouble
#   notification-worker:dev                 the worker, from ./Dockerfile (if ./cmd/notification-worker exists)
#
# Usage: scripts/build-images.sh [redis|mailpit|kfake|twilio-double|worker ...]
# (no argument: all of them). Needs a Docker engine (scripts/docker-up.sh).
#
# Every image is FROM scratch, so nothing is pulled. Each carries a label with
# a digest of its inputs; when the image exists with the same digest it is not
# rebuilt, so a warm run takes seconds. FORCE=1 rebuilds everything.
#
# Environment:
#   FORCE=1       rebuild even when the inputs did not change
#   NW_CACHE_DIR  where the mailpit binary is kept between runs, since it
#                 takes minutes to compile (default ${XDG_CACHE_HOME:-~/.cache}/notification-worker)
set -euo pipefail

cd "$(dirname "$0")/.."

MAILPIT_VERSION=v1.33.1
LABEL=org.harborlight.notification-worker.inputs
CACHE_DIR=${NW_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/notification-worker}
# The legacy builder handles FROM scratch with no network and no plugin;
# BuildKit would need the buildx plugin, which Debian's docker.io lacks.
export DOCKER_BUILDKIT=0

say() { printf 'build-images: %s\n' "$*" >&2; }

# docker_build ARGS...: docker build, quiet unless it fails (the legacy
# builder prints a deprecation banner on every run).
docker_build() {
  if ! docker build -q "$@" >"$work/docker-build.log" 2>&1; then
    cat "$work/docker-build.log" >&2
    return 1
  fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

docker info >/dev/null 2>&1 || { say "no Docker engine answers; run scripts/docker-up.sh first"; exit 1; }

apt_updated=
apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    say "missing $*; install it or run as root"
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# fresh TAG DIGEST: true when TAG exists and was built from the same inputs.
fresh() {
  [ "${FORCE:-0}" = 1 ] && return 1
  local have
  have=$(docker image inspect -f "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null) || return 1
  [ "$have" = "$2" ]
}

# digest_dir DIR: one digest over the names, modes and contents of DIR's files.
digest_dir() {
  (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum \
    && find . -printf '%p %m\n' | LC_ALL=C sort) | sha256sum | cut -d' ' -f1
}

# build_scratch TAG DIR: DIR holds a Dockerfile (FROM scratch) and rootfs/.
# Skips the build when TAG already holds DIR's digest.
build_scratch() {
  local tag=$1 dir=$2 digest
  digest=$(digest_dir "$dir")
  if fresh "$tag" "$digest"; then
    say "$tag is up to date"
    return
  fi
  say "building $tag"
  docker_build --label "$LABEL=$digest" -t "$tag" "$dir"
}

# go_static OUT PKG: a static, reproducible binary (no cgo, no paths, no VCS
# stamp), so the same sources give the same digest and no rebuild.
go_static() {
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$1" "$2"
}

build_redis() {
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  local dir=$work/redis bin
  bin=$(readlink -f "$(command -v redis-server)")
  mkdir -p "$dir/rootfs/usr/bin" "$dir/rootfs/data"
  cp "$bin" "$dir/rootfs/usr/bin/redis-server"
  # The binary, its libraries and the loader at the paths ldd names: that
  # is all a dynamically linked program needs to run in an empty image.
  ldd "$bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
    cp -L --parents "$lib" "$dir/rootfs/"
  done
  # ENTRYPOINT is the server itself and the harness passes flags only, which
  # the official redis image's entrypoint accepts the same way. WORKDIR /data
  # as there, so a stopped and restarted container keeps its dump.rdb.
  # (docker build rather than `docker import`: import cannot set the label
  # the up-to-date check reads.)
  cat >"$dir/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/bin
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/bin/redis-server"]
EOF
  build_scratch notification-worker/redis:7 "$dir"
}

build_mailpit() {
  local tag=notification-worker/mailpit:$MAILPIT_VERSION dir=$work/mailpit
  # The version is the whole input: check it before the minutes-long compile.
  if fresh "$tag" "$MAILPIT_VERSION"; then
    say "$tag is up to date"
    return
  fi
  local bin=$CACHE_DIR/mailpit-$MAILPIT_VERSION
  if [ ! -x "$bin" ] || [ "${FORCE:-0}" = 1 ]; then
    say "compiling mailpit $MAILPIT_VERSION (takes a few minutes cold)"
    mkdir -p "$CACHE_DIR/gobin"
    # Outside the module, so go.mod is neither read nor touched.
    (cd "$work" && CGO_ENABLED=0 GOBIN="$CACHE_DIR/gobin" GOFLAGS=-trimpath \
      go install -ldflags='-s -w' "github.com/axllent/mailpit@$MAILPIT_VERSION")
    mv "$CACHE_DIR/gobin/mailpit" "$bin"
  fi
  mkdir -p "$dir/rootfs/tmp"
  chmod 1777 "$dir/rootfs/tmp" # mailpit's database lives in /tmp
  cp "$bin" "$dir/rootfs/mailpit"
  cat >"$dir/Dockerfile" <<'EOF'
FROM scratch
COPY rootfs/ /
EXPOSE 1025 8025
ENTRYPOINT ["/mailpit"]
EOF
  say "building $tag"
  docker_build --label "$LABEL=$MAILPIT_VERSION" -t "$tag" "$dir"
}

# build_go_tool TAG PKG NAME: a static Go command of this module as the
# image's only file (plus /tmp and /data for a data dir).
build_go_tool() {
  local tag=$1 pkg=$2 name=$3 dir=$work/$3
  mkdir -p "$dir/rootfs/tmp" "$dir/rootfs/data"
  chmod 1777 "$dir/rootfs/tmp"
  go_static "$dir/rootfs/$name" "$pkg"
  cat >"$dir/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
ENTRYPOINT ["/$name"]
EOF
  build_scratch "$tag" "$dir"
}

build_worker() {
  if [ ! -d cmd/notification-worker ]; then
    say "skipping notification-worker:dev: ./cmd/notification-worker does not exist yet"
    return
  fi
  say "building notification-worker:dev"
  mkdir -p bin
  # The same steps as `make image`; the CA bundle is staged into the build
  # context because a scratch image has none and the worker dials TLS.
  # VERSION (from `make image`, else git describe) is linked in as the
  # worker's version: its start-up line and build_info metric show it.
  local version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
  CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=auto -ldflags="-s -w -X main.version=$version" \
    -o bin/notification-worker-linux-amd64 ./cmd/notification-worker
  cp /etc/ssl/certs/ca-certificates.crt bin/ca-certificates.crt
  # Docker's layer cache makes this a no-op when the binary did not change.
  docker_build --build-arg "VERSION=$version" -t notification-worker:dev .
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(redis mailpit kfake twilio-double worker)
for t in "${targets[@]}"; do
  start=$SECONDS
  case $t in
    redis) build_redis ;;
    mailpit) build_mailpit ;;
    kfake) build_go_tool notification-worker/kfake:dev ./integration/kfakebroker kfakebroker ;;
    twilio-double) build_go_tool notification-worker/twilio-double:dev ./integration/twiliodouble twiliodouble ;;
    worker) build_worker ;;
    *) say "unknown image $t (want redis, mailpit, kfake, twilio-double or worker)"; exit 2 ;;
  esac
  say "$t: $((SECONDS - start))s"
done
