package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/dial"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestConnectAliasHostOnItsOwnPort: an alias host that names a port is an
// upstream host on that port, so a CONNECT to it is tunnelled (under its
// own breaker) instead of refused for its port; the same host on another
// port is still nobody's (docs/behaviour.md §3, §5.2).
func TestConnectAliasHostOnItsOwnPort(t *testing.T) {
	mirror := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["https://repo.test/m2"]
[sidecar]
deny_unlisted = true
[sidecar.aliases]
maven = ["mirror.example:8443"]
[sidecar.resolve]
"mirror.example:8443" = %q
`, strings.TrimPrefix(mirror.URL, "https://")), nil)
	if rt := tp.state.Load().routes.OfHost("mirror.example", "8443"); !rt.Classified() {
		t.Fatal("mirror.example:8443 is not classified")
	}
	if resp, why := connectAnswer(t, tp, "mirror.example:8443"); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT mirror.example:8443: %d %q, want 200", resp.StatusCode, why)
	}
	if s := breakerOf(t, tp, "maven:https://repo.test/m2@mirror.example:8443"); s.FailureCount != 0 {
		t.Fatalf("alias host's breaker after a good dial: %+v", s)
	}
	if resp, _ := connectAnswer(t, tp, "mirror.example:9443"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT mirror.example:9443: %d, want 403", resp.StatusCode)
	}
}

// TestConnectLearnedHostOnItsOwnPort: a host learned from a redirect is an
// alias host of the upstream that redirected to it, on the port the
// redirect named, so a CONNECT to it is not refused for its port.
func TestConnectLearnedHostOnItsOwnPort(t *testing.T) {
	storage := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	blobAt := "https://storage.test:9443/b/sha256-1?sig=abc"
	mirror := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, blobAt, http.StatusTemporaryRedirect)
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[[docker.upstreams]]
url = "http://mirror.test"
[sidecar]
deny_unlisted = true
[sidecar.resolve]
"mirror.test:80" = %q
"storage.test:9443" = %q
`, strings.TrimPrefix(mirror.URL, "http://"), strings.TrimPrefix(storage.URL, "https://")), nil)
	if resp, _ := connectAnswer(t, tp, "storage.test:9443"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT before any redirect: %d, want 403", resp.StatusCode)
	}
	c := proxyClient(t, tp, nil)
	if resp, _ := getURL(t, c, "http://mirror.test/v2/lib/x/blobs/sha256:1"); resp.Header.Get("Location") != blobAt {
		t.Fatalf("blob: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, why := connectAnswer(t, tp, "storage.test:9443"); resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT to the learned host: %d %q, want 200", resp.StatusCode, why)
	}
	if s := breakerOf(t, tp, "docker:http://mirror.test@storage.test:9443"); s.FailureCount != 0 {
		t.Fatalf("learned host's breaker after a good dial: %+v", s)
	}
}

// connectAnswer sends a CONNECT to target through tp and returns the answer
// with its body (the refusal's reason; empty after a 200).
func connectAnswer(t *testing.T, tp *testProxy, target string) (*http.Response, string) {
	t.Helper()
	resp, _, _ := ixRawConnect(t, tp, target)
	if resp.StatusCode == http.StatusOK {
		return resp, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, strings.TrimSpace(string(body))
}

// TestSnapshotConnectPortsIncludeAliasPorts: the ports a CONNECT may name
// are those of every host the table classifies, alias hosts included.
func TestSnapshotConnectPortsIncludeAliasPorts(t *testing.T) {
	cfg := testkit.LoadConfig(t, `
[registries]
enable = "maven"
[maven]
proxies = ["http://repo.example:8081/m2"]
[sidecar.aliases]
maven = ["mirror.example:8443", "plain.example"]
`, nil)
	st, err := newSnapshot(cfg, nil, nil, nil, dial.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	for port, want := range map[string]bool{"443": true, "8081": true, "8443": true, "80": true, "9443": false} {
		if got := st.connectPorts[port]; got != want {
			t.Errorf("connectPorts[%s] = %v, want %v", port, got, want)
		}
	}
}
