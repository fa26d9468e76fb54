package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFallbackEquivalentHostFailsOver: yarn.test is npm registry A under
// another name ([sidecar.equivalents], as registry.yarnpkg.com is built in
// for registry.npmjs.org). Under deny_unlisted it is let through, it is
// A's request with a breaker of its own, and when A cannot serve, the
// mirror B does, as it does for a client that addresses A. It failed
// while such a host could only be an alias: refused under deny_unlisted,
// and as an alias never failed over.
func TestFallbackEquivalentHostFailsOver(t *testing.T) {
	var aDown atomic.Bool
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if aDown.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		fmt.Fprintf(w, `{"name":"left-pad","from":"A via %s"}`, r.Host)
	})
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/left-pad" {
			t.Errorf("B asked for %s", r.URL.Path)
		}
		fmt.Fprint(w, `{"name":"left-pad","from":"B"}`)
	})
	aURL, _ := url.Parse(a.URL)
	equivalent := "yarn.test:" + aURL.Port()
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 100
[registries]
enable = "npm"
[npm]
proxies = ["%s", "%s"]
[sidecar]
deny_unlisted = true
[sidecar.equivalents]
"npm:%s" = [%q]
[sidecar.resolve]
%q = %q
`, a.URL, b.URL, a.URL, equivalent, equivalent, aURL.Host), nil)
	keys := fbKeys(t, tp, "npm")
	c := proxyClient(t, tp, nil)
	addressed := "http://" + equivalent + "/left-pad"

	resp, body := getURL(t, c, addressed)
	if resp.StatusCode != 200 || !strings.Contains(body, "A via "+equivalent) {
		t.Fatalf("healthy: %d %q", resp.StatusCode, body)
	}
	aDown.Store(true)
	resp, body = getURL(t, c, addressed)
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] || !strings.Contains(body, `"B"`) {
		t.Fatalf("A down: %d %v %q, want the mirror's answer", resp.StatusCode, resp.Header, body)
	}
	eqKey := keys[0] + "@" + equivalent
	if s := breakerOf(t, tp, eqKey); s.FailureCount != 1 {
		t.Errorf("the equivalent host's breaker %s counted %d failures, want 1", eqKey, s.FailureCount)
	}
	if s := breakerOf(t, tp, keys[0]); s.FailureCount != 1 {
		t.Errorf("A's breaker counted %d failures, want 1: A at its URL is the first candidate", s.FailureCount)
	}
}
