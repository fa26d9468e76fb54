//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSlowRegistryKeepsItsChallenge: crane push and crane digest (a pull's
// first steps) through the proxy to registry A of the docker chain A → B,
// where A wants bearer tokens from its own realm and answers 1.5 s late,
// well within proxy_timeout, and B wants none (hedge_after 0.5 s). crane
// pings /v2/ first to learn whether A wants a token; a hedge of the ping
// handed it B's 200, so crane sent A everything without a token and both
// failed on A's 401. The ping waits for A's own challenge; both succeed.
func TestSlowRegistryKeepsItsChallenge(t *testing.T) {
	s := loadSuite(t)
	e := &ociEnv{s: s, dir: scenarioDir(t, s), crane: filepath.Join(s.tools, "crane")}
	regA := startDockerRegistry(t, e.dir, "registry-a")
	regB := startDockerRegistry(t, e.dir, "registry-b")
	plain := cleanEnv("HOME=" + e.dir)
	fileLayer(t, filepath.Join(e.dir, "layer.tar"), helloFile, helloBody)
	pushImage(t, e.dir, e.crane, plain, "layer.tar", regA+"/e2e/private:1")
	image := filepath.Join(e.dir, "img.tar")
	mustRun(t, e.dir, plain, time.Minute, e.crane, "pull", "--insecure", regA+"/e2e/private:1", image)
	e.ca = newOriginCA(t, e.dir)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(&url.URL{Scheme: "http", Host: regA})
		pr.Out.Host = pr.In.Host
		pr.Out.Header.Set("X-Forwarded-Proto", "https")
		pr.Out.Header.Del("Authorization")
	}}
	frontA := newFront(t, "registry-a", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"token":"tok-1","expires_in":300}`)
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://registry-a.test:5000/token",service="registry-a"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rp.ServeHTTP(w, r)
	}), e.ca.serverTLS(t, "registry-a.test"))
	frontB := pushFront(t, "registry-b", regB, e, "registry-b.test")
	tp := startToxiproxy(t, s, e.dir)
	toxA := tp.proxy(t, "registry-a", frontA.addr)
	n := e.startPushNora(t, toxA, frontB.addr, false, "NORA_DOCKER_HEDGE_AFTER=0.5")
	env := proxyEnv(e.dir, n, "SSL_CERT_FILE="+n.bundle)
	tp.addToxic(t, "registry-a", "slow", "latency", map[string]any{"latency": 1500})
	want := registryDigest(t, e.dir, e.crane, plain, regA+"/e2e/private:1")
	push := runClient(t, e.dir, env, 2*time.Minute, e.crane, "push", image, "registry-a.test:5000/e2e/pushed:1")
	if push.err != nil {
		t.Errorf("crane push to the slow registry: %v\n%s", push.err, tail(push.out, 1500))
	} else if got := registryDigest(t, e.dir, e.crane, plain, regA+"/e2e/pushed:1"); got != want {
		t.Errorf("crane push: registry A holds %s, want %s", got, want)
	}
	pull := runClient(t, e.dir, env, 2*time.Minute, e.crane, "digest", "registry-a.test:5000/e2e/private:1")
	if got := strings.TrimSpace(pull.out); pull.err != nil || got != want {
		t.Errorf("crane digest of the slow registry's image: %v, %q, want %s\n%s", pull.err, got, want, tail(pull.out, 1500))
	}
	if pings := frontB.pathsMatching("GET /v2/"); slices.Contains(pings, "GET /v2/") {
		t.Errorf("registry B was sent A's pings: %v", pings)
	}
	summary("crane push and crane digest to a registry that wants tokens, through the proxy",
		"A answering 1.5 s late, hedge_after 0.5 s", fmt.Sprintf("push %v, digest %v", push.err, pull.err),
		push.wall+pull.wall, frontA.seen()+" "+frontB.seen())
}
