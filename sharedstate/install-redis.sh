#!/usr/bin/env bash
# Installs redis-server (the Debian package) for the sharedstate fleet tests,
# which start their own servers on 127.0.0.1 and stop them by PID. The
# package's service must not start: policy-rc.d answers 101 during the
# install. Idempotent: does nothing when redis-server is already on PATH.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  echo "redis-server present: $(redis-server --version)"
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
policy=/usr/sbin/policy-rc.d
created=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  created=1
fi
cleanup() { if [ -n "$created" ]; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends redis-server
redis-server --version
