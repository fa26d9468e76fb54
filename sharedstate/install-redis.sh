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
. "$(dirname "$0")/../scripts/lib.sh"
apt_install redis-server
redis-server --version
