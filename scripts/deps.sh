#!/usr/bin/env bash
# Installs the host packages the tests need on a fresh Debian machine (as
# root): redis-server for the store's tests, promtool (Debian's prometheus
# package) for the alert rules' tests, a Java runtime and Maven for the
# Apache Kafka broker the integration suite assembles from Maven Central
# (scripts/kafka-jars.sh). Idempotent and quick when everything is there.
# The Docker engine is scripts/docker-up.sh's job.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing ${need[*]}; run as root or install them yourself" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts a redis-server on 6379 (and a prometheus on 9090, where
  # an init system runs) on install; the tests need neither.
fi
# A Go distribution that pins GOTOOLCHAIN=local (in its GOROOT/go.env)
# refuses go.mod's newer toolchain; the user's Go env file outranks that,
# so plain `go build`, `go vet` and `go test` fetch go1.27.3 from here on.
if [ "$(GOTOOLCHAIN= go env GOTOOLCHAIN)" = local ] && ! GOTOOLCHAIN=local go list -m >/dev/null 2>&1; then
  go env -w GOTOOLCHAIN=go1.27.3+auto
  echo "deps: go env -w GOTOOLCHAIN=go1.27.3+auto (this Go is $(GOTOOLCHAIN=local go env GOVERSION); go.mod needs 1.27.3)"
fi
"$(dirname "$0")/redis72.sh" >/dev/null # Valkey 8 (WAITAOF), unpacked, for IDEMPOTENCY_WAIT_AOF's tests
echo "deps: ok ($(redis-server --version | cut -d' ' -f3), $(promtool --version 2>&1 | head -1), $(java -version 2>&1 | head -1), $(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g'))"
