package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// resumingClient is ix's client with a TLS session cache, as curl and
// OpenSSL keep one, and a connection of its own for every request.
func resumingClient(t *testing.T, ix *ixIntercept, h2 bool) *http.Client {
	c := ix.client(t, h2)
	tr := c.Transport.(*http.Transport)
	tr.TLSClientConfig.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	tr.DisableKeepAlives = true
	return c
}

// TestInterceptedClientsResumeTheirSessions: a client that keeps its TLS
// sessions resumes on its next connection through the proxy instead of
// paying a full handshake, on HTTP/1.1 and HTTP/2, TLS 1.3 and 1.2, and
// the handshakes are counted by whether they resumed (docs/behaviour.md
// §5.2).
func TestInterceptedClientsResumeTheirSessions(t *testing.T) {
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "jar") })
	resumed := ix.tp.metrics.handshakes.WithLabelValues("true")
	full := ix.tp.metrics.handshakes.WithLabelValues("false")
	for _, tc := range []struct {
		h2      bool
		version uint16
	}{{false, tls.VersionTLS13}, {true, tls.VersionTLS13}, {false, tls.VersionTLS12}, {true, tls.VersionTLS12}} {
		t.Run(fmt.Sprintf("h2=%v/%s", tc.h2, tls.VersionName(tc.version)), func(t *testing.T) {
			c := resumingClient(t, ix, tc.h2)
			c.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tc.version
			r0, f0 := testutil.ToFloat64(resumed), testutil.ToFloat64(full)
			for i, want := range []bool{false, true, true} {
				resp, body := request(t, c, "GET", ix.up.URL+"/maven2/g/a.jar", nil)
				if resp.StatusCode != http.StatusOK || body != "jar" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				if resp.TLS.DidResume != want || resp.TLS.Version != tc.version {
					t.Fatalf("connection %d: %s, resumed %v; want %s, resumed %v", i,
						tls.VersionName(resp.TLS.Version), resp.TLS.DidResume, tls.VersionName(tc.version), want)
				}
			}
			if r, f := testutil.ToFloat64(resumed)-r0, testutil.ToFloat64(full)-f0; r != 2 || f != 1 {
				t.Fatalf("handshakes counted: %v resumed, %v full; want 2 and 1", r, f)
			}
		})
	}
}

// TestSessionResumesOnlyItsOwnTarget: a ticket issued inside a tunnel to
// one CONNECT target does not resume a tunnel to another. Go's client
// keys its sessions by server name alone, so it offers the session of
// 127.0.0.1:A to 127.0.0.1:B; the proxy must answer with a full handshake.
func TestSessionResumesOnlyItsOwnTarget(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "jar") }
	a, b := newTLSUpstream(t, h), newTLSUpstream(t, h)
	lines, pool := interceptCA(t, a.Server) // httptest servers share one certificate
	tp := newTestProxy(t, fmt.Sprintf(`
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/maven2"]
[sidecar]
%s`, a.URL, b.URL, lines), nil)
	c := resumingClient(t, &ixIntercept{up: a, tp: tp, ca: pool}, false)
	for i, step := range []struct {
		up     *upstream
		resume bool
	}{{a, false}, {a, true}, {b, false}, {b, true}, {a, false}} {
		resp, body := request(t, c, "GET", step.up.URL+"/maven2/g/a.jar", nil)
		if resp.StatusCode != http.StatusOK || body != "jar" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if resp.TLS.DidResume != step.resume {
			t.Fatalf("connection %d to %s resumed %v, want %v", i, step.up.URL, resp.TLS.DidResume, step.resume)
		}
	}
}

// TestTicketOfAnotherProcessGetsAFullHandshake: after a restart (here, a
// second proxy with the same CA) the tickets clients kept cannot be
// opened; each gets a full handshake, not an error.
func TestTicketOfAnotherProcessGetsAFullHandshake(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "jar") }
	up := newTLSUpstream(t, h)
	lines, pool := interceptCA(t, up.Server)
	conf := ixMaven(up.URL, true, "[sidecar]\n"+lines)
	first := &ixIntercept{up: up, tp: newTestProxy(t, conf, nil), ca: pool}
	second := &ixIntercept{up: up, tp: newTestProxy(t, conf, nil), ca: pool}
	cache := tls.NewLRUClientSessionCache(8)
	for i, step := range []struct {
		ix     *ixIntercept
		resume bool
	}{{first, false}, {first, true}, {second, false}, {second, true}} {
		c := resumingClient(t, step.ix, false)
		c.Transport.(*http.Transport).TLSClientConfig.ClientSessionCache = cache
		resp, body := request(t, c, "GET", up.URL+"/maven2/g/a.jar", nil)
		if resp.StatusCode != http.StatusOK || body != "jar" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if resp.TLS.DidResume != step.resume {
			t.Fatalf("connection %d resumed %v, want %v", i, resp.TLS.DidResume, step.resume)
		}
	}
}

// TestManyClientsResumeAtOnce: clients handshaking and resuming at the
// same time share the keys safely (run with -race); every connection after
// a client's first resumes.
func TestManyClientsResumeAtOnce(t *testing.T) {
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "jar") })
	const clients, conns = 16, 6
	var wg sync.WaitGroup
	errs := make(chan error, clients*conns)
	for g := range clients {
		c := resumingClient(t, ix, g%2 == 0)
		wg.Go(func() {
			for i := range conns {
				resp, err := c.Get(fmt.Sprintf("%s/maven2/g/a.jar?c=%d&i=%d", ix.up.URL, g, i))
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.TLS.DidResume != (i > 0) {
					errs <- fmt.Errorf("client %d connection %d: %d, resumed %v", g, i, resp.StatusCode, resp.TLS.DidResume)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if r := testutil.ToFloat64(ix.tp.metrics.handshakes.WithLabelValues("true")); r != clients*(conns-1) {
		t.Fatalf("%v handshakes resumed, want %d", r, clients*(conns-1))
	}
}
