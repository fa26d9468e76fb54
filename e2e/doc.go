// Package e2e is nora-breaker's end-to-end suite: it drives the built binary
// with real registry servers (docker-registry, verdaccio, PEP 503 and Maven
// folders over python3 -m http.server, a file-based Go module proxy), real
// clients (crane, skopeo, oras, helm, containerd, npm, pnpm, yarn 1 and 4,
// pip, mvn, go, cargo, apt, curl) and real faults injected by toxiproxy, all
// on 127.0.0.1. The tests carry the build tag e2e; run them with
// `bash e2e/run.sh`, which installs the tools first. This file holds no
// code: it keeps the package buildable, and so `go vet ./...` clean, without
// the tag.
package e2e
