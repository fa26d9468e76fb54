package proxy

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// Tests with a fake parent proxy (internal/testkit.Parent), for the
// answers squid cannot easily be made to give (docs/behaviour.md §5.8).

// seenHas reports whether the fake parent was sent a request line
// starting with prefix.
func seenHas(p *testkit.Parent, prefix string) bool {
	return slices.ContainsFunc(p.Seen(), func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestParent407IsAConfigurationError: a parent that refuses the proxy's
// credentials fails every request with the proxy's own 502 (its 407 never
// reaches the client, which would take it as the proxy asking for its
// credentials), moves no breaker, and is said in the log, once.
func TestParent407IsAConfigurationError(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			parent := testkit.StartParent(t, &testkit.Parent{Auth: "Basic d3Jvbmc6d3Jvbmc="})
			maven := newOrigin(t, "maven", scheme == "https")
			npm := newOrigin(t, "npm", false)
			sidecar := ""
			var roots *x509.CertPool
			if scheme == "https" {
				sidecar, roots = interceptCA(t, maven.Server)
			}
			tp := newTestProxy(t, squidMavenNpm(parent.Addr, maven.URL, npm.URL, sidecar), nil)
			c := clientFor(t, tp, roots)
			for i := range 4 {
				resp, body := getURL(t, c, maven.URL+"/m2/a.jar")
				if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Proxy-Authenticate") != "" {
					t.Fatalf("request %d: %d %v %q, want the proxy's 502", i, resp.StatusCode, resp.Header, body)
				}
			}
			for _, key := range []string{"maven:" + maven.URL + "/m2", "parent:" + parent.URL} {
				if b := breakerOf(t, tp, key); b.State != breakerstate.Closed || b.FailureCount != 0 {
					t.Fatalf("%s: %+v, want nothing counted for a configuration error", key, b)
				}
			}
			logs := tp.Logs.String()
			if n := strings.Count(logs, "parent proxy configuration error"); n != 1 {
				t.Fatalf("the configuration error was logged %d times, want once a minute:\n%s", n, logs)
			}
			if strings.Contains(logs, "s3cret") || strings.Contains(logs, "Ym90OnMzY3JldA") {
				t.Fatal("the log shows the parent's credentials")
			}
			if maven.hits.Load() != 0 {
				t.Fatal("the upstream was reached past a 407")
			}
		})
	}
}

// TestParentProxyStatus503ForOneRegistry: the parent answers 503 with a
// Proxy-Status naming the upstream's refusal for one registry: that
// registry's breaker opens; another registry through the same parent
// stays closed, and so does the parent's.
func TestParentProxyStatus503ForOneRegistry(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			maven := newOrigin(t, "maven", scheme == "https")
			npm := newOrigin(t, "npm", scheme == "https")
			mavenHost := maven.Listener.Addr().String()
			parent := testkit.StartParent(t, &testkit.Parent{Decide: func(r *http.Request) testkit.ParentAnswer {
				if r.Host == mavenHost || r.URL.Host == mavenHost {
					return testkit.ParentAnswer{Status: http.StatusServiceUnavailable,
						Header: http.Header{"Proxy-Status": {"corp-proxy; error=connection_refused"}}}
				}
				return testkit.ParentAnswer{}
			}})
			sidecar := ""
			var roots *x509.CertPool
			if scheme == "https" {
				lines, pool := interceptCA(t, nil)
				sidecar = lines + fmt.Sprintf("upstream_ca = %q\n", bothCAs(t, maven, npm))
				roots = pool
			}
			tp := newTestProxy(t, squidMavenNpm(parent.Addr, maven.URL, npm.URL, sidecar), nil)
			c := clientFor(t, tp, roots)
			for i := range 2 {
				if resp, _ := getURL(t, c, maven.URL+"/m2/a.jar"); resp.StatusCode < 500 {
					t.Fatalf("request %d to maven: %d", i, resp.StatusCode)
				}
				if resp, body := getURL(t, c, npm.URL+"/left-pad"); resp.StatusCode != 200 {
					t.Fatalf("request %d to npm: %d %q\n%s", i, resp.StatusCode, body, tp.Logs.String())
				}
			}
			if b := breakerOf(t, tp, "maven:"+maven.URL+"/m2"); b.State != breakerstate.Open {
				t.Fatalf("maven's breaker %+v, want open after the parent's two 503s about it", b)
			}
			if b := breakerOf(t, tp, "npm:"+npm.URL); b.State != breakerstate.Closed || b.FailureCount != 0 {
				t.Fatalf("npm's breaker %+v", b)
			}
			if b := breakerOf(t, tp, "parent:"+parent.URL); b.State != breakerstate.Closed || b.FailureCount != 0 {
				t.Fatalf("parent's breaker %+v", b)
			}
		})
	}
}

// bothCAs writes the certificates of several TLS origins into one
// upstream_ca file.
func bothCAs(t *testing.T, origins ...*origin) string {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range origins {
		if err := pemEncodeCert(&buf, o.Certificate().Raw); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "upstream-cas.pem")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestParentCarriesTokensAndLearnedHosts: a docker candidate's token
// fetch from its realm goes through the parent like the candidate's own
// requests, and a host learned from a redirect goes through the parent of
// the upstream that redirected to it, not parent_proxy.
func TestParentCarriesTokensAndLearnedHosts(t *testing.T) {
	def := testkit.StartParent(t, &testkit.Parent{})
	mirrorsParent := testkit.StartParent(t, &testkit.Parent{})
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("hub is open") })
	b := newTokenRegistry(t)
	storage := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "blob bytes") })
	ghcr := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			http.Redirect(w, r, storage.URL+"/b/sha256-1?sig=abc", http.StatusTemporaryRedirect)
			return
		}
		http.NotFound(w, r)
	})
	tp := newTestProxy(t, dockerConfig(hub.URL, b.URL, ghcr.URL)+fmt.Sprintf(`
[sidecar]
parent_proxy = %q
[sidecar.parents]
"docker:%s" = %q
`, def.URL, ghcr.URL, mirrorsParent.URL), nil)
	keys := fbKeys(t, tp, "docker")
	fbForceOpen(t, tp, keys[0])
	c := proxyClient(t, tp, nil)
	resp, body := request(t, c, http.MethodGet, hub.URL+"/v2/library/alpine/manifests/3.20", fbHeader("Accept", manifestAccept))
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] {
		t.Fatalf("pull: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if !seenHas(def, "GET "+b.URL+"/token?") || !seenHas(def, "GET "+b.URL+"/v2/library/alpine/manifests/3.20") {
		t.Fatalf("the token fetch and the candidate's requests did not all go through the parent: %q", def.Seen())
	}
	if resp, _ := getURL(t, c, ghcr.URL+"/v2/lib/x/blobs/sha256:1"); resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("blob: %d", resp.StatusCode)
	}
	if resp, body := getURL(t, c, storage.URL+"/b/sha256-1?sig=abc"); resp.StatusCode != 200 || body != "blob bytes" {
		t.Fatalf("learned host: %d %q", resp.StatusCode, body)
	}
	if !seenHas(mirrorsParent, "GET "+storage.URL+"/b/sha256-1") || seenHas(def, "GET "+storage.URL) {
		t.Fatalf("the learned host did not go through its upstream's parent: ghcr's parent %q, parent_proxy %q",
			mirrorsParent.Seen(), def.Seen())
	}
}

// TestUnclassifiedThroughTheParent: a host no upstream owns goes through
// parent_proxy; once the parent's breaker is open it is answered 503 with
// the parent's Retry-After, without a connection.
func TestUnclassifiedThroughTheParent(t *testing.T) {
	parent := testkit.StartParent(t, &testkit.Parent{})
	other := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "elsewhere") })
	tp := newTestProxy(t, ixMaven("http://127.0.0.1:1", true, fmt.Sprintf(`[sidecar]
parent_proxy = %q
allow_hosts = [%q]
`, parent.URL, other.Listener.Addr().String())), nil)
	c := proxyClient(t, tp, nil)
	if resp, body := getURL(t, c, other.URL+"/x"); resp.StatusCode != 200 || body != "elsewhere" {
		t.Fatalf("unclassified: %d %q", resp.StatusCode, body)
	}
	if !seenHas(parent, "GET "+other.URL+"/x") {
		t.Fatalf("the parent saw %q", parent.Seen())
	}
	parentKey := "parent:" + parent.URL
	fbForceOpen(t, tp, parentKey)
	n := len(parent.Seen())
	resp, _ := getURL(t, c, other.URL+"/x")
	ixWant503(t, resp, parentKey, "open", "10")
	if len(parent.Seen()) != n {
		t.Fatal("the parent was asked while its breaker was open")
	}
}

// TestParentsLoggedWithoutCredentials: the start-up log names each parent
// by its key, says that it is sent credentials, and never shows them.
func TestParentsLoggedWithoutCredentials(t *testing.T) {
	tp := newTestProxy(t, ixMaven("http://127.0.0.1:1", true, `[sidecar]
parent_proxy = "http://build-bot:hunter2@proxy.corp.example:3128"
parent_no_proxy = [".corp.example"]
`), nil)
	logs := tp.Logs.String()
	if !strings.Contains(logs, `"parent":"parent:http://proxy.corp.example:3128","credentials":true`) {
		t.Fatalf("no start-up line for the parent:\n%s", logs)
	}
	if strings.Contains(logs, "hunter2") || strings.Contains(logs, "build-bot") {
		t.Fatalf("the log shows the parent's credentials:\n%s", logs)
	}
}
