package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// The bad-input matrix (docs/behaviour.md §10): each case is sent as raw bytes
// over its own TCP connection to the real proxy, on the plain port or inside
// an intercepted TLS tunnel, and has one expected answer. Afterwards the
// proxy must still serve, and no goroutine or file descriptor may be left
// behind. Helpers start with "bi".

// biEnv is the proxy under test with an intercepted TLS maven upstream and
// a plain, unclassified origin.
type biEnv struct {
	ix          *ixIntercept
	plain       *upstream
	plainHost   string        // host:port of the plain origin
	target      string        // host:port of the intercepted upstream
	bodyAborted chan struct{} // the plain origin saw a request body break off
	sawAuth     atomic.Bool   // the plain origin received an Authorization header
}

func newBiEnv(t *testing.T) *biEnv {
	t.Helper()
	e := &biEnv{bodyAborted: make(chan struct{}, 4)}
	e.plain = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			e.sawAuth.Store(true)
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			e.bodyAborted <- struct{}{}
			return
		}
		io.WriteString(w, "plain")
	})
	// The plain origin is no upstream: allow_hosts lets the proxy reach it.
	// allow_hosts names all of 127.0.0.1 too, so that the loopback rule
	// refuses none of the proxy's own ports: the own-listener check is the
	// only one left that can (the matrix's "own port" rows).
	e.plainHost = strings.TrimPrefix(e.plain.URL, "http://")
	e.ix = newIxInterceptWith(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "jar") },
		fmt.Sprintf("allow_hosts = [%q, \"127.0.0.1\"]", e.plainHost))
	e.target = strings.TrimPrefix(e.ix.up.URL, "https://")
	return e
}

// biResult is what came back: a status, or 0 when the proxy closed the
// connection without an answer.
type biResult struct {
	status  int
	elapsed time.Duration
}

// biExchange writes payload to conn (concurrently, since the proxy may
// answer and hang up before it has read everything) and reads one answer.
func biExchange(t *testing.T, conn net.Conn, payload []byte, within time.Duration) biResult {
	t.Helper()
	start := time.Now()
	conn.SetDeadline(start.Add(within))
	go func() { _, _ = conn.Write(payload) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	elapsed := time.Since(start)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("neither an answer nor a close within %v", within)
	case err != nil:
		return biResult{status: 0, elapsed: elapsed}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return biResult{status: resp.StatusCode, elapsed: elapsed}
}

// biExchangeAll writes payload (several pipelined requests) and reads
// answers until the proxy closes the connection. Every answer but the last
// must be a 200; the last one is returned, with the number of 200s before it.
func biExchangeAll(t *testing.T, conn net.Conn, payload []byte, within time.Duration) (biResult, int64) {
	t.Helper()
	start := time.Now()
	conn.SetDeadline(start.Add(within))
	go func() { _, _ = conn.Write(payload) }()
	br := bufio.NewReader(conn)
	var last biResult
	var ok int64
	for {
		resp, err := http.ReadResponse(br, nil)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("the connection neither answered nor closed within %v", within)
		case err != nil:
			return last, ok
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if last.status == 200 {
			ok++
		} else if last.status != 0 {
			t.Fatalf("answer %d before the last one, want only 200s", last.status)
		}
		last = biResult{status: resp.StatusCode, elapsed: time.Since(start)}
	}
}

// biPlain sends payload to the plain proxy port.
func biPlain(t *testing.T, e *biEnv, payload []byte, within time.Duration) biResult {
	t.Helper()
	conn := biDialPlain(t, e)
	defer conn.Close()
	return biExchange(t, conn, payload, within)
}

func biDialPlain(t *testing.T, e *biEnv) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", e.ix.tp.URL.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// biInner sends payload inside an intercepted HTTP/1.1 TLS tunnel.
func biInner(t *testing.T, e *biEnv, payload []byte, within time.Duration) biResult {
	t.Helper()
	tc := biTLSInTunnel(t, e)
	return biExchange(t, tc, payload, within)
}

// biTLSInTunnel opens an intercepted HTTP/1.1 TLS tunnel to the upstream,
// closed when the test ends.
func biTLSInTunnel(t *testing.T, e *biEnv) *tls.Conn {
	t.Helper()
	return ixTLSInTunnel(t, e.ix.tp, e.ix.ca, e.target, "http/1.1")
}

// biClientHello returns the first flight of a real TLS client.
func biClientHello(t *testing.T) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	go tls.Client(c1, &tls.Config{ServerName: "example.test"}).Handshake()
	buf := make([]byte, 64<<10)
	n, err := c2.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// biSlowHead sends a request head one byte every 200 ms, forever; the
// proxy must cut it at the header timeout.
func biSlowHead(t *testing.T, conn net.Conn, head string) biResult {
	t.Helper()
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		if _, err := io.WriteString(conn, head); err != nil {
			return
		}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(conn, "a"); err != nil {
					return
				}
			}
		}
	}()
	conn.SetReadDeadline(start.Add(clientconn.ReadHeaderTimeout + 10*time.Second))
	_, err := io.Copy(io.Discard, conn) // returns when the proxy closes
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a slow head was not cut within %v", clientconn.ReadHeaderTimeout+10*time.Second)
	}
	return biResult{status: 0, elapsed: time.Since(start)}
}

// biCase is one row of the bad-input matrix.
type biCase struct {
	name      string
	inner     bool   // inside an intercepted tunnel
	send      string // raw bytes
	want      []int  // accepted answers; 0 = closed without an answer
	within    time.Duration
	pipelined bool // send holds several requests: 200s, then the last answer is one of want
}

func TestBadInputMatrix(t *testing.T) {
	e := newBiEnv(t)
	biNormalTraffic(t, e)
	base := biTakeBaseline(t, e)

	big := strings.Repeat("b", 100<<10)
	huge := strings.Repeat("a", 1<<20)
	get := func(extra string) string {
		return fmt.Sprintf("GET http://%s/x HTTP/1.1\r\nHost: %s\r\n%s\r\n", e.plainHost, e.plainHost, extra)
	}
	inner := func(host, extra string) string {
		return fmt.Sprintf("GET /maven2/x.jar HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, extra)
	}
	plainURL := "http://" + e.plainHost + "/x"
	cases := []biCase{
		{"malformed request line", false, "GARBAGE\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"HTTP/0.9 request", false, "GET /\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"absolute URI with user:pass", false, fmt.Sprintf(
			"GET http://alice:s3cr3t-pw@%s/x HTTP/1.1\r\nHost: %s\r\n\r\n", e.plainHost, e.plainHost), []int{200}, 5 * time.Second, false},
		{"headers over 64 KiB", false, get("X-Big: " + big + "\r\n"), []int{431}, 5 * time.Second, false},
		{"request line of 1 MiB", false, "GET http://" + e.plainHost + "/" + huge + " HTTP/1.1\r\n\r\n",
			[]int{431, 0}, 5 * time.Second, false},
		{"Content-Length with Transfer-Encoding", false, fmt.Sprintf("POST http://%s/x HTTP/1.1\r\nHost: %s\r\n"+
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", e.plainHost, e.plainHost), []int{400}, 5 * time.Second, false},
		{"CONNECT without port", false, "CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"CONNECT to a refused port", false, "CONNECT 127.0.0.1:25 HTTP/1.1\r\nHost: 127.0.0.1:25\r\n\r\n", []int{403}, 5 * time.Second, false},
		{"request carrying our Via", false, get("Via: 1.0 other, 1.1 nora-breaker\r\n"), []int{508}, 5 * time.Second, false},
		{"TLS ClientHello on the plain port", false, string(biClientHello(t)), []int{400}, 2 * time.Second, false},
		{"inner Host differs from CONNECT", true, inner("other.example", ""), []int{421}, 5 * time.Second, false},
		{"inner headers over 64 KiB", true, inner(e.target, "X-Big: "+big+"\r\n"), []int{431}, 5 * time.Second, false},
		{"inner malformed request line", true, "GARBAGE\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"inner Content-Length with Transfer-Encoding", true, "POST /maven2/x.jar HTTP/1.1\r\nHost: " + e.target +
			"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"inner HTTP/2 preface on HTTP/1.1", true, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []int{505}, 5 * time.Second, false},
		{"path climbing out of the upstream's base", true, "GET /maven2/../../admin HTTP/1.1\r\nHost: " + e.target +
			"\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"encoded path climbing out", true, "GET /maven2/%2e%2e/..%2fadmin HTTP/1.1\r\nHost: " + e.target +
			"\r\n\r\n", []int{400}, 5 * time.Second, false},
		{"the proxy's own admin port", false, fmt.Sprintf("GET http://%s/breakers HTTP/1.1\r\nHost: %s\r\n\r\n",
			strings.TrimPrefix(e.ix.tp.AdminURL, "http://"), strings.TrimPrefix(e.ix.tp.AdminURL, "http://")), []int{403}, 5 * time.Second, false},
		{"the proxy's own port", false, fmt.Sprintf("GET http://%s/x HTTP/1.1\r\nHost: %s\r\n\r\n",
			e.ix.tp.URL.Host, e.ix.tp.URL.Host), []int{403}, 5 * time.Second, false},
		{"metadata address in NAT64 form", false, "GET http://[64:ff9b::a9fe:a9fe]/latest HTTP/1.1\r\nHost: [64:ff9b::a9fe:a9fe]\r\n\r\n",
			[]int{403}, 5 * time.Second, false},
		{"CONNECT inside an intercepted tunnel", true, "CONNECT other.example:443 HTTP/1.1\r\nHost: other.example:443\r\n\r\n",
			[]int{405}, 5 * time.Second, false},
	}
	// Requests that must not end the framing check for the connection
	// (framingBypasses), each pipelined with one that carries
	// Content-Length + Transfer-Encoding in the same write. The check reads
	// both heads at once and refuses the connection, so the first may go
	// unanswered; TestFramingHoldsForEveryRequest sends them one after the
	// other and wants the first served.
	conflict := "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	for _, inner := range []bool{false, true} {
		target, host, prefix := plainURL, e.plainHost, ""
		if inner {
			target, host, prefix = "/maven2/x.jar", e.target, "inner "
		}
		bypasses := framingBypasses(target, host)
		for _, name := range slices.Sorted(maps.Keys(bypasses)) {
			cases = append(cases, biCase{prefix + name + ", then Content-Length with Transfer-Encoding", inner,
				bypasses[name] + fmt.Sprintf(conflict, target, host), []int{400}, 5 * time.Second, true})
		}
	}
	// Pipelined requests to the plain origin that the proxy answered
	// before refusing the next: the origin saw those.
	var servedFirst int64
	t.Run("matrix", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var got biResult
				switch {
				case tc.pipelined:
					var conn net.Conn
					if tc.inner {
						conn = biTLSInTunnel(t, e)
					} else {
						conn = biDialPlain(t, e)
						defer conn.Close()
					}
					var ok int64
					got, ok = biExchangeAll(t, conn, []byte(tc.send), tc.within)
					if !tc.inner {
						servedFirst += ok
					}
				case tc.inner:
					got = biInner(t, e, []byte(tc.send), tc.within)
				default:
					got = biPlain(t, e, []byte(tc.send), tc.within)
				}
				if !biOneOf(got.status, tc.want) {
					t.Fatalf("answer %d after %v, want one of %v", got.status, got.elapsed, tc.want)
				}
			})
		}
		t.Run("abrupt close mid-body", func(t *testing.T) { biAbruptClose(t, e) })
		t.Run("slow head on the plain port", func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", e.ix.tp.URL.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			biWantCutAtHeaderTimeout(t, biSlowHead(t, conn, "GET http://"+e.plainHost+"/ HTTP/1.1\r\nX-Slow: "))
		})
		t.Run("slow head inside the tunnel", func(t *testing.T) {
			t.Parallel()
			tc := biTLSInTunnel(t, e)
			_ = tc.SetDeadline(time.Time{}) // biSlowHead sets its own, past the header timeout
			biWantCutAtHeaderTimeout(t, biSlowHead(t, tc, "GET /maven2/x.jar HTTP/1.1\r\nX-Slow: "))
		})
	})
	if logs := e.ix.tp.Logs.String(); strings.Contains(logs, "s3cr3t-pw") {
		t.Fatal("credentials from a request URL reached the log")
	}
	// The user:pass request is forwarded without its userinfo (which never
	// becomes an Authorization header); the abrupt PUT is the other one.
	if n := e.plain.hits.Load() - base.plainHits; n != 2+servedFirst || e.sawAuth.Load() {
		t.Fatalf("the plain origin saw %d requests during the matrix (want %d), Authorization %v",
			n, 2+servedFirst, e.sawAuth.Load())
	}
	biNormalTraffic(t, e)
	biWaitBaseline(t, e, base)
}

func biOneOf(v int, set []int) bool {
	for _, s := range set {
		if v == s {
			return true
		}
	}
	return false
}

func biWantCutAtHeaderTimeout(t *testing.T, got biResult) {
	t.Helper()
	if got.elapsed < clientconn.ReadHeaderTimeout-time.Second || got.elapsed > clientconn.ReadHeaderTimeout+5*time.Second {
		t.Fatalf("slow head cut after %v, want about %v", got.elapsed, clientconn.ReadHeaderTimeout)
	}
}

// biAbruptClose starts a 1 MiB upload, sends 1 KiB of it and hangs up: the
// upstream request must be aborted, not left waiting for the rest.
func biAbruptClose(t *testing.T, e *biEnv) {
	conn, err := net.Dial("tcp", e.ix.tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT http://%s/upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s",
		e.plainHost, e.plainHost, 1<<20, strings.Repeat("x", 1024))
	conn.Close()
	select {
	case <-e.bodyAborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not aborted after the client hung up")
	}
}

// biNormalTraffic checks that ordinary requests still work: plain,
// intercepted HTTP/1.1 and intercepted HTTP/2.
func biNormalTraffic(t *testing.T, e *biEnv) {
	t.Helper()
	plain := proxyClient(t, e.ix.tp, nil)
	if resp, body := request(t, plain, "GET", e.plain.URL+"/ok", nil); resp.StatusCode != 200 || body != "plain" {
		t.Fatalf("plain: %d %q", resp.StatusCode, body)
	}
	plain.CloseIdleConnections()
	for _, h2 := range []bool{false, true} {
		c := e.ix.client(t, h2)
		if resp, body := request(t, c, "GET", e.ix.up.URL+"/maven2/ok.jar", nil); resp.StatusCode != 200 || body != "jar" {
			t.Fatalf("intercepted h2=%v: %d %q", h2, resp.StatusCode, body)
		}
		c.CloseIdleConnections()
	}
}

// biBaseline is the process's resource use with the proxy idle.
type biBaseline struct {
	goroutines int
	fds        int
	plainHits  int64
}

func biTakeBaseline(t *testing.T, e *biEnv) biBaseline {
	t.Helper()
	e.ix.tp.state.Load().transport.CloseIdleConnections()
	// Let connections closed just now finish closing on both sides.
	var b biBaseline
	testkit.PollUntil(t, 5*time.Second, func() bool {
		g, f := biGoroutines(), biOpenFDs(t)
		stable := g == b.goroutines && f == b.fds
		b.goroutines, b.fds = g, f
		return stable
	})
	b.plainHits = e.plain.hits.Load()
	return b
}

// biWaitBaseline polls until goroutines and descriptors are back to base
// (a little slack for runtime helpers), with a deadline.
func biWaitBaseline(t *testing.T, e *biEnv, base biBaseline) {
	t.Helper()
	e.ix.tp.state.Load().transport.CloseIdleConnections()
	var g, f int
	ok := testkit.Poll(15*time.Second, func() bool {
		g, f = biGoroutines(), biOpenFDs(t)
		return g <= base.goroutines+2 && f <= base.fds
	})
	if !ok {
		t.Fatalf("after the matrix: %d goroutines (baseline %d), %d open fds (baseline %d)",
			g, base.goroutines, f, base.fds)
	}
}

func biOpenFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

func biGoroutines() int { return runtime.NumGoroutine() }
