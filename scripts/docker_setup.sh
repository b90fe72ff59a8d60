#!/usr/bin/env bash
# The docker backend's setup (`make docker`): install the engine and debootstrap where they are missing and this
# machine allows it (root, Debian's apt), start dockerd when no engine answers, then build the base image from
# Debian packages (`pivotgym sandbox build`: no registry is needed). Where any step cannot be done it says why
# and exits 0: the docker tests then skip, each saying what is missing.
set -uo pipefail
PIVOTGYM=${1:-.venv/bin/pivotgym}
LOG=${PIVOTGYM_DOCKERD_LOG:-/var/tmp/pivotgym-dockerd.log}

skip() { echo "warning: no docker backend here: $*; the docker tests will skip" >&2; exit 0; }
engine_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if ! command -v dockerd >/dev/null 2>&1 && ! engine_up || ! command -v debootstrap >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] || skip "installing docker.io and debootstrap needs root"
  command -v apt-get >/dev/null 2>&1 || skip "no apt-get to install docker.io and debootstrap with"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null \
    || skip "apt-get install docker.io debootstrap failed"
fi
if ! engine_up; then
  [ "$(id -u)" = 0 ] || skip "no Docker engine answers and starting dockerd needs root"
  setsid nohup dockerd >"$LOG" 2>&1 < /dev/null &
  for _ in $(seq 60); do engine_up && break; sleep 1; done
  engine_up || skip "dockerd did not come up in 60 s (its log: $LOG): $(tail -n 3 "$LOG" | tr '\n' ' ')"
fi
"$PIVOTGYM" sandbox build || skip "the base image could not be built (see above)"
