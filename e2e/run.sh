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

. scripts/lib.sh

install_apt() {
  local missing=()
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v skopeo >/dev/null || missing+=(skopeo)
  [ -d /usr/share/maven-repo/org/apache/maven/plugins/maven-install-plugin ] || missing+=(libmaven-install-plugin-java)
  [ -d /usr/share/maven-repo/org/apache/maven/plugins/maven-dependency-plugin ] || missing+=(libmaven-dependency-plugin-java)
  [ -d /usr/share/maven-repo/junit/junit ] || missing+=(junit4)
  # The status page test (headless browser) and the Prometheus test (a real
  # server scraping the proxy, promtool).
  command -v chromium >/dev/null || missing+=(chromium)
  command -v prometheus >/dev/null && command -v promtool >/dev/null || missing+=(prometheus)
  # containerd's daemon and ctr (the containerd and Docker Hub scenarios) and
  # dpkg-dev's dpkg-scanpackages (the apt scenario builds its own repository).
  command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
  command -v dpkg-scanpackages >/dev/null || missing+=(dpkg-dev)
  # squid, the corporate parent proxy of the parent scenario.
  command -v squid >/dev/null || [ -x /usr/sbin/squid ] || missing+=(squid)
  # curl and OpenSSL's s_client, clients that keep their TLS sessions (the
  # session resumption scenario).
  command -v curl >/dev/null || missing+=(curl)
  command -v openssl >/dev/null || missing+=(openssl)
  [ ${#missing[@]} -eq 0 ] && return 0
  # The packaged servers (docker-registry, containerd) must not start as services: the
  # tests start their own instances on loopback.
  apt_install "${missing[@]}"
}

install_verdaccio() {
  [ -x "$WORK/verdaccio/node_modules/.bin/verdaccio" ] && return 0
  mkdir -p "$WORK/verdaccio"
  cat >"$WORK/verdaccio/package.json" <<'JSON'
{"name":"e2e-verdaccio","private":true,
 "dependencies":{"verdaccio":"6.8.0"},
 "overrides":{"node-fetch":"2.7.0"}}
JSON
  (cd "$WORK/verdaccio" && retry 600 npm install --no-audit --no-fund --loglevel=error)
}

# install_node_client DIR PACKAGE VERSION: one npm client in a folder of its
# own under $WORK/node-clients (yarn 1 and yarn 4 both name their binary
# yarn), reinstalled when the pinned version changes. The versions are the
# ones e2e/npm_clients_test.go names.
install_node_client() {
  local dir=$WORK/node-clients/$1 pkg=$2 version=$3
  if [ -f "$dir/node_modules/$pkg/package.json" ] &&
    [ "$(node -p "require('$dir/node_modules/$pkg/package.json').version")" = "$version" ]; then
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  printf '{"name":"e2e-%s","private":true,"dependencies":{"%s":"%s"}}\n' "$1" "$pkg" "$version" >"$dir/package.json"
  (cd "$dir" && retry 600 npm install --no-audit --no-fund --loglevel=error)
}

install_node_clients() {
  install_node_client pnpm pnpm 12.4.2
  install_node_client yarn1 yarn 1.22.22
  # yarn 4 as its bundled build from the npm registry: corepack would fetch
  # it from yarn's own download host at run time.
  install_node_client yarn4 @yarnpkg/cli-dist 4.18.1
}

install_go_tools() {
  [ -x "$TOOLS/crane" ] || GOBIN=$TOOLS GOFLAGS=-mod=mod retry 600 go install github.com/google/go-containerregistry/cmd/crane@v0.22.1
  # oras pulls OCI artifacts in the OCI clients scenario.
  [ -x "$TOOLS/oras" ] || GOBIN=$TOOLS GOFLAGS=-mod=mod retry 600 go install oras.land/oras/cmd/oras@v1.3.6
  install_toxiproxy "$TOOLS"
  # helm renders the chart's PrometheusRule for the Prometheus test and
  # pulls a chart in the OCI clients scenario (the chart tests install the
  # same binary in the same place).
  install_helm "$TOOLS"
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
  install_node_clients
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
