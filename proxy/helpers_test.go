package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// testProxy is a real Proxy serving on loopback listeners.
type testProxy struct {
	*Proxy
	URL      *url.URL // the proxy listener, for http.ProxyURL
	AdminURL string
	Clock    *testkit.Clock
	Logs     *testkit.SyncBuffer
	Registry *prometheus.Registry
	// stop ends Serve (as SIGTERM does) and returns what it returned,
	// once it has.
	stop func() error
}

// newTestProxy starts a proxy for tomlText on 127.0.0.1 ephemeral ports and
// stops it when the test ends.
func newTestProxy(t testing.TB, tomlText string, env map[string]string) *testProxy {
	t.Helper()
	return startProxy(t, testkit.LoadConfig(t, tomlText, env))
}

func startProxy(t testing.TB, cfg *config.Config) *testProxy {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	tp := startProxyLogged(t, cfg, zerolog.New(logs).Level(zerolog.DebugLevel))
	tp.Logs = logs
	return tp
}

// startProxyLogged is startProxy with a logger of the test's choosing;
// tp.Logs is left nil.
func startProxyLogged(t testing.TB, cfg *config.Config, log zerolog.Logger) *testProxy {
	t.Helper()
	return startProxyWrapped(t, cfg, log, nil)
}

// startProxyWrapped is startProxyLogged whose proxy listener is passed
// through wrap first (nil: as it is).
func startProxyWrapped(t testing.TB, cfg *config.Config, log zerolog.Logger, wrap func(net.Listener) net.Listener) *testProxy {
	t.Helper()
	return startProxyWith(t, cfg, log, wrap, 0)
}

// startProxyWith is startProxyWrapped with a shutdown grace of its own
// (0: the default). tp.stop ends Serve and waits for it, once; the test's
// cleanup does the same.
func startProxyWith(t testing.TB, cfg *config.Config, log zerolog.Logger, wrap func(net.Listener) net.Listener,
	grace time.Duration) *testProxy {
	t.Helper()
	clock := testkit.NewClock()
	reg := prometheus.NewRegistry()
	// A draw of one half moves nothing: the tests' open periods and
	// Retry-After are exactly reset_timeout (jitter has its own tests in
	// breakerstate).
	p, err := New(cfg, Deps{Registry: reg, Logger: log, Now: clock.Now, Rand: func() float64 { return 0.5 }, Version: "test",
		ShutdownGrace: grace})
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		proxyLn = wrap(proxyLn)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, proxyLn, adminLn) }()
	var once sync.Once
	var served error
	stop := func() error {
		once.Do(func() {
			cancel()
			served = <-done
		})
		return served
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testProxy{Proxy: p, URL: &url.URL{Scheme: "http", Host: proxyLn.Addr().String()},
		AdminURL: "http://" + adminLn.Addr().String(), Clock: clock, Registry: reg, stop: stop}
}

// doRequest sends one request through c and returns the response with its
// body read and closed.
func doRequest(t testing.TB, c *http.Client, method, url string, body io.Reader, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, string(b)
}

// breakerOf returns key's breaker snapshot.
func breakerOf(t testing.TB, tp *testProxy, key string) breakerstate.Snapshot {
	t.Helper()
	for _, s := range tp.Breakers().Snapshot() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no breaker %q", key)
	return breakerstate.Snapshot{}
}

// proxyClient returns a client that sends everything through tp. roots, when
// set, are the only trusted roots (the interception CA).
func proxyClient(t testing.TB, tp *testProxy, roots *x509.CertPool) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:              http.ProxyURL(tp.URL),
		DisableCompression: true,
		TLSClientConfig:    &tls.Config{RootCAs: roots},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// upstream is an httptest server that counts the requests it sees.
type upstream struct {
	*httptest.Server
	hits atomic.Int64
}

func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func newTLSUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// writeUpstreamCA stores an httptest TLS server's certificate as a PEM file
// for [sidecar] upstream_ca.
func writeUpstreamCA(t testing.TB, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "upstream-ca.pem")
	var buf bytes.Buffer
	if err := pemEncodeCert(&buf, srv.Certificate().Raw); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// closedPort returns a loopback address nobody listens on (connection
// refused). The port stays held, not listening, until the test ends: a port
// closed and handed on could be taken by another test package's server.
func closedPort(t testing.TB) string {
	t.Helper()
	h, err := listenaddr.NewHold()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h.Addr()
}

func pemEncodeCert(buf *bytes.Buffer, der []byte) error {
	return pem.Encode(buf, &pem.Block{Type: "CERTIFICATE", Bytes: der})
}
