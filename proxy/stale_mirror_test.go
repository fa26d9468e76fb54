package proxy

import (
	"fmt"
	"testing"
)

// TestStaleKeepsWhatAMirrorServed: while A is down and B serves the client's
// request, B's answer is kept under the URL the client addressed, so when B
// goes down too the artifact is still served (stale).
func TestStaleKeepsWhatAMirrorServed(t *testing.T) {
	a := newFlakyOrigin(t, jarBody)
	b := newFlakyOrigin(t, func(p string) string { return "mirror " + jarBody(p) })
	a.status.Store(500)
	dir := t.TempDir()
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 100
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/maven2"]
[sidecar]
stale_dir = %q
`, a.URL, b.URL, dir), nil)
	c := proxyClient(t, tp, nil)
	url := a.URL + "/maven2/g/a/1/a-1.jar"
	resp, body := getURL(t, c, url)
	if resp.StatusCode != 200 || body != "mirror jar bytes of /maven2/g/a/1/a-1.jar" {
		t.Fatalf("first: %d %q", resp.StatusCode, body)
	}
	fbWaitStored(t, tp, "maven", url, nil)
	b.status.Store(500)
	resp, body = getURL(t, c, url)
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "true" || body != "mirror jar bytes of /maven2/g/a/1/a-1.jar" {
		t.Fatalf("with both down: %d stale=%q %q", resp.StatusCode, resp.Header.Get("X-Nora-Stale"), body)
	}
	if resp.Header.Get("X-Nora-Upstream") == "" {
		t.Fatal("the stored copy lost the header naming the mirror that served it")
	}
}
