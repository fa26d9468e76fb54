#!/usr/bin/env bash
# The project's one test command (README: "Two commands"). CI runs exactly
# this. It installs what the suites need (helm, registries, clients) on first
# use, so it works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== build (the same command the Docker image uses)"
OUT=/tmp/nora-breaker-build-check bash scripts/build.sh && /tmp/nora-breaker-build-check version
# Developers run the proxy on their own machines too: the binary must build
# for macOS (the tests and their harnesses are Linux's).
GOOS=darwin GOARCH=arm64 go build -o /dev/null .

echo "== redis-server for the shared-state tests (installed once)"
bash sharedstate/install-redis.sh

echo "== squid for the parent-proxy tests (installed once)"
bash scripts/install-squid.sh

echo "== unit and integration tests (race detector)"
go test -race -count=1 -timeout 20m ./...

echo "== fuzzing, bounded (the request framing check against net/http's own reading; host names)"
# Fuzz targets also run their seed corpus in the go test above; this gives
# the two that guard the transparent path a short run of new inputs.
go test -run '^$' -fuzz '^FuzzFramingScan$' -fuzztime 30s ./clientconn
go test -run '^$' -fuzz '^FuzzHostIsIdempotent$' -fuzztime 10s ./internal/hostport

echo "== Helm chart tests"
bash charts/test.sh

echo "== end-to-end suite (real registries, clients and toxiproxy on loopback)"
bash e2e/run.sh

# bench/ and soak/ are Go modules of their own (their dependencies stay out
# of the product's go.mod), so the root's go vet and go test do not reach
# them.
echo "== benchmark and soak harnesses: vet and tests (modules bench/ and soak/)"
for mod in bench soak; do
  (. scripts/lib.sh && cd "$mod" && retry 300 go mod download && go vet ./... &&
    go test -race -count=1 -timeout 5m ./...)
done

echo "== chaos soak (short; the full 2-minute run is bash soak/run.sh)"
bash soak/run.sh 40s

echo "== benchmark harness smoke run (figures for BENCHMARKS.md come from a full run)"
go -C bench run . --quick --no-peers
