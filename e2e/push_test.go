//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startPushNora starts a nora-breaker with the docker chain registry A
// (reached at addrA), then registry B (at addrB), each upstream with 20 s
// to answer, a stale cache when stale, and env added to its environment.
func (e *ociEnv) startPushNora(t *testing.T, addrA, addrB string, stale bool, env ...string) *nora {
	t.Helper()
	return startNora(t, e.s, filepath.Join(e.dir, "nora"), noraOpts{
		formats: breakerTOML(5, 60*time.Second, "docker") + `[docker]
proxy_timeout = 20
read_timeout = 20
[[docker.upstreams]]
url = "https://registry-a.test:5000"
[[docker.upstreams]]
url = "https://registry-b.test:5001"
`,
		resolve:    map[string]string{"registry-a.test:5000": addrA, "registry-b.test:5001": addrB},
		upstreamCA: e.ca.pemPath,
		stale:      stale,
		env:        env,
	})
}

// pushFront is a counting HTTPS front over a docker-registry that tells it
// the client's scheme was https (X-Forwarded-Proto, as a TLS-terminating
// load balancer does), so the upload Locations it answers are https URLs of
// the name the client addressed.
func pushFront(t *testing.T, name, registry string, e *ociEnv, host string) *front {
	t.Helper()
	var f *front
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: registry})
		pr.Out.Host = pr.In.Host
		pr.Out.Header.Set("X-Forwarded-Proto", "https")
	}}
	f = newFront(t, name, "", rp, e.ca.serverTLS(t, host))
	return f
}

// TestPushGoesToTheAddressedRegistry: pushes through the proxy (crane push,
// which asks the destination "do you have it?" with a HEAD of the tag and of
// each blob before uploading) to registry A of the docker chain A → B,
// where B already holds the image under the same name, as a mirror or a
// replica does. Healthy, the push reaches A. With A slow (every answer
// 1.5 s late, hedge_after 0.5 s), a HEAD that A is slow to answer must
// still be A's answer: B's "yes, I have it" is no answer about A, and crane
// would skip the upload (of the manifest: the push "succeeds" and A has
// nothing; of a blob: the manifest is refused for a blob A never got).
func TestPushGoesToTheAddressedRegistry(t *testing.T) {
	s := loadSuite(t)
	e := &ociEnv{s: s, dir: scenarioDir(t, s), crane: filepath.Join(s.tools, "crane")}
	regA := startDockerRegistry(t, e.dir, "registry-a")
	regB := startDockerRegistry(t, e.dir, "registry-b")
	plain := cleanEnv("HOME=" + e.dir)
	// B holds e2e/promoted:1; the same image is on disk to push to A.
	fileLayer(t, filepath.Join(e.dir, "layer.tar"), helloFile, helloBody)
	pushImage(t, e.dir, e.crane, plain, "layer.tar", regB+"/e2e/promoted:1")
	image := filepath.Join(e.dir, "promoted.tar")
	mustRun(t, e.dir, plain, time.Minute, e.crane, "pull", "--insecure", regB+"/e2e/promoted:1", image)
	digest := registryDigest(t, e.dir, e.crane, plain, regB+"/e2e/promoted:1")
	// A second image on the same layer, under another tag, B holds too
	// (its config differs, so its manifest digest does).
	mustRun(t, e.dir, plain, time.Minute, e.crane, "mutate", "--insecure", "--label", "second=yes",
		"-t", regB+"/e2e/promoted:2", regB+"/e2e/promoted:1")
	second := filepath.Join(e.dir, "promoted-2.tar")
	mustRun(t, e.dir, plain, time.Minute, e.crane, "pull", "--insecure", regB+"/e2e/promoted:2", second)
	digest2 := registryDigest(t, e.dir, e.crane, plain, regB+"/e2e/promoted:2")

	e.ca = newOriginCA(t, e.dir)
	frontA := pushFront(t, "registry-a", regA, e, "registry-a.test")
	frontB := pushFront(t, "registry-b", regB, e, "registry-b.test")
	tp := startToxiproxy(t, s, e.dir)
	toxA := tp.proxy(t, "registry-a", frontA.addr)
	// The harness turns hedging off by default.
	n := e.startPushNora(t, toxA, frontB.addr, true, "NORA_DOCKER_HEDGE_AFTER=0.5")
	env := proxyEnv(e.dir, n, "SSL_CERT_FILE="+n.bundle)
	inA := func(ref string) string {
		r := runClient(t, e.dir, plain, time.Minute, e.crane, "digest", "--insecure", regA+"/"+ref)
		if r.err != nil {
			return "absent"
		}
		return strings.TrimSpace(r.out)
	}
	var wall time.Duration
	push := func(t *testing.T, tarball, ref, want string) {
		t.Helper()
		r := runClient(t, e.dir, env, 2*time.Minute, e.crane, "push", tarball, "registry-a.test:5000/"+ref)
		wall += r.wall
		if r.err != nil {
			t.Errorf("crane push %s: %v\n%s", ref, r.err, tail(r.out, 2000))
		}
		if got := inA(ref); got != want {
			t.Errorf("crane push %s (exit %v): registry A holds %s, want %s\nB saw: %v\n%s", ref, r.err, got, want,
				frontB.pathsMatching("/v2/e2e/"), tail(r.out, 2000))
		}
	}

	t.Run("healthy", func(t *testing.T) {
		b0, _ := frontB.count()
		push(t, image, "e2e/healthy:1", digest)
		if b1, _ := frontB.count(); b1 != b0 {
			t.Errorf("healthy push: registry B saw %d requests: %v", b1-b0, frontB.pathsMatching("/v2/"))
		}
	})
	slowA := func(t *testing.T) {
		tp.addToxic(t, "registry-a", "slow", "latency", map[string]any{"latency": 1500})
		t.Cleanup(func() { tp.removeToxic(t, "registry-a", "slow") })
	}
	// The second image under a tag B does not hold: crane's HEAD of the
	// tag gets A's 404 (B's 404 serves nobody), then it asks A for each
	// blob, which B holds under the same repository.
	t.Run("slow-blobs", func(t *testing.T) {
		slowA(t)
		push(t, second, "e2e/promoted:3", digest2)
		if heads := frontB.pathsMatching("HEAD /v2/e2e/promoted/blobs/"); len(heads) > 0 {
			t.Errorf("registry B was asked %v", heads)
		}
	})
	// The image under the tag B holds it by: crane's HEAD of the tag.
	t.Run("slow-tag", func(t *testing.T) {
		knownProductBug(t, "push-tag-head")
		slowA(t)
		push(t, image, "e2e/promoted:1", digest)
	})
	// The other pushers, healthy, then skopeo with A slow as above: each
	// asks A (its HEAD of each blob) and A ends up holding what was pushed.
	t.Run("skopeo-oras-helm", func(t *testing.T) {
		certs := filepath.Join(e.dir, "skopeo-certs")
		ca, _ := os.ReadFile(n.caPEM)
		writeFile(t, filepath.Join(certs, "nora-ca.crt"), string(ca))
		skopeo := func(ref string) {
			r := runClient(t, e.dir, env, 2*time.Minute, "skopeo", "--insecure-policy", "copy", "--dest-cert-dir", certs,
				"docker-archive:"+second, "docker://registry-a.test:5000/"+ref)
			wall += r.wall
			if r.err != nil {
				t.Errorf("skopeo copy to %s: %v\n%s", ref, r.err, tail(r.out, 2000))
			} else if inA(ref) == "absent" {
				t.Errorf("skopeo copy to %s: registry A holds nothing", ref)
			}
		}
		skopeo("e2e/skopeo:1")
		writeFile(t, filepath.Join(e.dir, "notes", notesFile), notesBody)
		r := runClient(t, filepath.Join(e.dir, "notes"), env, 2*time.Minute, filepath.Join(s.tools, "oras"), "push",
			"--ca-file", n.caPEM, "--artifact-type", "application/vnd.nora-breaker.e2e.notes.v1",
			"registry-a.test:5000/"+notesRepo, notesFile+":text/plain")
		wall += r.wall
		if r.err != nil || inA(notesRepo) != lineAfter(r.out, "Digest:") {
			t.Errorf("oras push: %v, A holds %s, oras says %q\n%s", r.err, inA(notesRepo), lineAfter(r.out, "Digest:"), tail(r.out, 2000))
		}
		helm := filepath.Join(s.tools, "helm")
		helmEnv := slices.Concat(env, helmDirs(filepath.Join(e.dir, "helm-push")))
		tgz := packageChart(t, e.dir, helm, helmEnv)
		r = runClient(t, e.dir, helmEnv, 2*time.Minute, helm, "push", tgz, "oci://registry-a.test:5000/charts", "--ca-file", n.caPEM)
		wall += r.wall
		if r.err != nil || inA(chartsRepo) == "absent" {
			t.Errorf("helm push: %v, A holds %s\n%s", r.err, inA(chartsRepo), tail(r.out, 2000))
		}
		slowA(t)
		skopeo("e2e/promoted:4")
	})
	summary("crane push to registry A of the chain A → B (B holding the blobs, and the image under one tag)",
		"A answering 1.5 s late, hedge_after 0.5 s",
		fmt.Sprintf("A holds %s (tag B lacks), %s (tag B holds)", inA("e2e/promoted:3"), inA("e2e/promoted:1")),
		wall, frontA.seen()+" "+frontB.seen())
}

// TestPushTagCheckWithATokenGoesToTheAddressedRegistry: crane push of a tag
// that registry B holds with the same digest to registry A, which wants
// bearer tokens from its own realm (a front over docker-registry, handing
// out tokens for any scope) and answers crane's HEAD of the tag 503 once.
// crane obtains its token through the proxy, with the scope
// repository:e2e/promoted:push,pull; the proxy sees that, so the HEAD it
// sends with that token is part of a push and gets A's 503 (crane retries
// it, then pushes), never B's 200, which makes crane skip the push with
// "existing manifest" and leave A without the image.
func TestPushTagCheckWithATokenGoesToTheAddressedRegistry(t *testing.T) {
	s := loadSuite(t)
	e := &ociEnv{s: s, dir: scenarioDir(t, s), crane: filepath.Join(s.tools, "crane")}
	regA := startDockerRegistry(t, e.dir, "registry-a")
	regB := startDockerRegistry(t, e.dir, "registry-b")
	plain := cleanEnv("HOME=" + e.dir)
	fileLayer(t, filepath.Join(e.dir, "layer.tar"), helloFile, helloBody)
	pushImage(t, e.dir, e.crane, plain, "layer.tar", regB+"/e2e/promoted:1")
	image := filepath.Join(e.dir, "promoted.tar")
	mustRun(t, e.dir, plain, time.Minute, e.crane, "pull", "--insecure", regB+"/e2e/promoted:1", image)
	digest := registryDigest(t, e.dir, e.crane, plain, regB+"/e2e/promoted:1")

	e.ca = newOriginCA(t, e.dir)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: regA})
		pr.Out.Host = pr.In.Host
		pr.Out.Header.Set("X-Forwarded-Proto", "https")
		pr.Out.Header.Del("Authorization")
	}}
	var tokens, flaked atomic.Int64
	var scopes sync.Map
	frontA := newFront(t, "registry-a", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			n := tokens.Add(1)
			scopes.Store(r.URL.Query().Get("scope"), true)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"token":"tok-%d","expires_in":300}`, n)
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://registry-a.test:5000/token",service="registry-a"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodHead && r.URL.Path == "/v2/e2e/promoted/manifests/1" && flaked.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}), e.ca.serverTLS(t, "registry-a.test"))
	frontB := pushFront(t, "registry-b", regB, e, "registry-b.test")
	n := e.startPushNora(t, frontA.addr, frontB.addr, false)
	r := runClient(t, e.dir, proxyEnv(e.dir, n, "SSL_CERT_FILE="+n.bundle), 2*time.Minute,
		e.crane, "push", image, "registry-a.test:5000/e2e/promoted:1")
	if r.err != nil {
		t.Errorf("crane push: %v\n%s", r.err, tail(r.out, 2000))
	}
	var asked []string
	scopes.Range(func(k, _ any) bool { asked = append(asked, k.(string)); return true })
	if !slices.ContainsFunc(asked, func(sc string) bool {
		return strings.HasPrefix(sc, "repository:e2e/promoted:") && strings.Contains(sc, "push")
	}) {
		t.Errorf("crane asked no push token through the proxy: scopes %q", asked)
	}
	got := "absent"
	if d := runClient(t, e.dir, plain, time.Minute, e.crane, "digest", "--insecure", regA+"/e2e/promoted:1"); d.err == nil {
		got = strings.TrimSpace(d.out)
	}
	if got != digest {
		t.Errorf("after crane push (exit %v) registry A holds %s, want %s; B saw %v\n%s", r.err, got, digest,
			frontB.pathsMatching("/v2/e2e/"), tail(r.out, 2000))
	}
	summary("crane push with a push token to registry A of the chain A → B (B holding the tag)",
		"A answering the HEAD of the tag 503 once", "A holds "+got, r.wall, frontA.seen()+" "+frontB.seen())
}
