package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const manifestAccept = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json"

// tokenRegistry is a second registry that wants a bearer token from its own
// /token realm, counting realm hits per scope.
type tokenRegistry struct {
	*upstream
	mu          sync.Mutex
	realmHits   map[string]int
	tokenIssued int
	unauth      atomic.Int64 // manifest requests that came without a token
}

func newTokenRegistry(t *testing.T) *tokenRegistry {
	reg := &tokenRegistry{realmHits: map[string]int{}}
	reg.upstream = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			reg.mu.Lock()
			reg.realmHits[r.URL.Query().Get("scope")]++
			reg.tokenIssued++
			n := reg.tokenIssued
			reg.mu.Unlock()
			if r.URL.Query().Get("service") != "registry.b" {
				t.Errorf("token request without the challenge's service: %s", r.URL.RawQuery)
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"token":"tok-%d","expires_in":300}`, n)
			return
		}
		name, _, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v2/"), "/manifests/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		scope := "repository:" + name + ":pull"
		if strings.Contains(r.Header.Get("Authorization"), "of-the-client") {
			t.Errorf("the client's hub credential reached the second registry")
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-") {
			reg.unauth.Add(1)
			w.Header().Set("WWW-Authenticate",
				fmt.Sprintf(`Bearer realm="%s/token",service="registry.b",scope="%s"`, reg.URL, scope))
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`)
			return
		}
		if got := r.Header.Get("Accept"); got != manifestAccept {
			t.Errorf("client's Accept did not reach B: %q", got)
		}
		w.Header().Set("Content-Type", "application/vnd.oci.image.index.v1+json")
		w.Header().Set("Docker-Content-Digest", "sha256:feed")
		fmt.Fprintf(w, `{"schemaVersion":2,"name":%q}`, name)
	})
	return reg
}

func (reg *tokenRegistry) hits(scope string) int {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.realmHits[scope]
}

func dockerConfig(a, b, c string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
prefix = "ghcr"
`, a, b, c)
}

// TestFallbackDockerTokenDance: hub is open; the manifest comes from the
// second registry after 401 → token → retry, with one token per scope for
// its lifetime.
func TestFallbackDockerTokenDance(t *testing.T) {
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("hub is open") })
	ghcr := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("bound upstream asked") })
	b := newTokenRegistry(t)
	tp := newTestProxy(t, dockerConfig(hub.URL, b.URL, ghcr.URL), nil)
	keys := fbKeys(t, tp, "docker")
	fbForceOpen(t, tp, keys[0])
	c := proxyClient(t, tp, nil)
	pull := func(name string) {
		t.Helper()
		resp, body := request(t, c, http.MethodGet, hub.URL+"/v2/"+name+"/manifests/3.20",
			fbHeader("Accept", manifestAccept, "Authorization", "Bearer hub-token-of-the-client"))
		if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] ||
			resp.Header.Get("Docker-Content-Digest") != "sha256:feed" || !strings.Contains(body, name) {
			t.Fatalf("pull %s: %d %v %q", name, resp.StatusCode, resp.Header, body)
		}
	}
	const alpine = "repository:library/alpine:pull"
	pull("library/alpine")
	pull("library/alpine")
	if n := b.hits(alpine); n != 1 {
		t.Fatalf("realm hit %d times for one scope within the token's lifetime", n)
	}
	pull("library/busybox")
	if n := b.hits("repository:library/busybox:pull"); n != 1 {
		t.Fatalf("busybox scope: %d realm hits", n)
	}
	// Past the token's lifetime (300 s, used up to shortly before) a new
	// one is fetched.
	tp.Clock.Advance(300 * time.Second)
	pull("library/alpine")
	if n := b.hits(alpine); n != 2 {
		t.Fatalf("after expiry: %d realm hits, want 2", n)
	}
	if hub.hits.Load() != 0 || ghcr.hits.Load() != 0 {
		t.Fatalf("hub %d, ghcr %d hits", hub.hits.Load(), ghcr.hits.Load())
	}
}

// TestFallbackDockerBoundUpstreamIs503: a name bound by prefix has nobody
// else to ask: 503 in OCI error JSON.
func TestFallbackDockerBoundUpstreamIs503(t *testing.T) {
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("hub asked") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("B asked for a bound name") })
	ghcr := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("ghcr is open") })
	tp := newTestProxy(t, dockerConfig(hub.URL, b.URL, ghcr.URL), nil)
	keys := fbKeys(t, tp, "docker")
	fbForceOpen(t, tp, keys[2])
	resp, body := request(t, proxyClient(t, tp, nil), http.MethodGet, ghcr.URL+"/v2/owner/tool/manifests/latest",
		fbHeader("Accept", manifestAccept))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" ||
		resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Nora-Breaker-Key") != keys[2] {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
	var oci struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal([]byte(body), &oci); err != nil || len(oci.Errors) != 1 ||
		oci.Errors[0].Code != "UNAVAILABLE" || oci.Errors[0].Message == "" {
		t.Fatalf("body %q (%v)", body, err)
	}
}

// TestFallbackDockerRefusedTokenIsRefetched: a cached token the registry
// refuses is forgotten, so the next pull fetches a new one instead of
// failing until the old one expires.
func TestFallbackDockerRefusedTokenIsRefetched(t *testing.T) {
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("hub is open") })
	var realmHits atomic.Int64
	var b *upstream
	b = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			fmt.Fprintf(w, `{"token":"tok-%d","expires_in":300}`, realmHits.Add(1))
			return
		}
		// tok-1 was revoked by the registry; later tokens are fine.
		if a := r.Header.Get("Authorization"); a == "" || a == "Bearer tok-1" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="b"`, b.URL))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"schemaVersion":2}`)
	})
	tp := newTestProxy(t, dockerConfig(hub.URL, b.URL, "http://"+closedPort(t)), nil)
	fbForceOpen(t, tp, fbKeys(t, tp, "docker")[0])
	c := proxyClient(t, tp, nil)
	url := hub.URL + "/v2/library/alpine/manifests/3.20"
	if resp, _ := getURL(t, c, url); resp.StatusCode != 503 {
		t.Fatalf("first pull with a refused token: %d", resp.StatusCode)
	}
	if resp, body := getURL(t, c, url); resp.StatusCode != 200 {
		t.Fatalf("second pull: %d %q (realm hits %d)", resp.StatusCode, body, realmHits.Load())
	}
	if n := realmHits.Load(); n != 2 {
		t.Fatalf("realm hits %d, want 2", n)
	}
}

// TestFallbackDockerCachedTokenSentFirst: once the proxy holds a token for
// a candidate's scope, it sends it on the first try: the second registry
// does not see every fallback request twice (first without a token, 401).
func TestFallbackDockerCachedTokenSentFirst(t *testing.T) {
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("hub is open") })
	ghcr := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("bound upstream asked") })
	b := newTokenRegistry(t)
	tp := newTestProxy(t, dockerConfig(hub.URL, b.URL, ghcr.URL), nil)
	fbForceOpen(t, tp, fbKeys(t, tp, "docker")[0])
	c := proxyClient(t, tp, nil)
	before := b.upstream.hits.Load()
	for i := range 3 {
		resp, _ := request(t, c, http.MethodGet, hub.URL+"/v2/library/alpine/manifests/3.20", fbHeader("Accept", manifestAccept))
		if resp.StatusCode != 200 {
			t.Fatalf("pull %d: %d", i, resp.StatusCode)
		}
	}
	if n := b.unauth.Load(); n != 1 {
		t.Fatalf("the second registry got %d requests without a token, want only the first", n)
	}
	// 1 refused + 1 token + 3 manifests with the token.
	if n := b.upstream.hits.Load() - before; n != 5 {
		t.Fatalf("the second registry saw %d requests, want 5", n)
	}
}
