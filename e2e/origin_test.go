//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// originCA signs the server certificates of the HTTPS upstreams (docker
// registries, Go module proxy). nora-breaker trusts it via upstream_ca; the
// clients trust only nora-breaker's own interception CA.
type originCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pemPath string
}

// newOriginCA makes a CA and writes its certificate to dir/origin-ca.pem.
func newOriginCA(t *testing.T, dir string) *originCA {
	t.Helper()
	return newNamedCA(t, dir, "origin-ca", "nora-breaker e2e origin CA")
}

// newNamedCA makes a CA called cn and writes its certificate to
// dir/<file>.pem: scenarios that need a second, independent CA use it.
func newNamedCA(t *testing.T, dir, file, cn string) *originCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &originCA{cert: cert, key: key, pemPath: filepath.Join(dir, file+".pem")}
	writeFile(t, ca.pemPath, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return ca
}

// serverTLS returns a TLS config with a leaf for the given host names.
func (ca *originCA) serverTLS(t *testing.T, hosts ...string) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: hosts[0]},
		DNSNames:     hosts,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// front is the counting layer in front of one upstream origin: it accepts
// the connections nora-breaker (through toxiproxy) makes, counts them and
// the HTTP requests on them, and hands each request to the origin. When
// the origin is gone it drops the connection without an answer, as a dead
// server would.
type front struct {
	name   string
	addr   string
	origin atomic.Pointer[string] // host:port the reverse proxy forwards to
	conns  atomic.Int64
	reqs   atomic.Int64
	mu     sync.Mutex
	paths  []string
	// uris are the same requests with their query (containerd names the
	// registry a mirror request is for in ?ns=).
	uris []string
}

// newFront serves h (or a reverse proxy to target when h is nil) on a
// loopback port, over TLS when tlsCfg is set.
func newFront(t *testing.T, name, target string, h http.Handler, tlsCfg *tls.Config) *front {
	t.Helper()
	f := &front{name: name}
	if h == nil {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatal(err)
		}
		f.origin.Store(&u.Host)
		// An origin restarted on a new port (it binds port 0) is found
		// through retarget; the path is joined under the target's, and the
		// Host the client sent goes on as it came.
		rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: u.Scheme, Host: *f.origin.Load(), Path: u.Path, RawPath: u.RawPath})
			pr.Out.Host = pr.In.Host
		}}
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			w.WriteHeader(http.StatusBadGateway)
		}
		h = rp
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.reqs.Add(1)
			f.mu.Lock()
			f.paths = append(f.paths, r.Method+" "+r.URL.Path)
			f.uris = append(f.uris, r.Method+" "+r.URL.RequestURI())
			f.mu.Unlock()
			h.ServeHTTP(w, r)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				f.conns.Add(1)
			}
		},
		TLSConfig: tlsCfg,
		// Handshakes reset by toxiproxy are expected; keep them out of the test output.
		ErrorLog:          log.New(io.Discard, "", 0),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if tlsCfg != nil {
			_ = srv.ServeTLS(l, "", "")
		} else {
			_ = srv.Serve(l)
		}
	}()
	t.Cleanup(func() { srv.Close() })
	return f
}

// retarget sends the front's later requests to the origin at hostport (an
// origin that came back on another port).
func (f *front) retarget(hostport string) { f.origin.Store(&hostport) }

// seen is the front's counters as "name=Nreq/Mconn".
func (f *front) seen() string {
	return fmt.Sprintf("%s=%dreq/%dconn", f.name, f.reqs.Load(), f.conns.Load())
}

// count returns the requests and connections seen so far.
func (f *front) count() (reqs, conns int64) { return f.reqs.Load(), f.conns.Load() }

// pathsMatching returns the sorted request lines containing sub.
func (f *front) pathsMatching(sub string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.paths {
		if strings.Contains(p, sub) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// requestsMatching returns the request lines, query included, containing
// sub, in the order they came.
func (f *front) requestsMatching(sub string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, u := range f.uris {
		if strings.Contains(u, sub) {
			out = append(out, u)
		}
	}
	return out
}
