package dial

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// countingServer is an httptest server that counts the connections it
// accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func plainDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func get(t *testing.T, rt http.RoundTripper, url string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestH1KeepsConnections: answers read to their end leave the connection
// for the next request; one closed early closes its connection.
func TestH1KeepsConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	})
	tr := newH1(plainDial, 0)
	for i := range 10 {
		if _, body := get(t, tr, fmt.Sprintf("%s/a/%d", srv.URL, i)); body != fmt.Sprintf("GET /a/%d", i) {
			t.Fatalf("body %q", body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 10 sequential requests, want 1", n)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/b", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // unread: the connection cannot be reused
	get(t, tr, srv.URL+"/c")
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections after an answer closed unread, want 2", n)
	}
}

// TestH1RetriesAConnectionTheUpstreamClosed: a kept connection the upstream
// closed meanwhile is noticed at the next request, which is sent again on a
// new connection.
func TestH1RetriesAConnectionTheUpstreamClosed(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := newH1(plainDial, 0)
	get(t, tr, srv.URL+"/1")
	srv.CloseClientConnections()
	if _, body := get(t, tr, srv.URL+"/2"); body != "ok" {
		t.Fatalf("body %q", body)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestH1CancelEndsTheWait: the request's context ending unblocks a round
// trip waiting for headers, with the context's error.
func TestH1CancelEndsTheWait(t *testing.T) {
	release := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	tr := newH1(plainDial, 0)
	ctx, cancel := context.WithCancelCause(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/hang", nil)
	done := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		done <- err
	}()
	cancel(errors.New("the header wait ran out"))
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want the context's", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled round trip still waits")
	}
}

// rawServer answers every connection's first request with the given bytes.
func rawServer(t *testing.T, answer string) string {
	return connServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, answer)
		}
	})
}

// TestH1HostileAnswers: an endless header is cut off at the bound, and 1xx
// answers before the real one are passed over.
func TestH1HostileAnswers(t *testing.T) {
	tr := newH1(plainDial, 0)
	tr.maxHeader = 4 << 10
	endless := rawServer(t, "HTTP/1.1 200 OK\r\nX-A: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	req, _ := http.NewRequest(http.MethodGet, endless+"/", nil)
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("a 64 KiB header against a 4 KiB bound: %v", err)
	}
	hints := rawServer(t, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	if resp, body := get(t, tr, hints+"/"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after a 103: %d %q", resp.StatusCode, body)
	}
}

// TestH1BoundsConnectionsPerHost: with a bound of 2, a third concurrent
// request waits for a connection instead of opening one.
func TestH1BoundsConnectionsPerHost(t *testing.T) {
	var inside, most atomic.Int64
	release := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		inside.Add(-1)
		io.WriteString(w, "ok")
	})
	tr := newH1(plainDial, 2)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() { get(t, tr, fmt.Sprintf("%s/%d", srv.URL, i)) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for inside.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	if most.Load() > 2 || conns.Load() > 2 {
		t.Fatalf("%d requests at once over %d connections, want at most 2", most.Load(), conns.Load())
	}
}

// TestH1Concurrent: many goroutines over a few hosts, bodies whole (-race).
func TestH1Concurrent(t *testing.T) {
	var srvs []*httptest.Server
	for range 3 {
		srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, strings.Repeat(r.URL.Path, 100))
		})
		srvs = append(srvs, srv)
	}
	tr := newH1(plainDial, 8)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				path := fmt.Sprintf("/%d-%d", g, i)
				_, body := get(t, tr, srvs[(g+i)%3].URL+path)
				if body != strings.Repeat(path, 100) {
					t.Errorf("%s: body %d bytes", path, len(body))
					return
				}
			}
		})
	}
	wg.Wait()
	tr.CloseIdleConnections()
}

// TestH1EarlyCloseCutsTheConnection: a body closed before its end closes
// the connection at once instead of reading the rest (net/http's own body
// drains it, so a client that stopped reading would keep the upstream
// sending), and a Close from another goroutine ends a Read in progress.
func TestH1EarlyCloseCutsTheConnection(t *testing.T) {
	resp, stopped := endlessBody(t, context.Background())
	readDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, resp.Body)
		readDone <- err
	}()
	closed := make(chan struct{})
	go func() {
		resp.Body.Close()
		close(closed)
	}()
	for name, ch := range map[string]<-chan struct{}{"Close": closed, "the upstream's writes": stopped} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still going 10 s after an early Close", name)
		}
	}
	select {
	case err := <-readDone:
		if err == nil {
			t.Fatal("a Read cut by Close ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Read in progress was not ended by Close")
	}
}

// TestH1AnswersWithoutBodyFreeTheConnection: a HEAD, a 204 and a 304 leave
// their connection for the next request without their body being read or
// closed.
func TestH1AnswersWithoutBodyFreeTheConnection(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		}
	})
	tr := newH1(plainDial, 0)
	for _, c := range []struct{ method, path string }{{http.MethodHead, "/"}, {http.MethodGet, "/204"},
		{http.MethodGet, "/304"}, {http.MethodHead, "/again"}} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		if resp.StatusCode >= 400 {
			t.Fatalf("%s %s: %s", c.method, c.path, resp.Status)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for four answers without a body, want 1", n)
	}
}

// TestH1CancelDuringTheBodyClosesTheConnection: the request's context
// ending while the body is being read closes the connection, so the
// upstream stops sending even though nobody closes the body.
func TestH1CancelDuringTheBodyClosesTheConnection(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	resp, stopped := endlessBody(t, ctx)
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream still sends 10 s after the request was cancelled")
	}
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Fatal("a cancelled body read to its end without an error")
	}
	resp.Body.Close()
}

// endlessBody asks, through an h1 transport of its own, a server that
// writes until its connection breaks, and returns the answer with its first
// 64 KiB read; stopped is closed when the server's writes have stopped.
func endlessBody(t *testing.T, ctx context.Context) (*http.Response, <-chan struct{}) {
	t.Helper()
	stopped := make(chan struct{})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(stopped)
		chunk := make([]byte, 32<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/endless", nil)
	resp, err := newH1(plainDial, 0).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 64<<10); err != nil {
		t.Fatal(err)
	}
	return resp, stopped
}

// connServer is a TCP server on loopback that hands each connection, with
// its number (from 1), to serve.
func connServer(t *testing.T, serve func(n int, c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(n, c, bufio.NewReader(c)) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestH1NeverReusesAConnectionThatReceivedUnaskedBytes: bytes that come
// in on a kept connection after its answer was complete (the body of a
// HEAD answer sent anyway) make it unfit for the next request: it is
// closed when taken, and the next request goes on a new connection, never
// to be answered by those bytes.
func TestH1NeverReusesAConnectionThatReceivedUnaskedBytes(t *testing.T) {
	answered := make(chan struct{})
	var secondOnFirst atomic.Bool
	base := connServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if n == 1 && i > 0 {
				secondOnFirst.Store(true)
			}
			if req.Method == http.MethodHead {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n")
				<-answered
				io.WriteString(c, "jarbytes")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood")
		}
	})
	tr := newH1(plainDial, 0)
	req, _ := http.NewRequest(http.MethodHead, base+"/a", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	close(answered)
	// Wait until the bytes are there to be found, so that it is the check
	// when the connection is taken that finds them, not the answer's read.
	testkit.PollUntil(t, 5*time.Second, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, list := range tr.idle {
			return len(list) == 1 && list[0].check.unsolicited()
		}
		return false
	})
	if _, body := get(t, tr, base+"/b"); body != "good" {
		t.Fatalf("body %q", body)
	}
	if secondOnFirst.Load() {
		t.Fatal("the connection that received unasked bytes carried the next request")
	}
}

// TestH1SendsAgainWhatAKeptConnectionAnsweredWithLeftovers: bytes that
// come in on a kept connection after the check that took it are read as
// the next request's answer and are no status line; that is the
// connection's, not the upstream's answer, so a repeatable request is sent
// again on a new connection. A new connection's malformed answer is the
// upstream's: an error, sent no second time.
func TestH1SendsAgainWhatAKeptConnectionAnsweredWithLeftovers(t *testing.T) {
	var conns atomic.Int64
	base := connServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		for i := 0; ; i++ {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			if n == 1 && i == 1 {
				io.WriteString(c, "jarbytes") // late, as if after the check
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood")
		}
	})
	tr := newH1(plainDial, 0)
	for _, path := range []string{"/1", "/2"} {
		if _, body := get(t, tr, base+path); body != "good" {
			t.Fatalf("%s: body %q", path, body)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the second request sent again on a new one)", n)
	}

	conns.Store(0)
	garbled := connServer(t, func(n int, c net.Conn, br *bufio.Reader) {
		conns.Add(1)
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, "jarbytesHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood")
		}
	})
	req, _ := http.NewRequest(http.MethodGet, garbled+"/", nil)
	if _, err := tr.RoundTrip(req); err == nil || errors.Is(err, errReused) {
		t.Fatalf("a new connection's malformed answer: %v, want the upstream's error", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("a malformed answer on a new connection was asked %d times, want once", n)
	}
}

// TestH1KeysConnectionsByTheCanonicalHost: one upstream host spelled
// three ways (a trailing dot, upper case, the default port written out)
// is one host to the pool: its kept connection serves all three and its
// bound counts them together. On main each spelling had a pool and a
// bound of its own, so max_upstream_conns_per_host could be passed by
// mixing spellings.
func TestH1KeysConnectionsByTheCanonicalHost(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	var dialled []string
	var mu sync.Mutex
	tr := newH1(func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		return plainDial(ctx, network, srv.Listener.Addr().String())
	}, 1)
	for _, host := range []string{"repo.test", "Repo.Test.", "REPO.TEST:80"} {
		if _, body := get(t, tr, "http://"+host+"/x"); body != "ok" {
			t.Fatalf("%s: %q", host, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if conns.Load() != 1 || len(dialled) != 1 || dialled[0] != "repo.test:80" {
		t.Fatalf("%d connections, dialled %v; want one, to repo.test:80", conns.Load(), dialled)
	}
}
