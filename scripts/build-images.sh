#!/usr/bin/env bash
# build-images.sh: build, with no container registry, the local images the
# integration suite runs (integration/harness*.go falls back to them when the
# public image is not present), and the worker's production image.
#
#   notification-worker/redis:7             Debian's redis-server + the libraries ldd lists
#   notification-worker/mailpit:v1.33.1     mailpit built from source, static
#   notification-worker/kafka:4.4.0         Apache Kafka from Maven Central (scripts/kafka-jars.sh),
#                                           this machine's JRE, integration/kafkanode as entry
#   notification-worker:dev                 the worker, from ./Dockerfile (if ./cmd/notification-worker exists)
#
# Usage: scripts/build-images.sh [redis|mailpit|kafka|worker ...]
# (no argument: all of them). Needs a Docker engine (scripts/docker-up.sh).
#
# Every image is FROM scratch, so nothing is pulled. Each carries a label with
# a digest of its inputs; when the image exists with the same digest it is not
# rebuilt, so a warm run takes seconds. FORCE=1 rebuilds everything.
#
# One run at a time per cache folder: a second run (CI starts one early, in
# the background, and `make test` starts another) waits for the first, then
# finds its images up to date.
#
# Environment:
#   FORCE=1       rebuild even when the inputs did not change
#   NW_CACHE_DIR  where the mailpit binary and Kafka's jars are kept between
#                 runs, since they take minutes to compile or fetch (default
#                 ${XDG_CACHE_HOME:-~/.cache}/notification-worker)
set -euo pipefail

cd "$(dirname "$0")/.."
# The Go toolchain go.mod asks for, as the Makefile sets it, for a run
# without make.
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.27.3}

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

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/build-images.lock"
if ! flock -n 9; then
  say "another build-images run holds $CACHE_DIR/build-images.lock; waiting for it"
  start=$SECONDS
  flock 9
  say "waited $((SECONDS - start))s"
fi

work=$(mktemp -d)
trap '[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"' EXIT

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

# copy_libs ROOT FILE...: the libraries ldd lists for each FILE (already in
# ROOT) and the loader, copied into ROOT at their own paths, so FILE runs in
# an empty image. Libraries ldd finds inside ROOT itself (through $ORIGIN)
# are there already.
copy_libs() {
  local root=$1 f
  shift
  for f in "$@"; do
    ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | sort -u | while read -r lib; do
      case $lib in "$root"/*) continue ;; esac
      [ -e "$root$lib" ] || cp -L --parents "$lib" "$root/"
    done
  done
}

# build_kafka JARS: Apache Kafka as Maven Central publishes it (JARS, from
# scripts/kafka-jars.sh), on the JRE of this machine's `java`, with
# integration/kafkanode as the entry program.
build_kafka() {
  local version tag dir jars=$1 jdk java
  version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' integration/pom.xml)
  tag=notification-worker/kafka:$version dir=$work/kafka
  java=$(readlink -f "$(command -v java)")
  jdk=$(dirname "$(dirname "$java")")
  mkdir -p "$dir/rootfs/opt/java/bin" "$dir/rootfs/opt/java/lib" "$dir/rootfs/opt/kafka/libs" \
    "$dir/rootfs/opt/kafka/config" "$dir/rootfs/data" "$dir/rootfs/tmp"
  chmod 1777 "$dir/rootfs/tmp" # the compression codecs unpack their native code here
  cp "$java" "$dir/rootfs/opt/java/bin/java"
  # The JDK's lib (the module image, libjvm.so, the native libraries) and
  # conf, links resolved (Debian links conf and jvm.cfg into /etc); without
  # what only javac or a desktop uses, and without links to nothing.
  cp -rL "$jdk/conf" "$jdk/release" "$dir/rootfs/opt/java/"
  local f
  for f in "$jdk"/lib/*; do
    case ${f##*/} in
      ct.sym | src.zip | libatk-wrapper.so | libawt_xawt.so | libsplashscreen.so | libjsound.so | \
        libfontmanager.so | libjawt.so | liblcms.so | libjavajpeg.so | libmlib_image.so) continue ;;
    esac
    [ -e "$f" ] && cp -rL "$f" "$dir/rootfs/opt/java/lib/"
  done
  [ -f "$dir/rootfs/opt/java/lib/server/libjvm.so" ] || { say "no libjvm.so under $jdk/lib/server"; exit 1; }
  copy_libs "$dir/rootfs" "$dir/rootfs/opt/java/bin/java" $(find "$dir/rootfs/opt/java/lib" -name '*.so')
  cp "$jars"/*.jar "$dir/rootfs/opt/kafka/libs/"
  # Kafka's own console layout, to stdout, which the harness keeps.
  cat >"$dir/rootfs/opt/kafka/config/log4j2.properties" <<'EOF'
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.apache.name=org.apache.kafka
logger.apache.level=INFO
# Every config class prints all its values at start: thousands of lines.
logger.config.name=org.apache.kafka.common.config.AbstractConfig
logger.config.level=WARN
EOF
  go_static "$dir/rootfs/kafkanode" ./integration/kafkanode
  cat >"$dir/Dockerfile" <<EOF
FROM scratch
COPY rootfs/ /
ENV PATH=/opt/java/bin JAVA_HOME=/opt/java
LABEL org.apache.kafka.version=$version
ENTRYPOINT ["/kafkanode"]
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
  # For the engine's own architecture (amd64 or arm64), which the legacy
  # builder does not pass to the Dockerfile as TARGETARCH by itself.
  local arch
  arch=$(docker version -f '{{.Server.Arch}}')
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -buildvcs=auto -ldflags="-s -w -X main.version=$version" \
    -o "bin/notification-worker-linux-$arch" ./cmd/notification-worker
  cp /etc/ssl/certs/ca-certificates.crt bin/ca-certificates.crt
  # Docker's layer cache makes this a no-op when the binary did not change.
  docker_build --build-arg "VERSION=$version" --build-arg "TARGETOS=linux" --build-arg "TARGETARCH=$arch" -t notification-worker:dev .
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(redis mailpit kafka worker)
for t in "${targets[@]}"; do
  start=$SECONDS
  case $t in
    redis) build_redis ;;
    mailpit) build_mailpit ;;
    kafka)
      # The one input fetched from outside: when Maven cannot resolve it,
      # the suite still runs, on kfake, and every test says so.
      command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || apt_install openjdk-17-jre-headless maven
      if kafka_dir=$(scripts/kafka-jars.sh); then
        build_kafka "$kafka_dir/jars"
      else
        say "WARNING: Apache Kafka's jars could not be fetched (output above), so its image is not built;"
        say "WARNING: without one the integration suite falls back to kfake, and each test's log says so"
      fi
      ;;
    worker) build_worker ;;
    *) say "unknown image $t (want redis, mailpit, kafka or worker)"; exit 2 ;;
  esac
  say "$t: $((SECONDS - start))s"
done
