package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// nsRegistry is a registry that serves one image, team/app:1, with a body
// naming who it is.
func nsRegistry(t *testing.T, who string, down *atomic.Bool) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if down != nil && down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/v2/team/app/manifests/1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		fmt.Fprintf(w, `{"schemaVersion":2,"from":%q}`, who)
	})
}

// TestFallbackDockerNamespaceNamesTheRegistry: a multi-registry mirror is
// first in the docker chain and Docker Hub (which serves docker.io) second.
// containerd asks the mirror with ?ns=<the registry the image is from>.
// With the mirror down, a ghcr.io image is never answered by Docker Hub's
// namesake: a stale copy of the mirror's answer, else the terminal answer.
// A docker.io image fails over to Docker Hub as before. It failed before
// the format was asked whether a candidate may answer: Docker Hub served
// its team/app:1 to the ghcr.io pull.
func TestFallbackDockerNamespaceNamesTheRegistry(t *testing.T) {
	var mirrorDown atomic.Bool
	mirror := nsRegistry(t, "the mirror's copy of ghcr.io", &mirrorDown)
	hub := nsRegistry(t, "somebody's team/app on Docker Hub", nil)
	dir := t.TempDir()
	tp, logs := ixStartProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 100
[registries]
enable = "docker"
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
serves = ["docker.io"]
[sidecar]
stale_dir = %q
`, mirror.URL, hub.URL, dir))
	keys := fbKeys(t, tp, "docker")
	c := proxyClient(t, tp, nil)
	ghcrPull := mirror.URL + "/v2/team/app/manifests/1?ns=ghcr.io"
	hdr := fbHeader("Accept", "application/vnd.oci.image.manifest.v1+json")

	resp, body := request(t, c, http.MethodGet, ghcrPull, hdr)
	if resp.StatusCode != 200 || !strings.Contains(body, "the mirror's copy") {
		t.Fatalf("healthy: %d %q", resp.StatusCode, body)
	}
	fbWaitStored(t, tp, "docker", ghcrPull, hdr)

	mirrorDown.Store(true)
	hub0 := hub.hits.Load()
	resp, body = request(t, c, http.MethodGet, ghcrPull, hdr)
	if strings.Contains(body, "Docker Hub") || hub.hits.Load() != hub0 {
		t.Fatalf("mirror down: the ghcr.io pull was answered by Docker Hub (%d hits): %d %q",
			hub.hits.Load()-hub0, resp.StatusCode, body)
	}
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "true" || !strings.Contains(body, "the mirror's copy") {
		t.Fatalf("mirror down: %d stale=%q %q, want the stale copy of the mirror's answer", resp.StatusCode,
			resp.Header.Get("X-Nora-Stale"), body)
	}
	var line string
	for _, l := range strings.Split(logs.waitFor(t, `"result":"stale"`), "\n") {
		if strings.Contains(l, `"result":"stale"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"query":"ns=ghcr.io"`) ||
		!strings.Contains(line, fmt.Sprintf(`{"key":%q,"skipped":"not_serving"}`, keys[1])) {
		t.Fatalf("the log line does not show ns and the candidate skipped:\n%s", line)
	}

	// Never stored: no copy to fall back on, so the addressed mirror's own
	// failure is the answer.
	resp, body = request(t, c, http.MethodGet, mirror.URL+"/v2/team/app/manifests/1?ns=quay.io", hdr)
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(body, "Docker Hub") || hub.hits.Load() != hub0 {
		t.Fatalf("mirror down, nothing kept: %d %q (Docker Hub hits %d)", resp.StatusCode, body, hub.hits.Load()-hub0)
	}

	resp, body = request(t, c, http.MethodGet, mirror.URL+"/v2/team/app/manifests/1?ns=docker.io", hdr)
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] || !strings.Contains(body, "Docker Hub") {
		t.Fatalf("mirror down: the docker.io pull was not failed over to Docker Hub: %d %v %q",
			resp.StatusCode, resp.Header, body)
	}
}
