package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

func TestSmokeHealthyUpstreamIsInvisible(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "a")
		w.Header().Set("Content-Encoding", "gzip")
		fmt.Fprint(w, "artifact bytes")
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2"]
`, up.URL), nil)
	resp, err := proxyClient(t, tp, nil).Get(up.URL + "/maven2/g/a/1/a-1.jar")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "artifact bytes" || resp.Header.Get("X-Upstream") != "a" ||
		resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
}
