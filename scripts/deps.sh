#!/usr/bin/env bash
# Installs the host packages the tests need on a fresh Debian machine (as
# root): redis-server for the store's tests, a Java runtime and Maven for the
# Apache Kafka broker the integration suite assembles from Maven Central
# (scripts/kafka-jars.sh). Idempotent and quick when everything is there.
# The Docker engine is scripts/docker-up.sh's job.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
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
  # Debian starts a redis-server on 6379 on install; the tests start their
  # own on free ports and do not need it.
fi
echo "deps: ok ($(redis-server --version | cut -d' ' -f3); $(java -version 2>&1 | head -1); $(mvn -v 2>/dev/null | head -1 | sed 's/\x1b\[[0-9;]*m//g'))"
