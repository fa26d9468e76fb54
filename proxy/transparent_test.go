package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// TestTransparentHealthyUpstreamInvisible: whatever a healthy upstream
// answers reaches the client unchanged, and the upstream sees each request
// exactly once.
func TestTransparentHealthyUpstreamInvisible(t *testing.T) {
	gz := "\x1f\x8b\x08\x00binary\x00gzip"
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/maven2/ok":
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("X-Upstream", "a")
			w.Header().Set("ETag", `"v1"`)
			io.WriteString(w, gz)
		case "/maven2/missing":
			http.Error(w, "no such artifact", http.StatusNotFound)
		case "/maven2/moved":
			w.Header().Set("Location", "../elsewhere/x.jar")
			w.WriteHeader(http.StatusMovedPermanently)
		case "/maven2/denied":
			http.Error(w, "go away", http.StatusForbidden)
		case "/maven2/upload":
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, r.Method)
		}
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	c := proxyClient(t, tp, nil)
	tests := []struct {
		method, path string
		status       int
		body         string
		header       map[string]string
	}{
		{"GET", "/maven2/ok", 200, gz, map[string]string{"Content-Encoding": "gzip", "X-Upstream": "a", "ETag": `"v1"`}},
		{"HEAD", "/maven2/ok", 200, "", map[string]string{"Content-Encoding": "gzip"}},
		{"GET", "/maven2/missing", 404, "no such artifact\n", nil},
		{"GET", "/maven2/moved", 301, "", map[string]string{"Location": "../elsewhere/x.jar"}},
		{"GET", "/maven2/denied", 403, "go away\n", nil},
		{"PUT", "/maven2/upload", 201, "PUT", nil},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			before := up.hits.Load()
			resp, body := request(t, c, tc.method, up.URL+tc.path, http.Header{"Accept-Encoding": {"gzip"}})
			if resp.StatusCode != tc.status || body != tc.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			for k, v := range tc.header {
				if resp.Header.Get(k) != v {
					t.Errorf("%s = %q, want %q", k, resp.Header.Get(k), v)
				}
			}
			if resp.Header.Get("X-Nora-Upstream") != "" || resp.Header.Get("X-Nora-Breaker-Key") != "" {
				t.Errorf("proxy headers on a transparent answer: %v", resp.Header)
			}
			if n := up.hits.Load() - before; n != 1 {
				t.Fatalf("upstream saw %d requests, want exactly 1", n)
			}
		})
	}
	// 4xx answers are alive, not failures: the breaker stays clean.
	if s := breakerOf(t, tp, ixKey(up.URL)); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("breaker after healthy traffic: %+v", s)
	}
}

// TestTransparentStreamsWithoutBuffering: the client receives the first chunk
// while the upstream is still waiting to send the rest.
func TestTransparentStreamsWithoutBuffering(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first-chunk\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "second-chunk\n")
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	resp, err := proxyClient(t, tp, nil).Get(up.URL + "/maven2/stream")
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "first-chunk\n" {
			close(release)
			t.Fatalf("first line %q", line)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("first chunk not delivered while the upstream held the rest back: the proxy buffers")
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "second-chunk\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
}

// TestTransparentBreakerLifecycle walks one key through closed → open →
// half-open (exactly one probe among many concurrent requests) → closed, and
// a failed probe back to open.
func TestTransparentBreakerLifecycle(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusInternalServerError)
	var hold atomic.Pointer[chan struct{}]
	arrived := make(chan struct{}, 100)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if ch := hold.Load(); ch != nil {
			arrived <- struct{}{}
			select {
			case <-*ch:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(int(status.Load()))
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	c := proxyClient(t, tp, nil)
	key, target := ixKey(up.URL), up.URL+"/maven2/a.jar"

	for i := 0; i < 3; i++ { // POST: never failed over, the 5xx is the answer
		if resp, _ := request(t, c, "POST", target, nil); resp.StatusCode != 500 {
			t.Fatalf("POST %d: %d, want the upstream's 500", i, resp.StatusCode)
		}
	}
	resp, body := request(t, c, "POST", target, nil)
	ixWant503(t, resp, key, "open", "10")
	if !strings.Contains(body, key) || up.hits.Load() != 3 {
		t.Fatalf("body %q, hits %d", body, up.hits.Load())
	}
	tp.Clock.Advance(3500 * time.Millisecond)
	resp, _ = request(t, c, "GET", target, nil)
	ixWant503(t, resp, key, "open", "7") // 6.5 s left, rounded up

	// Probe due: 20 concurrent requests, exactly one reaches the upstream.
	tp.Clock.Advance(6500 * time.Millisecond)
	status.Store(http.StatusOK)
	release := make(chan struct{})
	hold.Store(&release)
	codes := ixConcurrentGets(t, c, target, 20, arrived, release)
	hold.Store(nil)
	if up.hits.Load() != 4 || codes[200] != 1 || codes[503] != 19 {
		t.Fatalf("hits %d, codes %v: want exactly one probe", up.hits.Load(), codes)
	}
	if s := breakerOf(t, tp, key); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("after successful probe: %+v", s)
	}

	// Open again, then a failed probe re-opens it.
	status.Store(http.StatusBadGateway)
	for i := 0; i < 3; i++ {
		request(t, c, "POST", target, nil)
	}
	tp.Clock.Advance(10 * time.Second)
	if resp, _ := request(t, c, "GET", target, nil); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("failed probe answered %d, want the upstream's 502", resp.StatusCode)
	}
	hits := up.hits.Load()
	resp, _ = request(t, c, "GET", target, nil)
	ixWant503(t, resp, key, "open", "10")
	if up.hits.Load() != hits {
		t.Fatal("rejected request reached the upstream")
	}
}

// ixConcurrentGets fires n GETs at once, each for a URL of its own
// (identical GETs would share the probe's decision, docs/behaviour.md
// §5.9); it releases the upstream once every
// request but the one held there has been answered, and counts the statuses.
func ixConcurrentGets(t *testing.T, c *http.Client, target string, n int, arrived <-chan struct{}, release chan struct{}) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := make(map[int]int)
	answered := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(fmt.Sprintf("%s?n=%d", target, i))
			if err != nil {
				t.Error(err)
				answered <- struct{}{}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
			answered <- struct{}{}
		}()
	}
	timeout := time.After(20 * time.Second)
	for got, probe := 0, 0; got < n-1 || probe < 1; {
		select {
		case <-arrived:
			probe++
		case <-answered:
			got++
		case <-timeout:
			close(release)
			t.Fatalf("stuck: %d answered, %d at the upstream", got, probe)
		}
	}
	close(release)
	wg.Wait()
	return codes
}

// TestTransparentDialFailuresOpenBreaker: connection refused counts as a
// failure (502 each), and after the threshold the proxy answers 503 itself.
func TestTransparentDialFailuresOpenBreaker(t *testing.T) {
	base := "http://" + closedPort(t)
	tp := newTestProxy(t, ixMaven(base, true, ""), nil)
	c := proxyClient(t, tp, nil)
	for i := 0; i < 3; i++ {
		resp, body := request(t, c, "GET", base+"/maven2/a.pom", nil)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, ixKey(base)) {
			t.Fatalf("attempt %d: %d %q, want 502 naming the key", i, resp.StatusCode, body)
		}
	}
	resp, _ := request(t, c, "GET", base+"/maven2/a.pom", nil)
	ixWant503(t, resp, ixKey(base), "open", "10")
}

// TestTransparentShortBodyIsFailure: a body that ends before its
// Content-Length counts against the breaker.
func TestTransparentShortBodyIsFailure(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-ten!!")
		buf.Flush()
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, "[circuit_breaker.overrides.maven]\nfailure_threshold = 1\n"), nil)
	c := proxyClient(t, tp, nil)
	resp, err := c.Get(up.URL + "/maven2/a.jar")
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr == nil {
			t.Fatalf("short body read without error: %q", b)
		}
	}
	if s := breakerOf(t, tp, ixKey(up.URL)); s.State != breakerstate.Open {
		t.Fatalf("short body did not count as a failure: %+v\n%s", s, tp.Logs.String())
	}
	resp2, _ := request(t, c, "GET", up.URL+"/maven2/a.jar", nil)
	ixWant503(t, resp2, ixKey(up.URL), "open", "10")
}

// TestTransparentHeaderTimeout: no headers within proxy_timeout → 504 naming
// the key for a method that is not failed over.
func TestTransparentHeaderTimeout(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// net/http notices a closed connection only once the body is read.
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	resp, body := request(t, proxyClient(t, tp, nil), "POST", up.URL+"/maven2/deploy", nil)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, ixKey(up.URL)) {
		t.Fatalf("got %d %q, want 504 naming %s", resp.StatusCode, body, ixKey(up.URL))
	}
	if s := breakerOf(t, tp, ixKey(up.URL)); s.FailureCount != 1 {
		t.Fatalf("timeout not counted: %+v", s)
	}
}

// TestTransparentDisabledBreakerNeverRejects: with the breaker off every
// request reaches the upstream however often it fails.
func TestTransparentDisabledBreakerNeverRejects(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	tp := newTestProxy(t, ixMaven(up.URL, false, ""), nil)
	c := proxyClient(t, tp, nil)
	for i := 0; i < 8; i++ {
		if resp, _ := request(t, c, "POST", up.URL+"/maven2/x", nil); resp.StatusCode != 500 {
			t.Fatalf("request %d: %d, want the upstream's 500", i, resp.StatusCode)
		}
	}
	if up.hits.Load() != 8 {
		t.Fatalf("upstream hits %d, want 8", up.hits.Load())
	}
}
