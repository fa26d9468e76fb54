#!/usr/bin/env bash
# End-to-end suite entry point: installs the real servers, clients and fault
# injector this suite drives (idempotently, every download bounded by a
# timeout and retried once), builds nora-breaker, then runs the Go tests
# tagged e2e. Everything the tests start listens on 127.0.0.1.
#
#   bash e2e/run.sh              install + test
#   E2E_SKIP_INSTALL=1 bash e2e/run.sh   test only (tools already in place)
#   E2E_RUN=TestDocker bash e2e/run.sh   one scenario
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$ROOT/e2e/.work
TOOLS=$ROOT/.tools
mkdir -p "$WORK" "$TOOLS"

# retry CMD...: run a download step with a 10-minute bound, once more on failure.
retry() {
  local attempt
  for attempt in 1 2; do
    if timeout 600 "$@"; then return 0; fi
    echo "e2e/run.sh: '$*' failed (attempt $attempt)" >&2
  done
  return 1
}

install_apt() {
  local missing=()
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v skopeo >/dev/null || missing+=(skopeo)
  [ -d /usr/share/maven-repo/org/apache/maven/plugins/maven-install-plugin ] || missing+=(libmaven-install-plugin-java)
  [ -d /usr/share/maven-repo/org/apache/maven/plugins/maven-dependency-plugin ] || missing+=(libmaven-dependency-plugin-java)
  [ -d /usr/share/maven-repo/junit/junit ] || missing+=(junit4)
  [ ${#missing[@]} -eq 0 ] && return 0
  # Keep packaged servers (docker-registry) from starting as services: the
  # tests start their own instances on loopback.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod 755 /usr/sbin/policy-rc.d
  # Another apt run (an unattended one, a neighbour's install) may hold the
  # lock for a while: wait for it rather than fail.
  retry apt-get -o DPkg::Lock::Timeout=300 update -q || { sleep 20; retry apt-get -o DPkg::Lock::Timeout=300 update -q; }
  DEBIAN_FRONTEND=noninteractive retry apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
}

install_verdaccio() {
  [ -x "$WORK/verdaccio/node_modules/.bin/verdaccio" ] && return 0
  mkdir -p "$WORK/verdaccio"
  cat >"$WORK/verdaccio/package.json" <<'JSON'
{"name":"e2e-verdaccio","private":true,
 "dependencies":{"verdaccio":"6.8.0"},
 "overrides":{"node-fetch":"2.7.0"}}
JSON
  (cd "$WORK/verdaccio" && retry npm install --no-audit --no-fund --loglevel=error)
}

install_go_tools() {
  [ -x "$TOOLS/crane" ] || GOBIN=$TOOLS GOFLAGS=-mod=mod retry go install github.com/google/go-containerregistry/cmd/crane@v0.22.1
  if [ ! -x "$TOOLS/toxiproxy-server" ]; then
    GOBIN=$TOOLS GOFLAGS=-mod=mod retry go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
    mv "$TOOLS/server" "$TOOLS/toxiproxy-server"
  fi
}

# stop_leftovers ends, by PID, every server the tests recorded that is still
# running (a test binary killed by its timeout cannot run its cleanups). The
# tests start each server as the leader of its own process group, so a
# recorded PID that no longer leads its group was reused and is left alone.
stop_leftovers() {
  [ -f "$WORK/pids" ] || return 0
  local pid name
  while read -r pid name; do
    if [ "$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')" = "$pid" ]; then
      echo "e2e/run.sh: stopping leftover $name (pid $pid)" >&2
      kill -TERM -- "-$pid" 2>/dev/null || true
    fi
  done <"$WORK/pids"
  rm -f "$WORK/pids"
}
stop_leftovers
trap stop_leftovers EXIT

start=$(date +%s)
if [ -z "${E2E_SKIP_INSTALL:-}" ]; then
  echo "== e2e: installs"
  # Module installs run outside the project's module so its go.mod is untouched.
  (cd "$WORK" && install_go_tools) &
  gopid=$!
  install_apt
  install_verdaccio
  wait "$gopid"
fi
installed=$(date +%s)

echo "== e2e: build nora-breaker"
go build -o "$WORK/nora-breaker" .

echo "== e2e: tests"
export E2E_WORK=$WORK E2E_TOOLS=$TOOLS E2E_BINARY=$WORK/nora-breaker
status=0
go test -tags e2e -count=1 -v -timeout 30m ${E2E_RUN:+-run "$E2E_RUN"} ./e2e/ || status=$?
done_at=$(date +%s)
echo "== e2e: installs $((installed - start))s, build+tests $((done_at - installed))s"
exit $status
