#!/usr/bin/env bash
# docker-up.sh: make sure a Docker engine answers on this machine, so the
# integration suite (testcontainers-go) and scripts/build-images.sh can run.
#
# Idempotent: an engine that already answers is left alone. On a fresh Debian
# machine (CI, run as root) it installs Debian's docker.io and starts dockerd
# in the background.
#
# dockerd runs with --bridge=none --iptables=false because the machines this
# project builds on cannot create bridges or touch iptables; every container
# of the suite uses host networking instead.
#
# Environment:
#   DOCKER_UP_TIMEOUT  seconds to wait for `docker info` (default 60)
#   DOCKERD_LOG        dockerd's log file (default /var/log/dockerd-notification-worker.log)
#   DOCKERD_PIDFILE    dockerd's pid file (default /var/run/dockerd-notification-worker.pid)
set -euo pipefail

timeout_s=${DOCKER_UP_TIMEOUT:-60}
log=${DOCKERD_LOG:-/var/log/dockerd-notification-worker.log}
pidfile=${DOCKERD_PIDFILE:-/var/run/dockerd-notification-worker.pid}

say() { printf 'docker-up: %s\n' "$*" >&2; }

engine_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
  say "engine already answers; nothing to do"
  exit 0
fi

# A docker CLI alone is not enough (some images ship the client without the
# daemon): install the package when either is missing.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    say "dockerd is not installed and this is not root: install docker.io first"
    exit 1
  fi
  say "installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

# A previous run's dockerd may still be starting up; do not start a second one.
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  say "dockerd already running (pid $(cat "$pidfile")); waiting for it"
else
  if [ "$(id -u)" -ne 0 ]; then
    say "no engine answers and starting dockerd needs root"
    exit 1
  fi
  say "starting dockerd (log: $log)"
  mkdir -p "$(dirname "$log")" "$(dirname "$pidfile")"
  # setsid detaches dockerd from this script's session, so it outlives the
  # CI step (and a Ctrl-C in the shell that ran this script).
  setsid dockerd --bridge=none --iptables=false --pidfile "$pidfile" \
    >>"$log" 2>&1 </dev/null &
fi

deadline=$((SECONDS + timeout_s))
until engine_answers; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    say "no answer from the engine after ${timeout_s}s; last lines of $log:"
    tail -n 20 "$log" >&2 || true
    exit 1
  fi
  sleep 0.5
done
say "engine answers: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null)"
