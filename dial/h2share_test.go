package dial

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// both is a picker presenting one certificate to every name.
func both(c *tls.Certificate) func(string) *tls.Certificate {
	return func(string) *tls.Certificate { return c }
}

// resolveTo maps host:port of each host to addr.
func resolveTo(addr, port string, hosts ...string) map[string]string {
	m := map[string]string{}
	for _, h := range hosts {
		m[net.JoinHostPort(h, port)] = addr
	}
	return m
}

// TestHostsOfOneServerShareAConnection: two host names resolving to one
// server whose certificate covers both go over one TCP/TLS connection,
// over HTTP/2, each request naming its own host as its authority. Without
// sharing, the second name dialled a connection of its own.
func TestHostsOfOneServerShareAConnection(t *testing.T) {
	ca := newTestCA(t)
	up := startSharingUpstream(t, true, both(ca.leaf(t, "a.test", "b.test")))
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test", "b.test"))
	for _, h := range []string{"a.test", "b.test", "a.test", "b.test"} {
		mustGet(t, e, h, up.port)
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1 shared by both names", n)
	}
	for i, r := range up.requests() {
		want := []string{"a.test", "b.test"}[i%2] + ":" + up.port
		if r.host != want || r.major != 2 || r.sni != "a.test" {
			t.Errorf("request %d: authority %q over HTTP/%d on a connection for %q, want %q over HTTP/2 on a.test's",
				i, r.host, r.major, r.sni, want)
		}
	}
}

// TestCertificateNotCoveringTheHostIsNotShared: a connection whose
// certificate covers a.test alone never carries a request for b.test,
// though b.test resolves to the same server: b.test gets its own
// connection, verified for b.test.
func TestCertificateNotCoveringTheHostIsNotShared(t *testing.T) {
	ca := newTestCA(t)
	certA, certB := ca.leaf(t, "a.test"), ca.leaf(t, "b.test")
	up := startSharingUpstream(t, true, func(sni string) *tls.Certificate {
		if sni == "b.test" {
			return certB
		}
		return certA
	})
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test", "b.test"))
	for _, h := range []string{"a.test", "b.test", "b.test", "a.test"} {
		mustGet(t, e, h, up.port)
	}
	if n := up.conns.Load(); n != 2 {
		t.Errorf("the upstream accepted %d connections, want one per name", n)
	}
	for i, r := range up.requests() {
		if host, _, _ := net.SplitHostPort(r.host); host != r.sni {
			t.Errorf("request %d for %s came on a connection for %s", i, r.host, r.sni)
		}
	}
}

// TestRotatedCertificateIsCheckedAgain: what one connection's certificate
// covered is never assumed of the next. The server presents a certificate
// for both names, then, rotated, one for a.test alone; b.test, asked after
// a.test's new connection, must not go on it. The server issues no
// session tickets: a resumed session keeps the certificate it was made
// with (the server vouched for it by resuming), so only a full handshake
// presents the rotated one.
func TestRotatedCertificateIsCheckedAgain(t *testing.T) {
	ca := newTestCA(t)
	certAB, certA, certB := ca.leaf(t, "a.test", "b.test"), ca.leaf(t, "a.test"), ca.leaf(t, "b.test")
	up := startSharingUpstream(t, true, both(certAB), noTickets)
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test", "b.test"))
	mustGet(t, e, "a.test", up.port)
	mustGet(t, e, "b.test", up.port)
	up.setPick(func(sni string) *tls.Certificate {
		if sni == "b.test" {
			return certB
		}
		return certA
	})
	e.t.CloseIdleConnections()
	testkit.PollUntil(t, 5*time.Second, func() bool {
		e.t.shared.mu.Lock()
		defer e.t.shared.mu.Unlock()
		return len(e.t.shared.conns) == 0
	})
	mustGet(t, e, "a.test", up.port)
	mustGet(t, e, "b.test", up.port)
	if n := up.conns.Load(); n != 3 {
		t.Errorf("the upstream accepted %d connections, want 3 (shared, then a.test's and b.test's)", n)
	}
	last := up.requests()[3]
	if last.sni != "b.test" {
		t.Errorf("after the rotation b.test went on a connection for %q", last.sni)
	}
}

// TestHostResolvingElsewhereIsNotShared: a host whose resolve entry points
// at another server gets its own connection there, though the first
// server's certificate covers it and the port is the same.
func TestHostResolvingElsewhereIsNotShared(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.leaf(t, "a.test", "b.test")
	one := startSharingUpstream(t, true, both(cert))
	other := startSharingUpstream(t, true, both(cert))
	resolve := map[string]string{net.JoinHostPort("a.test", one.port): one.srv.Listener.Addr().String(),
		net.JoinHostPort("b.test", one.port): other.srv.Listener.Addr().String()}
	e := sharingEgress(t, ca, resolve)
	mustGet(t, e, "a.test", one.port)
	mustGet(t, e, "b.test", one.port)
	if n, m := one.conns.Load(), other.conns.Load(); n != 1 || m != 1 {
		t.Errorf("connections accepted: %d and %d, want 1 each", n, m)
	}
	if got := other.requests(); len(got) != 1 || got[0].host != "b.test:"+one.port {
		t.Errorf("the other server saw %+v, want b.test's request", got)
	}
}

// TestSharingObeysTheDestinationPolicy: a host the configuration does not
// name may not reach loopback by riding a named host's connection: it is
// refused as its own dial would be, and nothing reaches the server.
func TestSharingObeysTheDestinationPolicy(t *testing.T) {
	ca := newTestCA(t)
	up := startSharingUpstream(t, true, both(ca.leaf(t, "a.test", "b.test")))
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test", "b.test"),
		net.JoinHostPort("a.test", up.port))
	mustGet(t, e, "a.test", up.port)
	if _, _, err := getVia(t, e, "https://"+net.JoinHostPort("b.test", up.port)+"/"); !errors.Is(err, destination.ErrForbidden) {
		t.Errorf("b.test: %v, want destination.ErrForbidden", err)
	}
	if got := up.requests(); len(got) != 1 {
		t.Errorf("the server saw %d requests, want a.test's alone", len(got))
	}
}

// TestHTTP1UpstreamKeepsItsConnections: a server that speaks HTTP/1.1
// only costs one connection per host name, kept alive, as before the
// pool: the connection the pool dialled when it learned that is the one
// net/http's transport goes on using.
func TestHTTP1UpstreamKeepsItsConnections(t *testing.T) {
	ca := newTestCA(t)
	up := startSharingUpstream(t, false, both(ca.leaf(t, "a.test", "b.test")))
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test", "b.test"))
	for _, h := range []string{"a.test", "a.test", "b.test", "b.test", "a.test"} {
		mustGet(t, e, h, up.port)
	}
	if n := up.conns.Load(); n != 2 {
		t.Errorf("the upstream accepted %d connections, want one per name", n)
	}
	for i, r := range up.requests() {
		if r.major != 1 {
			t.Errorf("request %d over HTTP/%d, want HTTP/1.1", i, r.major)
		}
	}
}

// TestMisdirectedOnASharedConnectionRetriesOnItsOwn: a server that
// answers 421 to a host it does not serve on a shared connection has the
// request sent again on a connection dialled for that host, and the
// shared one is not offered to that host again.
func TestMisdirectedOnASharedConnectionRetriesOnItsOwn(t *testing.T) {
	ca := newTestCA(t)
	up := startSharingUpstream(t, true, both(ca.leaf(t, "a.test", "b.test")))
	misdirected := 0
	up.mu.Lock()
	up.answer = func(r *http.Request) int {
		if host, _, _ := net.SplitHostPort(r.Host); host != r.TLS.ServerName {
			misdirected++ // under up.mu
			return http.StatusMisdirectedRequest
		}
		return 0
	}
	up.mu.Unlock()
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test", "b.test"))
	for _, h := range []string{"a.test", "b.test", "b.test", "a.test"} {
		mustGet(t, e, h, up.port)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if misdirected != 1 || up.conns.Load() != 2 {
		t.Errorf("%d answers 421 over %d connections, want one 421, then b.test on its own connection",
			misdirected, up.conns.Load())
	}
}

// TestManyNamesManyGoroutinesShare (run with -race): 8 goroutines asking
// 40 names of one server with a wildcard certificate share a handful of
// connections (at most one per goroutine's first request, dialled before
// any connection existed), and every answer is for the host asked.
// Without sharing each name had its own connection.
func TestManyNamesManyGoroutinesShare(t *testing.T) {
	ca := newTestCA(t)
	up := startSharingUpstream(t, true, both(ca.leaf(t, "*.many.test")))
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("h%02d.many.test", i))
	}
	e := sharingEgress(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, names...))
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range 100 {
				h := names[(w*7+i*3)%len(names)]
				status, body, err := getVia(t, e, "https://"+net.JoinHostPort(h, up.port)+"/")
				if err != nil || status != http.StatusOK || body != net.JoinHostPort(h, up.port) {
					errs <- fmt.Errorf("GET %s: status %d, body %q, err %v", h, status, body, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := up.conns.Load(); n > workers {
		t.Errorf("the upstream accepted %d connections for %d names, want at most %d", n, len(names), workers)
	}
	seen := map[string]bool{}
	for _, r := range up.requests() {
		seen[r.host] = true
	}
	if len(seen) != len(names) {
		t.Errorf("the upstream saw %d distinct authorities, want %d", len(seen), len(names))
	}
	if !slices.ContainsFunc(up.requests(), func(r seenRequest) bool { return r.major == 2 }) {
		t.Error("no request went over HTTP/2")
	}
}

// TestBoundedHostWaitsForAStream: at max_upstream_conns_per_host 1, with a
// server that allows two streams at once, six requests at once share the
// one connection, the four beyond its streams waiting for one to free up,
// and every one is answered. (Stream reservations made the waiting ones
// wait on each other forever.)
func TestBoundedHostWaitsForAStream(t *testing.T) {
	ca := newTestCA(t)
	up := startSharingUpstream(t, true, both(ca.leaf(t, "a.test")), func(s *httptest.Server) {
		s.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 2}
	})
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	// Before the server's Close, which waits for the held handlers.
	t.Cleanup(free)
	up.mu.Lock()
	up.answer = func(*http.Request) int {
		if len(up.seen) <= 2 {
			// The first two hold their streams until the test sees
			// the others waiting.
			up.mu.Unlock()
			<-release
			up.mu.Lock()
		}
		return 0
	}
	up.mu.Unlock()
	e := sharingEgressBounded(t, ca, resolveTo(up.srv.Listener.Addr().String(), up.port, "a.test"), 1)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			status, _, err := getVia(t, e, "https://"+net.JoinHostPort("a.test", up.port)+"/")
			if err != nil || status != http.StatusOK {
				errs <- fmt.Errorf("status %d, err %v", status, err)
			}
		})
	}
	testkit.PollUntil(t, 5*time.Second, func() bool {
		e.t.shared.mu.Lock()
		defer e.t.shared.mu.Unlock()
		for c := range e.t.shared.conns {
			// One of the four waits in line for a stream (the
			// others behind it, for x/net's header lock).
			if st := c.State(); st.StreamsActive == 2 && st.StreamsPending == 1 {
				return true
			}
		}
		return false
	})
	free()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := up.conns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1", n)
	}
}
