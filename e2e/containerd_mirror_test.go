//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// containerd with a hosts.toml mirror: the Docker Hub scenario's hosts,
// with mirror.gcr.io listed first in nora's docker chain and in
// containerd's hosts.toml for docker.io and for ghcr.io. containerd asks
// the mirror with ?ns=<the registry the image is from>; the mirror is a
// multi-registry one, holding ghcr.io's team/app:1 next to Docker Hub's
// library/hello:1, and Docker Hub has a team/app:1 of its own (a name
// anybody can register there).
const (
	mirrorDockerRef = "docker.io/library/hello:1"
	mirrorGhcrRef   = "ghcr.io/team/app:1"
)

// mirrorEnv is the hub scenario plus the ghcr image and the hub's
// namesake.
type mirrorEnv struct {
	*hubEnv
	ghcrDigest, hubAppDigest string
}

// setupMirror starts the hub scenario's hosts and pushes team/app:1 to the
// mirror (ghcr.io's content) and to the hub (another image).
func setupMirror(t *testing.T, s suite) *mirrorEnv {
	t.Helper()
	e := &mirrorEnv{hubEnv: setupHub(t, s)}
	plain := cleanEnv("HOME=" + e.dir)
	fileLayer(t, filepath.Join(e.dir, "ghcr.tar"), "app.txt", "team/app from ghcr.io\n")
	pushImage(t, e.dir, e.crane, plain, "ghcr.tar", e.mirrorAddr+"/team/app:1")
	fileLayer(t, filepath.Join(e.dir, "namesake.tar"), "app.txt", "team/app registered on Docker Hub by somebody else\n")
	pushImage(t, e.dir, e.crane, plain, "namesake.tar", e.hubAddr+"/team/app:1")
	e.ghcrDigest = registryDigest(t, e.dir, e.crane, plain, e.mirrorAddr+"/team/app:1")
	e.hubAppDigest = registryDigest(t, e.dir, e.crane, plain, e.hubAddr+"/team/app:1")
	if e.ghcrDigest == e.hubAppDigest {
		t.Fatal("the two team/app images have one digest")
	}
	return e
}

// startMirrorNora starts a nora-breaker whose docker chain is the mirror,
// then Docker Hub, with a stale cache, under deny_unlisted.
func (e *mirrorEnv) startMirrorNora(t *testing.T) *nora {
	t.Helper()
	resolve := map[string]string{}
	for host, addr := range e.tox {
		resolve[host+":443"] = addr
	}
	return startNora(t, e.s, filepath.Join(e.dir, "nora-mirror-first"), noraOpts{
		formats: breakerTOML(hubThreshold, hubReset, "docker") + `[docker]
proxy_timeout = 5
read_timeout = 5
[[docker.upstreams]]
url = "https://mirror.gcr.io"
[[docker.upstreams]]
url = "https://registry-1.docker.io"
`,
		resolve:    resolve,
		upstreamCA: e.upstreamCA,
		stale:      true,
	})
}

// mirrorPull pulls ref with a new containerd daemon whose hosts.toml for
// docker.io and ghcr.io lists mirror.gcr.io before the registry itself,
// each host trusting the interception CA; it returns the run and the
// image's digest ("" when the pull failed).
func (e *mirrorEnv) mirrorPull(t *testing.T, n *nora, ref string) (clientRun, string) {
	t.Helper()
	e.ctrs++
	dir := filepath.Join(e.dir, fmt.Sprintf("containerd-%d", e.ctrs))
	roots := filepath.Join(dir, "roots.pem")
	sys, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	pub, _ := os.ReadFile(e.publicPEM)
	writeFile(t, roots, string(sys)+"\n"+string(pub))
	c := startContainerd(t, dir, containerdTrust{proxyURL: n.proxyURL, noraCA: n.caPEM, rootsPEM: roots})
	defer c.proc.stop()
	for registry, server := range map[string]string{"docker.io": "https://" + hubHost, "ghcr.io": "https://ghcr.io"} {
		writeFile(t, filepath.Join(c.hostsDir, registry, "hosts.toml"), fmt.Sprintf(`server = %q
ca = %q

[host."https://%s"]
  capabilities = ["pull", "resolve"]
  ca = %q
`, server, n.caPEM, mirrorHost, n.caPEM))
	}
	r := c.pull(t, ref, "")
	if r.err != nil {
		return r, ""
	}
	return r, c.digest(t, ref)
}

// mustMirrorPull is mirrorPull that must give want.
func (e *mirrorEnv) mustMirrorPull(t *testing.T, n *nora, ref, want, what string) clientRun {
	t.Helper()
	r, d := e.mirrorPull(t, n, ref)
	if d != want {
		t.Fatalf("%s: containerd pull of %s: digest %q, want %s (%v)\n%s", what, ref, d, want, r.err, tail(r.out, 3000))
	}
	return r
}

// TestContainerdMirror: containerd pulls docker.io and ghcr.io images
// through a hosts.toml mirror (mirror.gcr.io, asked with ?ns=): healthy
// from the mirror; with the mirror refusing connections the docker.io
// image from Docker Hub, the next upstream, which is docker.io; with
// every host down both from stale copies; digests the origin's. The known
// bug's case: with the mirror down, the ghcr.io pull must never be
// answered by Docker Hub's namesake.
func TestContainerdMirror(t *testing.T) {
	e := setupMirror(t, loadSuite(t))
	n := e.startMirrorNora(t)
	all := []string{hubHost, realmHost, cdnHost, mirrorHost, storageHost}
	mirror, hub := e.fronts[mirrorHost], e.fronts[hubHost]
	marks := []frontMark{markFront(mirror), markFront(hub), markFront(e.fronts[storageHost])}

	healthyDocker := e.mustMirrorPull(t, n, mirrorDockerRef, e.publicDigest, "healthy")
	healthyGhcr := e.mustMirrorPull(t, n, mirrorGhcrRef, e.ghcrDigest, "healthy")
	for _, ns := range []string{"/v2/library/hello/manifests/1?ns=docker.io", "/v2/team/app/manifests/1?ns=ghcr.io"} {
		if len(mirror.requestsMatching(ns)) == 0 {
			t.Fatalf("healthy: the mirror was never asked %s; it saw %v", ns, mirror.requestsMatching("/manifests/"))
		}
	}
	if m := e.manifestsAtHub(); m != 0 {
		t.Fatalf("healthy: Docker Hub saw %d manifest requests; the mirror serves both", m)
	}
	untouched(t, n, mirrorKey, "healthy")
	n.waitStaleCommitted(t)

	e.setDown(t, true, mirrorHost)
	hub0 := e.manifestsAtHub()
	down := e.mustMirrorPull(t, n, mirrorDockerRef, e.publicDigest, "mirror refusing connections")
	if e.manifestsAtHub() == hub0 {
		t.Fatal("mirror refusing connections: the docker.io pull was not served by Docker Hub")
	}
	if n.metric(t, "nora_sidecar_fallback_total", fmt.Sprintf("from=%q", mirrorKey), fmt.Sprintf("to=%q", hubKey)) == 0 {
		t.Fatal("mirror refusing connections: no fallback from the mirror to Docker Hub counted")
	}
	t.Run("ghcr-never-from-docker-hub", func(t *testing.T) {
		knownProductBug(t, "issue 27.1")
		r, d := e.mirrorPull(t, n, mirrorGhcrRef)
		switch d {
		case e.ghcrDigest:
		case e.hubAppDigest:
			t.Fatalf("mirror refusing connections: the pull of %s (asked with ?ns=ghcr.io) got Docker Hub's team/app:1 (%s); "+
				"only ghcr.io, a mirror serving it or its stale copy (%s) may answer", mirrorGhcrRef, d, e.ghcrDigest)
		default:
			t.Fatalf("mirror refusing connections: the pull of %s failed (digest %q), though a stale copy of ghcr.io's answer was kept: %v\n%s",
				mirrorGhcrRef, d, r.err, tail(r.out, 2000))
		}
	})

	n.waitStaleCommitted(t)
	e.setDown(t, true, all...)
	defer e.setDown(t, false, all...)
	stale0 := n.metric(t, "nora_sidecar_stale_served_total")
	staleDocker := e.mustMirrorPull(t, n, mirrorDockerRef, e.publicDigest, "every host down")
	staleGhcr := e.mustMirrorPull(t, n, mirrorGhcrRef, e.ghcrDigest, "every host down")
	if n.metric(t, "nora_sidecar_stale_served_total") == stale0 {
		t.Fatal("every host down: no answer counted as stale")
	}
	summary("containerd (ctr image pull, hosts.toml: mirror.gcr.io first, ?ns=)", "mirror refusing connections, then every host",
		fmt.Sprintf("healthy from the mirror (docker.io %.2fs, ghcr.io %.2fs); mirror down: docker.io from Docker Hub %.2fs; "+
			"every host down: docker.io %.2fs and ghcr.io %.2fs from stale copies; digests the origin's",
			healthyDocker.wall.Seconds(), healthyGhcr.wall.Seconds(), down.wall.Seconds(), staleDocker.wall.Seconds(), staleGhcr.wall.Seconds()),
		healthyDocker.wall+healthyGhcr.wall+down.wall+staleDocker.wall+staleGhcr.wall, seenSince(marks...))
}
