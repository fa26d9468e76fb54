#!/usr/bin/env bash
# Chaos soak entry point: installs toxiproxy into .tools/ if it is not there
# yet (bounded by a timeout, retried once; e2e/run.sh installs the same
# binary), builds nora-breaker with scripts/build.sh, then runs the soak
# (go run ./soak) for the given duration. Everything listens on 127.0.0.1.
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

retry() {
  local attempt
  for attempt in 1 2; do
    if timeout 600 "$@"; then return 0; fi
    echo "soak/run.sh: '$*' failed (attempt $attempt)" >&2
  done
  return 1
}

if [ ! -x "$TOOLS/toxiproxy-server" ]; then
  GOBIN=$TOOLS GOFLAGS=-mod=mod retry go install \
    github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 github.com/Shopify/toxiproxy/v2/cmd/cli@v2.12.0
  mv "$TOOLS/server" "$TOOLS/toxiproxy-server"
  if [ -x "$TOOLS/cli" ]; then mv "$TOOLS/cli" "$TOOLS/toxiproxy-cli"; fi
fi

OUT="$WORK/nora-breaker" scripts/build.sh
# The soak stops its own children; the outer bound only guards CI from a
# wedged run (duration + setup + up to 60 s of settling).
exec timeout 900 go run ./soak -duration "$DURATION" -bin "$WORK/nora-breaker" \
  -toxiproxy "$TOOLS/toxiproxy-server" -work "$WORK" "$@"
