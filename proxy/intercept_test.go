package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// ixIntercept is a proxy with an interception CA in front of one TLS maven
// upstream; ca is the only root the clients trust.
type ixIntercept struct {
	up *upstream
	tp *testProxy
	ca *x509.CertPool
}

func newIxIntercept(t *testing.T, h http.HandlerFunc) *ixIntercept {
	t.Helper()
	return newIxInterceptWith(t, h, "")
}

// newIxInterceptWith is newIxIntercept with more [sidecar] lines.
func newIxInterceptWith(t *testing.T, h http.HandlerFunc, sidecar string) *ixIntercept {
	t.Helper()
	up := newTLSUpstream(t, h)
	lines, pool := interceptCA(t, up.Server)
	tp := newTestProxy(t, ixMaven(up.URL, true, "[sidecar]\n"+lines+sidecar+"\n"), nil)
	return &ixIntercept{up: up, tp: tp, ca: pool}
}

// interceptCA creates an interception CA, dated like its leaves by the fake
// clock every test proxy starts with. It returns the [sidecar] lines that
// name it (ca_cert, ca_key and, when srv is set, upstream_ca trusting srv's
// certificate), one per line, and a pool that trusts only the CA.
func interceptCA(t testing.TB, srv *httptest.Server) (lines string, pool *x509.CertPool) {
	t.Helper()
	certPath, keyPath, err := certs.Init(filepath.Join(t.TempDir(), "ca"), testkit.NewClock().Now)
	if err != nil {
		t.Fatal(err)
	}
	lines = fmt.Sprintf("ca_cert = %q\nca_key = %q\n", certPath, keyPath)
	if srv != nil {
		lines += fmt.Sprintf("upstream_ca = %q\n", writeUpstreamCA(t, srv))
	}
	pemBytes, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("CA PEM not parsed")
	}
	return lines, pool
}

// ixTLSInTunnel opens a CONNECT to target through tp, which must answer
// 200, and completes a TLS handshake inside it that trusts only ca, is
// checked against the proxy's fake clock and must agree on proto ("h2" or
// "http/1.1"). The connection has a 10 s deadline and is closed when the
// test ends.
func ixTLSInTunnel(t *testing.T, tp *testProxy, ca *x509.CertPool, target, proto string) *tls.Conn {
	t.Helper()
	resp, conn, _ := ixRawConnect(t, tp, target)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %d", target, resp.StatusCode)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: ca, ServerName: "127.0.0.1", Time: tp.Clock.Now,
		NextProtos: []string{proto}})
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS inside the tunnel: %v", err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != proto {
		t.Fatalf("TLS inside the tunnel speaks %q, want %q", got, proto)
	}
	return tc
}

// client trusts only the interception CA and checks certificates against
// the proxy's fake clock.
func (ix *ixIntercept) client(t *testing.T, h2 bool) *http.Client {
	c := proxyClient(t, ix.tp, ix.ca)
	tr := c.Transport.(*http.Transport)
	tr.TLSClientConfig.Time = ix.tp.Clock.Now
	tr.ForceAttemptHTTP2 = h2
	return c
}

func TestInterceptServesThroughOurLeaf(t *testing.T) {
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Path", r.URL.Path)
		io.WriteString(w, "jar")
	})
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			before := ix.up.hits.Load()
			resp, body := request(t, ix.client(t, h2), "GET", ix.up.URL+"/maven2/g/a.jar", nil)
			if resp.StatusCode != 200 || body != "jar" || resp.Header.Get("X-Upstream-Path") != "/maven2/g/a.jar" {
				t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
			}
			if h2 && resp.ProtoMajor != 2 {
				t.Fatalf("intercepted connection speaks %s, want HTTP/2", resp.Proto)
			}
			chains := resp.TLS.VerifiedChains
			if len(chains) == 0 || chains[0][len(chains[0])-1].Subject.CommonName != "nora-breaker interception CA" {
				t.Fatalf("leaf does not chain to our CA: %v", chains)
			}
			if leaf := resp.TLS.PeerCertificates[0]; len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].IsLoopback() {
				t.Fatalf("leaf names %v %v, want 127.0.0.1", leaf.DNSNames, leaf.IPAddresses)
			}
			if n := ix.up.hits.Load() - before; n != 1 {
				t.Fatalf("upstream hits %d, want 1", n)
			}
		})
	}
}

// TestInterceptBreakerAnswersInsideTunnel: once the breaker opens, the 503
// comes back over the intercepted connection, on HTTP/1.1 and HTTP/2.
func TestInterceptBreakerAnswersInsideTunnel(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			c, target := ix.client(t, h2), ix.up.URL+"/maven2/deploy.jar"
			for i := 0; i < 3; i++ {
				if resp, _ := request(t, c, "PUT", target, nil); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "" {
					t.Fatalf("PUT %d: %d %v, want the upstream's own 503", i, resp.StatusCode, resp.Header)
				}
			}
			resp, body := request(t, c, "PUT", target, nil)
			ixWant503(t, resp, ixKey(ix.up.URL), "open", "10")
			if h2 && resp.ProtoMajor != 2 {
				t.Fatalf("got %s, want HTTP/2", resp.Proto)
			}
			if resp.TLS == nil || !strings.Contains(body, ixKey(ix.up.URL)) || ix.up.hits.Load() != 3 {
				t.Fatalf("tls %v body %q hits %d", resp.TLS != nil, body, ix.up.hits.Load())
			}
		})
	}
}

// ixRawConnect opens a CONNECT to target through tp and returns the answer
// and the connection (still open when the answer is 200).
func ixRawConnect(t *testing.T, tp *testProxy, target string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", tp.URL.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	conn.SetDeadline(time.Time{})
	return resp, conn, br
}

// TestInterceptMisdirectedHost: a request inside an intercepted tunnel that
// names another host is refused with 421 and never forwarded.
func TestInterceptMisdirectedHost(t *testing.T) {
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) {})
	target := strings.TrimPrefix(ix.up.URL, "https://")
	for _, host := range []string{"other.example", "127.0.0.1:1", "169.254.169.254"} {
		t.Run(host, func(t *testing.T) {
			tc := ixTLSInTunnel(t, ix.tp, ix.ca, target, "http/1.1")
			fmt.Fprintf(tc, "GET /maven2/x.jar HTTP/1.1\r\nHost: %s\r\n\r\n", host)
			got, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			got.Body.Close()
			if got.StatusCode != http.StatusMisdirectedRequest {
				t.Fatalf("got %d, want 421", got.StatusCode)
			}
		})
	}
	if ix.up.hits.Load() != 0 {
		t.Fatalf("misdirected requests reached the upstream %d times", ix.up.hits.Load())
	}
}

// TestHandlerPanicIsContained: a panic while serving a request (plain or
// intercepted) answers 500 and the proxy keeps serving.
func TestHandlerPanicIsContained(t *testing.T) {
	// plain is no upstream: listed in allow_hosts, since loopback is only
	// reached when the configuration names it.
	plain := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain ok") })
	ix := newIxInterceptWith(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") },
		allowHostsLine(plain))
	hook := func(r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/boom") {
			panic("injected test panic")
		}
	}
	ix.tp.testHook.Store(&hook)
	for _, h2 := range []bool{false, true} {
		c := ix.client(t, h2)
		for _, base := range []string{ix.up.URL, plain.URL} {
			resp, body := request(t, c, "GET", base+"/maven2/boom", nil)
			if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "internal error") {
				t.Fatalf("h2=%v %s: panic answered %d %q", h2, base, resp.StatusCode, body)
			}
		}
		if resp, body := request(t, c, "GET", ix.up.URL+"/maven2/fine", nil); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("h2=%v: after the panic: %d %q", h2, resp.StatusCode, body)
		}
		if resp, body := request(t, c, "GET", plain.URL+"/fine", nil); resp.StatusCode != 200 || body != "plain ok" {
			t.Fatalf("h2=%v: plain after the panic: %d %q", h2, resp.StatusCode, body)
		}
	}
	if !strings.Contains(ix.tp.Logs.String(), "handler panic recovered") {
		t.Fatal("panic not logged")
	}
}

// allowHostsLine lists servers that are no upstream in allow_hosts: the
// proxy reaches loopback only where the configuration names it.
func allowHostsLine(ups ...*upstream) string {
	var hosts []string
	for _, u := range ups {
		hosts = append(hosts, fmt.Sprintf("%q", strings.TrimPrefix(strings.TrimPrefix(u.URL, "http://"), "https://")))
	}
	return "allow_hosts = [" + strings.Join(hosts, ", ") + "]"
}
