package dial

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/certs"
)

// testCA signs the certificates of the sharing tests' upstreams: a CA
// made as `nora-breaker ca init` makes one; file is its certificate as
// upstream_ca.
type testCA struct {
	ca   *tls.Certificate
	file string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	certPath, keyPath, err := certs.Init(t.TempDir(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certs.Load(certPath, keyPath, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{ca: ca, file: certPath}
}

// leaf is a server certificate for names, signed by ca.
func (ca *testCA) leaf(t *testing.T, names ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.ca.Leaf, &key.PublicKey, ca.ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seenRequest is what an upstream saw of one request: the authority it
// was asked for, the server name of the connection it came on, and its
// HTTP major version.
type seenRequest struct {
	host, sni string
	major     int
}

// sharingUpstream is an https server on loopback that counts the
// connections it accepted and records every request. Its certificate is
// chosen by server name (pick), so a test can present different ones to
// different names, and change them.
type sharingUpstream struct {
	srv   *httptest.Server
	port  string
	conns atomic.Int64
	mu    sync.Mutex
	seen  []seenRequest
	pick  func(sni string) *tls.Certificate
	// answer, when set, is the status for a request (0: 200), called
	// under mu.
	answer func(r *http.Request) int
}

// noTickets is an option of startSharingUpstream: no TLS session
// resumption, every handshake a full one.
func noTickets(s *httptest.Server) { s.TLS.SessionTicketsDisabled = true }

// startSharingUpstream serves over HTTP/2 when h2, else HTTP/1.1 only,
// with opts applied to the server before it starts.
func startSharingUpstream(t *testing.T, h2 bool, pick func(sni string) *tls.Certificate,
	opts ...func(*httptest.Server)) *sharingUpstream {
	t.Helper()
	u := &sharingUpstream{pick: pick}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.srv.EnableHTTP2 = h2
	u.srv.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.pick(hello.ServerName), nil
	}}
	for _, o := range opts {
		o(u.srv)
	}
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	_, u.port, _ = net.SplitHostPort(u.srv.Listener.Addr().String())
	return u
}

func (u *sharingUpstream) serve(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, seenRequest{host: r.Host, sni: r.TLS.ServerName, major: r.ProtoMajor})
	status := 0
	if u.answer != nil {
		status = u.answer(r)
	}
	u.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
	}
	io.WriteString(w, r.Host)
}

// requests is what the upstream saw so far.
func (u *sharingUpstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

// setPick changes the certificates the upstream presents from the next
// handshake on.
func (u *sharingUpstream) setPick(pick func(sni string) *tls.Certificate) {
	u.mu.Lock()
	u.pick = pick
	u.mu.Unlock()
}

// sharingEgress is a direct Egress trusting ca, with resolve as
// [sidecar.resolve] and the hosts of named (none: resolve's keys) as the
// hosts the configuration names, so they may reach loopback.
func sharingEgress(t *testing.T, ca *testCA, resolve map[string]string, named ...string) *Egress {
	t.Helper()
	return sharingEgressBounded(t, ca, resolve, 256, named...)
}

// sharingEgressBounded is sharingEgress with max_upstream_conns_per_host
// maxConns.
func sharingEgressBounded(t *testing.T, ca *testCA, resolve map[string]string, maxConns int, named ...string) *Egress {
	t.Helper()
	nm := map[string]bool{}
	if named == nil {
		for k := range resolve {
			nm[k] = true
		}
	}
	for _, k := range named {
		nm[k] = true
	}
	s := Settings{upstreamCA: ca.file, dialTimeout: 5 * time.Second, tlsHandshakeTimeout: 5 * time.Second,
		resolve: resolve, named: nm, maxConnsPerHost: maxConns}
	tr, err := NewTransport(s, nil, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Retire)
	return &Egress{t: tr, none: true}
}

// getVia sends a GET for rawURL through e and reads the answer; the
// status and the body (the upstream echoes the Host it was asked for).
func getVia(t *testing.T, e *Egress, rawURL string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// mustGet is getVia that fails t on an error or a status other than 200,
// or an echoed Host other than the URL's.
func mustGet(t *testing.T, e *Egress, host, port string) {
	t.Helper()
	status, body, err := getVia(t, e, "https://"+net.JoinHostPort(host, port)+"/")
	if err != nil || status != http.StatusOK || body != net.JoinHostPort(host, port) {
		t.Fatalf("GET %s: status %d, body %q, err %v", host, status, body, err)
	}
}
