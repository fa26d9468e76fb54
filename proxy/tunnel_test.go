package proxy

import (
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// TestTunnelEndToEnd: without a CA, CONNECT to an upstream host is a blind
// tunnel: TLS runs between the client and the upstream itself.
func TestTunnelEndToEnd(t *testing.T) {
	up := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "through the tunnel") })
	tp, logs := ixStartProxy(t, ixMaven(up.URL, true, ""))
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	resp, body := request(t, proxyClient(t, tp, roots), "GET", up.URL+"/maven2/a.jar", nil)
	if resp.StatusCode != 200 || body != "through the tunnel" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if !resp.TLS.PeerCertificates[0].Equal(up.Certificate()) {
		t.Fatal("client did not see the upstream's own certificate")
	}
	if s := breakerOf(t, tp, ixKey(up.URL)); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("breaker after a good dial: %+v", s)
	}
	logs.waitFor(t, `"result":"tunnel"`)
}

// TestTunnelBreakerAnswersConnect: dial failures count against the host's
// breaker (502 each); once open the CONNECT itself is answered 503.
func TestTunnelBreakerAnswersConnect(t *testing.T) {
	addr := closedPort(t)
	base := "https://" + addr
	tp := newTestProxy(t, ixMaven(base, true, ""), nil)
	for i := 0; i < 3; i++ {
		resp, _, _ := ixRawConnect(t, tp, addr)
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("CONNECT %d: %d, want 502", i, resp.StatusCode)
		}
	}
	resp, _, _ := ixRawConnect(t, tp, addr)
	ixWant503(t, resp, ixKey(base), "open", "10")
}

func TestTunnelRefusals(t *testing.T) {
	up := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	upHost := strings.TrimPrefix(up.URL, "https://")
	tests := []struct {
		name, sidecar, target string
		want                  int
	}{
		{"unlisted host with deny_unlisted", "deny_unlisted = true", "unlisted.example:443", 403},
		{"port not 443 nor an upstream's", "", "unlisted.example:8443", 403},
		{"allow_hosts port is fine", `allow_hosts = ["allowed.example:1"]` + "\n" + `resolve = {"allowed.example:1" = "` + closedPort(t) + `"}`, "allowed.example:1", 502},
		{"metadata address", "", "169.254.169.254:443", 403},
		{"no port", "", "unlisted.example", 400},
		{"upstream host, own port", "deny_unlisted = true", upHost, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp, logs := ixStartProxy(t, ixMaven(up.URL, true, "[sidecar]\n"+tc.sidecar+"\n"))
			resp, _, _ := ixRawConnect(t, tp, tc.target)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("CONNECT %s: %d, want %d", tc.target, resp.StatusCode, tc.want)
			}
			if tc.want == 403 {
				logs.waitFor(t, `"result":"denied"`)
			}
		})
	}
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("upstream saw %d requests", n)
	}
}
