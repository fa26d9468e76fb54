package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestFallbackDockerHedgeGetsItsToken: Docker Hub is a black hole (it
// takes the connection and never answers); after hedge_after the pull is
// also sent to the second registry, whose 401 → token → retry happens
// inside the hedge, and its manifest serves the pull long before the
// hub's proxy_timeout. The hub's attempt is given up, neutral for its
// breaker, and the request's log line shows both.
func TestFallbackDockerHedgeGetsItsToken(t *testing.T) {
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ghcr := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("bound upstream asked") })
	b := newTokenRegistry(t)
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[docker]
proxy_timeout = 30
hedge_after = 0.2
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
prefix = "ghcr"
`, hub.URL, b.URL, ghcr.URL), nil)
	keys := fbKeys(t, tp, "docker")
	c := proxyClient(t, tp, nil)
	start := time.Now()
	resp, body := request(t, c, http.MethodGet, hub.URL+"/v2/library/alpine/manifests/3.20",
		fbHeader("Accept", manifestAccept))
	took := time.Since(start)
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] || !strings.Contains(body, "library/alpine") {
		t.Fatalf("pull: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if took < 200*time.Millisecond || took > 10*time.Second {
		t.Errorf("served after %v, want after hedge_after and well before proxy_timeout", took)
	}
	if n := b.hits("repository:library/alpine:pull"); n != 1 {
		t.Errorf("realm hit %d times, want once", n)
	}
	if s := breakerOf(t, tp, keys[0]); s.FailureCount != 0 {
		t.Errorf("hub's failure count %d, want 0: its attempt was given up", s.FailureCount)
	}
	line := logLine(t, tp, func(l string) bool { return strings.Contains(l, `"attempts"`) && strings.Contains(l, "alpine") })
	for _, want := range []string{`"hedge":true`, "answered first", `"verdict":"neutral"`} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %s: %s", want, line)
		}
	}
}

// TestEarlyOpeningSaysWhy: a black-holed single upstream with stale copies
// and suspect_after 0.3 s: two GETs at once (threshold 2) open its breaker
// at 0.3 s, its log line says why, and both get the stale copy then
// instead of waiting out proxy_timeout.
func TestEarlyOpeningSaysWhy(t *testing.T) {
	var hole atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if hole.Load() {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"name":"left-pad"}`)
	})
	dir := t.TempDir()
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 2
suspect_after = 0.3
[registries]
enable = "npm"
[npm]
proxy = "%s"
proxy_timeout = 30
[sidecar]
stale_dir = %q
`, up.URL, dir), nil)
	c := proxyClient(t, tp, nil)
	if resp, _ := getURL(t, c, up.URL+"/left-pad"); resp.StatusCode != 200 {
		t.Fatalf("priming: %d", resp.StatusCode)
	}
	fbWaitStored(t, tp, "npm", up.URL+"/left-pad", nil)
	hole.Store(true)
	start := time.Now()
	type got struct {
		status int
		stale  string
		took   time.Duration
		err    error
	}
	results := make(chan got, 2)
	for range 2 {
		go func() {
			// Not getURL: a failure must reach the test's goroutine.
			resp, err := c.Get(up.URL + "/left-pad")
			if err != nil {
				results <- got{err: err, took: time.Since(start)}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- got{status: resp.StatusCode, stale: resp.Header.Get("X-Nora-Stale"), took: time.Since(start)}
		}()
	}
	for range 2 {
		g := <-results
		if g.err != nil || g.status != 200 || g.stale != "true" || g.took > 10*time.Second {
			t.Errorf("%d stale=%q (%v) after %v, want the stale copy well before proxy_timeout", g.status, g.stale,
				g.err, g.took)
		}
	}
	logLine(t, tp, func(l string) bool {
		return strings.Contains(l, "circuit breaker transition") && strings.Contains(l, `"why":"no headers within suspect_after"`)
	})
}

// logLine waits for a line of tp's log that match accepts, and returns it.
func logLine(t *testing.T, tp *testProxy, match func(string) bool) string {
	t.Helper()
	var line string
	testkit.PollUntil(t, 5*time.Second, func() bool {
		for _, l := range strings.Split(tp.Logs.String(), "\n") {
			if match(l) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// TestDockerPingIsNotHedged: the /v2/ ping is how a client learns whether
// the registry it addressed wants a token, and from which realm. Registry A
// wants one and is slow (its answers come after hedge_after, well within
// proxy_timeout); B wants none. A hedge of the ping would hand the client
// B's 200, which tells it A wants no token: every request it then sends A
// without one gets A's 401, so pulls of private images and every push
// fail on a registry that was only slow. The ping waits for A's own
// challenge; a manifest request is still hedged.
func TestDockerPingIsNotHedged(t *testing.T) {
	const late = 600 * time.Millisecond
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(late): // the fault: a slow registry
		case <-r.Context().Done():
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="https://auth.a.test/token",service="a"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	var bPings atomic.Int64
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			bPings.Add(1)
		}
		w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("b", 64))
		w.WriteHeader(http.StatusOK)
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[docker]
proxy_timeout = 30
hedge_after = 0.25
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
`, a.URL, b.URL), nil)
	c := proxyClient(t, tp, nil)
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		resp, _ := request(t, c, m, a.URL+"/v2/", nil)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Www-Authenticate") == "" ||
			resp.Header.Get("X-Nora-Upstream") != "" {
			t.Errorf("%s /v2/ of a slow registry that wants tokens: %d %v, want its own 401 challenge", m, resp.StatusCode, resp.Header)
		}
	}
	if n := bPings.Load(); n != 0 {
		t.Errorf("registry B was asked %d pings meant for A", n)
	}
	resp, _ := request(t, c, http.MethodHead, a.URL+"/v2/library/alpine/manifests/3.20", fbHeader("Accept", manifestAccept))
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") == "" {
		t.Errorf("a manifest HEAD of the slow registry: %d %v, want B's hedged answer", resp.StatusCode, resp.Header)
	}
}
