package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// The transparent path, exact (issue 20): what passes through the proxy
// is what the upstream sent and the client asked for, nothing the proxy did
// not decide on, and no timer blames the wrong side. Each case runs on the
// plain port and inside an intercepted tunnel, HTTP/1.1 and HTTP/2.

// exactPath is one way a client reaches an upstream through the proxy.
type exactPath struct {
	name string
	// start serves h as a maven upstream behind a new proxy with sidecar
	// lines extra and threshold/proxy_timeout as given; it returns the
	// client and the upstream's base URL.
	start func(t *testing.T, h http.HandlerFunc, threshold, proxyTimeout int, extra string) (*testProxy, *http.Client, string)
}

// exactConfig is one maven upstream at base under a breaker.
func exactConfig(base string, threshold, proxyTimeout int, sidecar string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = %d
reset_timeout = 30
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2"]
proxy_timeout = %d
[sidecar]
%s
`, threshold, base, proxyTimeout, sidecar)
}

// interceptedPath is the intercepted path to the TLS upstream newUp starts
// (it stops it when the test ends), from a client on HTTP/2 when h2 is set.
func interceptedPath(newUp func(*testing.T, http.HandlerFunc) *httptest.Server, h2 bool) func(*testing.T, http.HandlerFunc, int, int, string) (*testProxy, *http.Client, string) {
	return func(t *testing.T, h http.HandlerFunc, threshold, proxyTimeout int, extra string) (*testProxy, *http.Client, string) {
		up := newUp(t, h)
		lines, pool := interceptCA(t, up)
		tp := newTestProxy(t, exactConfig(up.URL, threshold, proxyTimeout, lines+extra), nil)
		c := proxyClient(t, tp, pool)
		tr := c.Transport.(*http.Transport)
		tr.TLSClientConfig.Time = tp.Clock.Now
		tr.ForceAttemptHTTP2 = h2
		return tp, c, up.URL
	}
}

func exactPaths() []exactPath {
	h1Upstream := func(t *testing.T, h http.HandlerFunc) *httptest.Server { return newTLSUpstream(t, h).Server }
	return []exactPath{
		{"plain", func(t *testing.T, h http.HandlerFunc, threshold, proxyTimeout int, extra string) (*testProxy, *http.Client, string) {
			up := newUpstream(t, h)
			tp := newTestProxy(t, exactConfig(up.URL, threshold, proxyTimeout, extra), nil)
			return tp, proxyClient(t, tp, nil), up.URL
		}},
		{"intercepted h1", interceptedPath(h1Upstream, false)},
		{"intercepted h2", interceptedPath(h1Upstream, true)},
	}
}

// slowBody sends n pieces of size bytes, pause apart: a client on a slow
// link uploading an artifact.
type slowBody struct {
	n, size int
	pause   time.Duration
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.pause)
	b.n--
	return copy(p, strings.Repeat("x", min(b.size, len(p)))), nil
}

// TestSlowUploadIsNotTheUpstreams: an upload that takes longer to send
// than proxy_timeout is answered by the upstream and counts nothing
// against it (point 2: each such PUT got 504 and opened a healthy breaker).
func TestSlowUploadIsNotTheUpstreams(t *testing.T) {
	for _, path := range exactPaths() {
		t.Run(path.name, func(t *testing.T) {
			var got atomic.Int64
			tp, c, base := path.start(t, func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				got.Store(n)
				w.WriteHeader(http.StatusCreated)
			}, 2, 1, "")
			for i := range 2 {
				req, _ := http.NewRequest(http.MethodPut, base+"/maven2/g/a/1/a-1.jar", &slowBody{n: 6, size: 4 << 10, pause: 300 * time.Millisecond})
				req.ContentLength = 6 * 4 << 10
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || got.Load() != 6*4<<10 {
					t.Fatalf("upload %d (1.8 s to send, proxy_timeout 1 s): %d, upstream got %d bytes", i, resp.StatusCode, got.Load())
				}
			}
			if s := breakerOf(t, tp, "maven:"+base+"/maven2"); s.State != breakerstate.Closed || s.FailureCount != 0 {
				t.Fatalf("breaker after two slow uploads: %s with %d failures", s.State, s.FailureCount)
			}
		})
	}
}

// TestAnswersCarryOnlyWhatTheUpstreamSent: no Content-Type sniffed, no
// Date added (point 5), nothing in the proxy's own x-nora- namespace from
// an upstream (point 6), and the Proxy-* family gone both ways (point 8).
func TestAnswersCarryOnlyWhatTheUpstreamSent(t *testing.T) {
	for _, path := range exactPaths() {
		t.Run(path.name, func(t *testing.T) {
			seen := make(chan http.Header, 1)
			_, c, base := path.start(t, func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Clone()
				h := w.Header()
				h["Date"] = nil // the upstream's own net/http would add both
				h["Content-Type"] = nil
				h.Set("X-Content-Type-Options", "nosniff")
				h.Set("X-Nora-Stale", "true")
				h.Set("X-Nora-Breaker-State", "open")
				h.Set("X-Nora-Upstream", "maven:https://elsewhere")
				h.Set("Proxy-Foo", "from-upstream")
				h.Set("Proxy-Status", "upstream; error=http_request_error")
				w.WriteHeader(200)
				io.WriteString(w, "<html><body>an index page</body></html>")
			}, 3, 5, "")
			req, _ := http.NewRequest(http.MethodGet, base+"/maven2/g/a/maven-metadata.xml", nil)
			req.Header.Set("Proxy-Foo", "from-client")
			req.Header.Set("Proxy", "http://attacker.test:3128")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			for k, v := range resp.Header {
				switch lk := strings.ToLower(k); {
				case lk == "content-type", lk == "date", strings.HasPrefix(lk, "x-nora-"), strings.HasPrefix(lk, "proxy"):
					t.Errorf("the client got %s: %q, which the proxy should not pass or add", k, v)
				}
			}
			up := <-seen
			for k, v := range up {
				if strings.HasPrefix(strings.ToLower(k), "proxy") {
					t.Errorf("the upstream got %s: %q", k, v)
				}
			}
		})
	}
}

// TestEarlyAnswerToExpectContinue: an upstream's 401 to a PUT with
// Expect: 100-continue reaches a client that has not sent its body (and
// never will) at once (point 4: it came only when the client gave up
// waiting and sent the body, or never).
func TestEarlyAnswerToExpectContinue(t *testing.T) {
	deny := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Www-Authenticate", `Basic realm="repo"`)
		w.WriteHeader(http.StatusUnauthorized)
	}
	for _, path := range exactPaths()[:2] { // HTTP/1.1: h2 streams have no such wait
		t.Run(path.name, func(t *testing.T) {
			tp, _, base := path.start(t, deny, 3, 5, "")
			head := "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n"
			host := strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://")
			var br *bufio.Reader
			if path.name == "plain" {
				conn, err := net.DialTimeout("tcp", tp.URL.Host, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(conn, head, base+"/maven2/g/a/1/a-1.jar", host)
				br = bufio.NewReader(conn)
			} else {
				tc := exactTunnel(t, tp, host)
				fmt.Fprintf(tc, head, "/maven2/g/a/1/a-1.jar", host)
				br = bufio.NewReader(tc)
			}
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPut})
			if err != nil {
				t.Fatalf("no answer while the client holds its body back: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("got %d, want the upstream's 401", resp.StatusCode)
			}
		})
	}
}

// TestUnaskedSwitchKeepsTheConnectionHTTP: an upstream that answers a
// plain GET with 101 gets a 502 counted against it, and the client's next
// request on the same keep-alive connection, with credentials for another
// host, goes to that host (point 1). The client is Python's http.client,
// as pip's urllib3 is: it takes a 101 for a final answer and reuses the
// connection.
func TestUnaskedSwitchKeepsTheConnectionHTTP(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	var leaked atomic.Value
	leaked.Store("")
	switcher := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, _ := brw.ReadString('\n')
		for line != "" && line != "\r\n" {
			if strings.HasPrefix(strings.ToLower(line), "authorization:") {
				leaked.Store(line)
			}
			line, _ = brw.ReadString('\n')
		}
	})
	other := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "b saw "+r.Header.Get("Authorization"))
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = ["maven", "npm"]
[maven]
proxies = ["%s/maven2"]
[npm]
proxy = "%s/npm"
`, switcher.URL, other.URL), nil)
	out, err := exec.Command(python, "testdata/switch_then_reuse.py", tp.URL.Host,
		switcher.URL+"/maven2/g/a/1/a-1.pom", other.URL+"/npm/left-pad").CombinedOutput()
	if err != nil {
		t.Fatalf("python client: %v\n%s", err, out)
	}
	var got struct {
		First      int    `json:"first"`
		Second     int    `json:"second"`
		SecondBody string `json:"second_body"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("python client printed %q: %v", out, err)
	}
	if v := leaked.Load().(string); v != "" {
		t.Fatalf("the upstream that switched unasked read the next request's credentials: %q", v)
	}
	if got.First != http.StatusBadGateway {
		t.Errorf("unasked 101 reached the client as %d, want 502", got.First)
	}
	if got.Second != 200 || got.SecondBody != "b saw Basic Yi11c2VyOmItc2VjcmV0" {
		t.Errorf("the next request on the connection: %d %q, want b's own answer", got.Second, got.SecondBody)
	}
	if s := breakerOf(t, tp, "maven:"+switcher.URL+"/maven2"); s.FailureCount != 1 {
		t.Errorf("the switching upstream's failures: %d, want 1", s.FailureCount)
	}
}

// exactTunnel opens an intercepted HTTP/1.1 tunnel to host through tp.
func exactTunnel(t *testing.T, tp *testProxy, host string) *tls.Conn {
	t.Helper()
	resp, conn, _ := ixRawConnect(t, tp, host)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %d", host, resp.StatusCode)
	}
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	t.Cleanup(func() { tc.Close() })
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc
}

// TestUnaskedSwitchIs502: an upstream's 101 to a request that asked for no
// switch is a broken answer on every path: 502, counted against it.
func TestUnaskedSwitchIs502(t *testing.T) {
	for _, path := range exactPaths() {
		t.Run(path.name, func(t *testing.T) {
			tp, c, base := path.start(t, func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer conn.Close()
				io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			}, 3, 5, "")
			resp, _ := request(t, c, "GET", base+"/maven2/g/a/1/a-1.pom", nil)
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("unasked 101 answered %d, want 502", resp.StatusCode)
			}
			if s := breakerOf(t, tp, "maven:"+base+"/maven2"); s.FailureCount != 1 {
				t.Fatalf("failures %d, want 1", s.FailureCount)
			}
		})
	}
}

// TestLocalFaultIsNobodys: with the proxy out of file descriptors, the
// dial's EMFILE opens no breaker (point 10: it counted as the healthy
// upstream's failure). The proxy runs in a child process of this test
// binary whose descriptor limit the child lowers itself.
func TestLocalFaultIsNobodys(t *testing.T) {
	if os.Getenv("NB_LOCAL_FAULT_CHILD") == "1" {
		localFaultChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLocalFaultIsNobodys$", "-test.v")
	cmd.Env = append(os.Environ(), "NB_LOCAL_FAULT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "LOCAL FAULT OK") {
		t.Fatalf("child did not report:\n%s", out)
	}
}

// localFaultChild exhausts its own file descriptors once a keep-alive
// connection to the proxy is open, sends three requests on it, and checks
// the upstream's breaker.
func localFaultChild(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil) // threshold 3
	conn, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// A limit of a few thousand is quick to exhaust whatever the machine's
	// default (the child's own, so nothing else is touched).
	if lim.Cur > 4096 {
		lim.Cur = 4096
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	var held []*os.File
	release := func() {
		for _, f := range held {
			f.Close()
		}
		held = nil
	}
	defer release()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("exhausting descriptors: %v", err)
			}
			break
		}
		held = append(held, f)
	}
	for i := range 3 {
		fmt.Fprintf(conn, "GET %s/maven2/g/a/1/a-%d.pom HTTP/1.1\r\nHost: %s\r\n\r\n", up.URL, i, strings.TrimPrefix(up.URL, "http://"))
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			release()
			t.Fatalf("request %d while out of descriptors: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			release()
			t.Fatalf("request %d: %d, want the proxy's 502", i, resp.StatusCode)
		}
	}
	release()
	s := breakerOf(t, tp, ixKey(up.URL))
	if s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("after three EMFILE dials: %s with %d failures, want closed with none", s.State, s.FailureCount)
	}
	if !strings.Contains(tp.Logs.String(), "too many open files") {
		t.Fatalf("the cause is not in the log:\n%s", tp.Logs.String())
	}
	fmt.Println("LOCAL FAULT OK")
}

// TestExpectContinueOverHTTP2Upstream: the same PUT, to an upstream that
// speaks HTTP/2 (as Docker Hub, npm, PyPI and Maven Central do) and so is
// reached over the shared HTTP/2 pool. From a client on HTTP/1.1, an
// upstream that answers at once (401) is what the client hears first, with
// no 100 before it: the proxy waits for the upstream's word before taking
// the body, as it does towards an HTTP/1.1 upstream. An upstream that wants
// the body (its 100) gets all of it, from a client on either protocol.
// (net/http's HTTP/2 server takes a client's expectation itself and hides
// it from the handler, so towards the upstream an HTTP/2 client's request
// carries none: docs/behaviour.md §5.5.)
func TestExpectContinueOverHTTP2Upstream(t *testing.T) {
	const size = 20000
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("the upstream was asked over %s, want HTTP/2", r.Proto)
		}
		if strings.HasSuffix(r.URL.Path, "/denied.jar") {
			w.Header().Set("Www-Authenticate", `Basic realm="repo"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		n, err := io.Copy(io.Discard, r.Body) // net/http's server sends the 100 here
		if err != nil || n != size {
			t.Errorf("the upstream read %d bytes (%v), want %d", n, err, size)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	lines, pool := interceptCA(t, up)
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2"]
[sidecar]
%s`, up.URL, lines), nil)
	host := strings.TrimPrefix(up.URL, "https://")

	t.Run("client on HTTP/1.1", func(t *testing.T) {
		for name, want := range map[string]int{"denied": http.StatusUnauthorized, "taken": http.StatusCreated} {
			tc := exactTunnel(t, tp, host)
			fmt.Fprintf(tc, "PUT /maven2/g/a/1/%s.jar HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", name, host, size)
			br := bufio.NewReader(tc)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPut})
			if err != nil {
				t.Fatalf("%s: no answer while the client holds its body back: %v", name, err)
			}
			if resp.StatusCode == http.StatusContinue && want == http.StatusCreated {
				if _, err := tc.Write(bytes.Repeat([]byte("x"), size)); err != nil {
					t.Fatal(err)
				}
				resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodPut})
				if err != nil {
					t.Fatalf("%s: no answer to the body: %v", name, err)
				}
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s: got %d, want %d (a 100 to a denied upload tells the client to send a body nobody asked for)", name, resp.StatusCode, want)
			}
		}
	})
	t.Run("client on HTTP/2", func(t *testing.T) {
		c := proxyClient(t, tp, pool)
		tr := c.Transport.(*http.Transport)
		tr.ForceAttemptHTTP2 = true
		tr.ExpectContinueTimeout = time.Minute
		for name, want := range map[string]int{"denied": http.StatusUnauthorized, "taken": http.StatusCreated} {
			body := bytes.NewReader(bytes.Repeat([]byte("x"), size))
			req, err := http.NewRequest(http.MethodPut, up.URL+"/maven2/g/a/1/"+name+".jar", body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			req.Header.Set("Expect", "100-continue")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != want {
				t.Errorf("%s: got %d over %s, want %d over HTTP/2", name, resp.StatusCode, resp.Proto, want)
			}
		}
	})
}

// h2UpstreamPaths are the intercepted paths to an upstream that speaks
// HTTP/2, whose requests the shared HTTP/2 pool (dial/h2share.go) carries,
// from a client on either protocol.
func h2UpstreamPaths() []exactPath {
	h2Upstream := func(t *testing.T, h http.HandlerFunc) *httptest.Server {
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 {
				t.Errorf("the upstream was asked over %s, want HTTP/2", r.Proto)
			}
			h(w, r)
		}))
		up.EnableHTTP2 = true
		up.StartTLS()
		t.Cleanup(up.Close)
		return up
	}
	return []exactPath{
		{"h2 upstream, client h1", interceptedPath(h2Upstream, false)},
		{"h2 upstream, client h2", interceptedPath(h2Upstream, true)},
	}
}

// TestUpstreamTrailersLoseTheProxysNamespace: trailers are part of the
// answer, so an upstream's x-nora-* trailers are removed like its x-nora-*
// headers (docs/behaviour.md §5.5), declared ones and undeclared ones
// alike, while its other trailers pass. Their values arrive only when the
// body ends, after the answer's headers were checked: every one of them
// reached the client.
func TestUpstreamTrailersLoseTheProxysNamespace(t *testing.T) {
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Nora-Stale, X-Sum")
		w.Header().Set("Content-Type", "application/java-archive")
		w.WriteHeader(200)
		io.WriteString(w, "jar")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Nora-Stale", "true")
		w.Header().Set("X-Sum", "1")
		w.Header().Set(http.TrailerPrefix+"X-Nora-Upstream", "maven:https://elsewhere")
		w.Header().Set(http.TrailerPrefix+"X-Nora-Breaker-State", "open")
		w.Header().Set(http.TrailerPrefix+"X-Checksum", "abc")
	}
	for _, path := range append(exactPaths(), h2UpstreamPaths()...) {
		t.Run(path.name, func(t *testing.T) {
			_, c, base := path.start(t, h, 3, 5, "")
			resp, body := request(t, c, "GET", base+"/maven2/g/a.jar", nil)
			if resp.StatusCode != 200 || body != "jar" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			for k, v := range resp.Trailer {
				if strings.HasPrefix(strings.ToLower(k), "x-nora-") {
					t.Errorf("the upstream's trailer %s: %q reached the client", k, v)
				}
			}
			if resp.Trailer.Get("X-Sum") != "1" || resp.Trailer.Get("X-Checksum") != "abc" {
				t.Errorf("the upstream's other trailers did not pass: %v", resp.Trailer)
			}
		})
	}
}
