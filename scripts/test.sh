#!/usr/bin/env bash
# The project's one test command (README: "Run the tests").
set -euo pipefail
cd "$(dirname "$0")/.."
go test -race -count=1 -timeout 20m ./...
