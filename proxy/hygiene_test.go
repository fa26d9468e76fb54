package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ixRaw writes raw (a complete request) to the proxy and reads one answer.
func ixRaw(t testing.TB, tp *testProxy, raw string) (*http.Response, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", tp.URL.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// ixHeaderRecorder is an upstream handler that keeps the last request's headers.
type ixHeaderRecorder struct {
	mu   sync.Mutex
	last http.Header
}

func (h *ixHeaderRecorder) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.last = r.Header.Clone()
	h.mu.Unlock()
	w.Header().Set("Connection", "X-Resp-Hop")
	w.Header().Set("X-Resp-Hop", "1")
	w.Header().Set("Keep-Alive", "timeout=5")
	io.WriteString(w, "ok")
}

func (h *ixHeaderRecorder) get() http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

func TestHygieneStripsHopByHop(t *testing.T) {
	rec := &ixHeaderRecorder{}
	up := newUpstream(t, rec.serve)
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	host := strings.TrimPrefix(up.URL, "http://")
	resp, body := ixRaw(t, tp, "GET "+up.URL+"/maven2/a.jar HTTP/1.1\r\nHost: "+host+"\r\n"+
		"Connection: X-Custom-Hop, keep-alive\r\nX-Custom-Hop: secret\r\nKeep-Alive: timeout=5\r\n"+
		"TE: trailers\r\nTrailer: X-Sum\r\nUpgrade: h2c\r\nProxy-Authorization: Basic cHJveHk6cGFzcw==\r\n"+
		"Proxy-Connection: keep-alive\r\nVia: 1.0 squid\r\nX-Keep: yes\r\n\r\n")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	got := rec.get()
	for _, h := range []string{"Connection", "X-Custom-Hop", "Keep-Alive", "Te", "Trailer", "Upgrade",
		"Proxy-Authorization", "Proxy-Connection"} {
		if v, ok := got[h]; ok {
			t.Errorf("upstream saw %s: %q", h, v)
		}
	}
	if got.Get("X-Keep") != "yes" || got.Get("Via") != "1.0 squid, 1.1 nora-breaker" {
		t.Errorf("end-to-end headers: X-Keep %q Via %q", got.Get("X-Keep"), got.Get("Via"))
	}
	if resp.Header.Get("X-Resp-Hop") != "" || resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("hop-by-hop response headers reached the client: %v", resp.Header)
	}
}

// TestHygieneUpgradeOnlyOnA101: Upgrade and Connection: upgrade pass only
// on the 101 that answers a websocket handshake (docs/behaviour.md §5.5).
// An upstream's 200 that carries them, and a header its Connection names,
// reaches the client without them, whether or not the client's request was
// a handshake: the handshake's exemption is for the request.
func TestHygieneUpgradeOnlyOnA101(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "Upgrade, X-Hop")
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("X-Hop", "hop")
		io.WriteString(w, "jar")
	}
	check := func(t *testing.T, resp *http.Response) {
		t.Helper()
		if resp == nil || resp.StatusCode != 200 {
			t.Fatalf("got %v", resp)
		}
		for _, k := range []string{"Upgrade", "X-Hop"} {
			if v := resp.Header.Values(k); len(v) > 0 {
				t.Errorf("the upstream's 200 reached the client with %s: %q", k, v)
			}
		}
		if httpguts.HeaderValuesContainsToken(resp.Header["Connection"], "upgrade") {
			t.Errorf("the upstream's 200 reached the client with Connection: %q", resp.Header["Connection"])
		}
	}
	for _, path := range exactPaths() {
		t.Run(path.name, func(t *testing.T) {
			_, c, base := path.start(t, h, 3, 5, "")
			resp, _ := request(t, c, "GET", base+"/maven2/g/a.jar", nil)
			check(t, resp)
		})
	}
	t.Run("websocket handshake answered 200", func(t *testing.T) {
		up := newUpstream(t, h)
		tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
		resp := rawExchange(t, tp, "GET "+up.URL+"/maven2/g/a.jar HTTP/1.1\r\nHost: "+up.Listener.Addr().String()+
			"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		check(t, resp)
	})
}

func TestHygieneLoopDetected(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	c := proxyClient(t, tp, nil)
	for _, via := range []string{"1.1 nora-breaker", "1.0 squid, 1.1 Nora-Breaker", "HTTP/1.1 nora-breaker (x)"} {
		resp, _ := request(t, c, "GET", up.URL+"/maven2/a.jar", http.Header{"Via": {via}})
		if resp.StatusCode != http.StatusLoopDetected {
			t.Errorf("Via %q: %d, want 508", via, resp.StatusCode)
		}
	}
	// Unclassified hosts are checked too.
	resp, _ := request(t, c, "GET", "http://unlisted.invalid/x", http.Header{"Via": {"1.1 nora-breaker"}})
	if resp.StatusCode != http.StatusLoopDetected {
		t.Errorf("unclassified loop: %d", resp.StatusCode)
	}
	if up.hits.Load() != 0 {
		t.Fatalf("looped requests reached the upstream %d times", up.hits.Load())
	}
	if resp, _ := request(t, c, "GET", up.URL+"/maven2/a.jar", http.Header{"Via": {"1.1 nora-breaker-2"}}); resp.StatusCode != 200 {
		t.Fatalf("another proxy's token treated as ours: %d", resp.StatusCode)
	}
}

func TestStripHopByHopTable(t *testing.T) {
	tests := []struct {
		name       string
		in         http.Header
		gone, kept []string
	}{
		{"connection-listed", http.Header{"Connection": {"X-A, x-b"}, "X-A": {"1"}, "X-B": {"2"}, "X-C": {"3"}},
			[]string{"Connection", "X-A", "X-B"}, []string{"X-C"}},
		{"fixed hop headers", http.Header{"Keep-Alive": {"1"}, "Te": {"trailers"}, "Trailer": {"X"},
			"Upgrade": {"h2c"}, "Proxy-Authorization": {"x"}, "Proxy-Connection": {"close"}, "Transfer-Encoding": {"chunked"}},
			[]string{"Keep-Alive", "Te", "Trailer", "Upgrade", "Proxy-Authorization", "Proxy-Connection", "Transfer-Encoding"}, nil},
		{"websocket handshake keeps upgrade", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
			"Sec-Websocket-Key": {"k"}, "Keep-Alive": {"1"}},
			[]string{"Keep-Alive"}, []string{"Connection", "Upgrade", "Sec-Websocket-Key"}},
		{"non-websocket upgrade dropped", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"h2c"}},
			[]string{"Connection", "Upgrade"}, nil},
		{"empty names ignored", http.Header{"Connection": {" , ,"}, "X-A": {"1"}}, []string{"Connection"}, []string{"X-A"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			stripRequestHopByHop(h)
			for _, k := range tc.gone {
				if _, ok := h[k]; ok {
					t.Errorf("%s kept", k)
				}
			}
			for _, k := range tc.kept {
				if _, ok := h[k]; !ok {
					t.Errorf("%s removed", k)
				}
			}
		})
	}
}

// TestHygieneWebsocketHandshakeSaysOnlyUpgrade: a websocket handshake keeps
// Connection and Upgrade on its way upstream, but the other headers its
// Connection names are removed, and so is their mention: the upstream sees
// Connection: Upgrade alone (on main it saw "keep-alive, Upgrade, X-Hop"
// naming headers that were no longer there).
func TestHygieneWebsocketHandshakeSaysOnlyUpgrade(t *testing.T) {
	rec := &ixHeaderRecorder{}
	up := newUpstream(t, rec.serve)
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	host := strings.TrimPrefix(up.URL, "http://")
	ixRaw(t, tp, "GET "+up.URL+"/maven2/ws HTTP/1.1\r\nHost: "+host+"\r\n"+
		"Connection: keep-alive, Upgrade, X-Hop\r\nX-Hop: secret\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	got := rec.get()
	if c := got.Values("Connection"); len(c) != 1 || c[0] != "Upgrade" || got.Get("Upgrade") != "websocket" {
		t.Errorf("upstream saw Connection %q, Upgrade %q; want [Upgrade], websocket", c, got.Get("Upgrade"))
	}
	if v, ok := got["X-Hop"]; ok {
		t.Errorf("upstream saw X-Hop: %q", v)
	}
}
