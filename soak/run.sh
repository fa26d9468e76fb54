#!/usr/bin/env bash
# Chaos soak entry point: installs toxiproxy into .tools/ if it is not there
# yet (bounded by a timeout, retried once; e2e/run.sh installs the same
# binary), builds nora-breaker with scripts/build.sh, then runs the soak for
# the given duration. The soak is a Go module of its own (soak/go.mod), so it
# runs with go -C soak; every path it is given is absolute. Everything
# listens on 127.0.0.1.
#
#   bash soak/run.sh          full run, 2 minutes
#   bash soak/run.sh 40s      the CI run
#   bash soak/run.sh 40s -stale=false -reject-p99=10ms   extra flags go to the soak
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-2m}"
shift || true
ROOT=$PWD
TOOLS=$ROOT/.tools
WORK=$ROOT/soak/.work
mkdir -p "$TOOLS" "$WORK"

. scripts/lib.sh
install_toxiproxy "$TOOLS"

OUT="$WORK/nora-breaker" scripts/build.sh
# The soak stops its own children; the outer bound only guards CI from a
# wedged run (duration + setup + up to 60 s of settling).
exec timeout 900 go -C soak run . -duration "$DURATION" -bin "$WORK/nora-breaker" \
  -toxiproxy "$TOOLS/toxiproxy-server" -work "$WORK" "$@"
