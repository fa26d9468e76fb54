#!/usr/bin/env bash
# The one command that compiles the nora-breaker binary. CI and the Dockerfile
# use the same flags (charts/dockerfile checks that they agree): a static
# binary (no cgo, so it runs on distroless/scratch), no local paths baked in
# (-trimpath), symbols stripped, and the version stamped into main.version.
#
#   VERSION=v1.2.3 OUT=dist/nora-breaker scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
OUT="${OUT:-nora-breaker}"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o "${OUT}" .
