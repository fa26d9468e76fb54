#!/usr/bin/env bash
# Installs what a full benchmark run needs beyond Go: the peer proxies it
# compares against (tinyproxy and squid) and redis-server for the fleet rows
# (shared state), all from Debian, without letting their packages start
# system services: the harness starts its own instances on 127.0.0.1 with
# private config, pid and log paths, and stops them by PID.
set -euo pipefail
here="$(dirname "$0")"

if command -v tinyproxy >/dev/null 2>&1 && command -v squid >/dev/null 2>&1; then
  echo "tinyproxy and squid already installed"
else
  . "$here/../scripts/lib.sh"
  apt_install tinyproxy squid
  command -v tinyproxy
  command -v squid
fi
# Without it the fleet rows are printed as skipped.
bash "$here/../sharedstate/install-redis.sh"
