package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
)

// BenchmarkFallbackServed measures a request whose addressed upstream is
// open and that the next upstream serves: breaker rejection, substitution,
// candidate round trip and streaming back through the proxy.
func BenchmarkFallbackServed(b *testing.B) {
	a := newUpstream(b, func(w http.ResponseWriter, r *http.Request) { b.Error("A is open") })
	cand := newUpstream(b, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "jar from B") })
	tp := newTestProxy(b, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/repo"]
`, a.URL, cand.URL), nil)
	fbForceOpen(b, tp, fbKeys(b, tp, "maven")[0])
	c := proxyClient(b, tp, nil)
	url := a.URL + "/maven2/g/a/1/a-1.jar"
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
