package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// TestConnectHostSpellingsAreTheUpstream: a CONNECT naming an upstream's
// host with a trailing dot or in upper case is the upstream's (issue 20,
// point 7): intercepted with the proxy's leaf, decided by its breaker. On
// the old code these got a blind tunnel past both.
func TestConnectHostSpellingsAreTheUpstream(t *testing.T) {
	up := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pom") })
	lines, pool := interceptCA(t, up.Server)
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["https://example.com/maven2"]
[sidecar]
%s
[sidecar.resolve]
"example.com:443" = %q
`, lines, strings.TrimPrefix(up.URL, "https://")), nil)
	for _, target := range []string{"example.com.:443", "EXAMPLE.COM.:443", "Example.Com:443"} {
		t.Run(target, func(t *testing.T) {
			before := up.hits.Load()
			resp, conn, _ := ixRawConnect(t, tp, target)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("CONNECT %s: %d", target, resp.StatusCode)
			}
			host, _, _ := net.SplitHostPort(target)
			tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: strings.TrimSuffix(host, "."), Time: tp.Clock.Now})
			defer tc.Close()
			_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
			if err := tc.Handshake(); err != nil {
				t.Fatalf("CONNECT %s was not intercepted with the proxy's leaf: %v", target, err)
			}
			fmt.Fprintf(tc, "GET /maven2/g/a.pom HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
			got, err := io.ReadAll(tc)
			if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 200") || !strings.HasSuffix(string(got), "pom") {
				t.Fatalf("request inside %s: %q, %v", target, got, err)
			}
			if up.hits.Load() != before+1 {
				t.Fatalf("upstream hits %d, want one more than %d", up.hits.Load(), before)
			}
		})
	}
	// The breaker decides for every spelling: forced open, the request
	// inside the tunnel is the proxy's 503.
	if err := tp.Breakers().Force("maven:https://example.com/maven2", breakerstate.ModeOpen); err != nil {
		t.Fatal(err)
	}
	resp, conn, _ := ixRawConnect(t, tp, "EXAMPLE.com.:443")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "example.com", Time: tp.Clock.Now})
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(tc, "GET /maven2/g/a.pom HTTP/1.1\r\nHost: EXAMPLE.com.\r\nConnection: close\r\n\r\n")
	got, _ := io.ReadAll(tc)
	if !strings.HasPrefix(string(got), "HTTP/1.1 503") || !strings.Contains(string(got), "X-Nora-Breaker-State: open") {
		t.Fatalf("inside a tunnel to an open upstream: %q, want the proxy's 503", got)
	}
}

// TestWrongSchemeIsNotTheUpstream: a request naming an upstream's host and
// port with the other scheme is not that upstream's (issue 20, point 3):
// however often it fails, the upstream's breaker does not move.
func TestWrongSchemeIsNotTheUpstream(t *testing.T) {
	tlsUp := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls") })
	plainUp := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain") })
	plainAddr := strings.TrimPrefix(plainUp.URL, "http://")
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 1
[registries]
enable = ["npm", "maven"]
[npm]
proxy = "https://registry.npmjs.org"
[maven]
proxies = [%q]
[sidecar]
upstream_ca = %q
tls_handshake_timeout = "1s"
[sidecar.resolve]
"registry.npmjs.org:443" = %q
`, plainUp.URL+"/maven2", writeUpstreamCA(t, tlsUp.Server), strings.TrimPrefix(tlsUp.URL, "https://")), nil)
	for _, raw := range []string{
		// Plain HTTP to the TLS port of an https upstream.
		"GET http://registry.npmjs.org:443/lodash HTTP/1.1\r\nHost: registry.npmjs.org:443\r\nConnection: close\r\n\r\n",
		// TLS asked of an http upstream's port.
		"GET https://" + plainAddr + "/maven2/a.pom HTTP/1.1\r\nHost: " + plainAddr + "\r\n\r\n",
	} {
		// One is enough: the threshold is 1.
		conn, err := net.Dial("tcp", tp.URL.Host)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(conn, raw)
		_, _ = io.ReadAll(io.LimitReader(conn, 1<<16))
		conn.Close()
	}
	for _, key := range []string{"npm:https://registry.npmjs.org", "maven:" + plainUp.URL + "/maven2"} {
		if s := breakerOf(t, tp, key); s.State != breakerstate.Closed || s.FailureCount != 0 {
			t.Errorf("%s after requests of the other scheme: %s with %d failures, want closed with none",
				key, s.State, s.FailureCount)
		}
	}
}
