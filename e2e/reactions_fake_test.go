//go:build e2e

package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAnswerer is a forward proxy that answers every request itself, with
// one status, no Retry-After, and the body nora-breaker's answer package
// gives that format (OCI error JSON for registries, {"error": …} for npm,
// one line of text otherwise). It stands in for an answer nora-breaker does
// not give today, so clients' reactions to it can be measured. A CONNECT is
// accepted and its tunnel terminated with a certificate of the fake's own
// CA (or read as plain HTTP when the client tunnels that), as the
// interception does.
type fakeAnswerer struct {
	status int
	access proxyAccess
	tls    *tls.Config

	mu    sync.Mutex
	seen  []logLine
	conns map[net.Conn]bool // open client connections, closed when the test ends
}

// startFakeAnswerer makes the CA, listens on a loopback port it binds
// itself, and serves until the test ends.
func startFakeAnswerer(t *testing.T, dir string, status int) *fakeAnswerer {
	t.Helper()
	ca := newNamedCA(t, dir, "fake-ca", "nora-breaker e2e fake answerer CA")
	f := &fakeAnswerer{status: status, conns: map[net.Conn]bool{}, tls: ca.serverTLS(t, "registry-a.test", "index.crates.io", "static.crates.io")}
	f.tls.NextProtos = []string{"http/1.1"}
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	caPEM, _ := os.ReadFile(ca.pemPath)
	bundle := filepath.Join(dir, "roots-plus-fake-ca.pem")
	writeFile(t, bundle, string(system)+"\n"+string(caPEM))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	f.access = proxyAccess{url: "http://" + l.Addr().String(), port: port, caPEM: ca.pemPath, bundle: bundle}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns[c] = true
			f.mu.Unlock()
			go func() {
				f.serve(c, "")
				f.mu.Lock()
				delete(f.conns, c)
				f.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for c := range f.conns {
			c.Close()
		}
	})
	return f
}

// serve answers the requests of one connection; inside a tunnel, host is
// the host the CONNECT named.
func (f *fakeAnswerer) serve(c net.Conn, host string) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Method == http.MethodConnect {
			fmt.Fprint(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			// Some clients (yarn 4) tunnel plain HTTP too; a TLS record
			// starts with 0x16.
			inner := net.Conn(&bufferedConn{Conn: c, r: br})
			if first, err := br.Peek(1); err == nil && first[0] == 0x16 {
				inner = tls.Server(inner, f.tls)
			}
			f.serve(inner, req.Host)
			return
		}
		h := req.URL.Host
		if h == "" {
			h = host
			if h == "" {
				h = req.Host
			}
		}
		f.record(req, h)
		if err := f.answer(req, h).Write(c); err != nil {
			return
		}
	}
}

// record notes one request as nora-breaker's log would.
func (f *fakeAnswerer) record(req *http.Request, host string) {
	result := "synthesized_503"
	if f.status == http.StatusTooManyRequests {
		result = "throttled"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, logLine{Time: time.Now(), Message: "request", Method: req.Method, Host: host,
		Path: req.URL.EscapedPath(), Result: result, Status: f.status})
}

// answer is the status in the dialect of the format host belongs to.
func (f *fakeAnswerer) answer(req *http.Request, host string) *http.Response {
	msg := "upstream is unavailable (circuit breaker open); retry later"
	code := "UNAVAILABLE"
	if f.status == http.StatusTooManyRequests {
		msg, code = "upstream is rate limiting requests; retry later", "TOOMANYREQUESTS"
	}
	ctype, body := "text/plain; charset=utf-8", msg+"\n"
	switch {
	case hostIn(host, []string{rxRegistry}):
		b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
		ctype, body = "application/json", string(b)+"\n"
	case hostIn(host, []string{rxNpm}):
		b, _ := json.Marshal(map[string]string{"error": msg})
		ctype, body = "application/json", string(b)+"\n"
	}
	resp := &http.Response{StatusCode: f.status, ProtoMajor: 1, ProtoMinor: 1, Request: req,
		Header:        http.Header{"Content-Type": {ctype}, "Content-Length": {strconv.Itoa(len(body))}},
		ContentLength: int64(len(body)), Body: http.NoBody}
	if req.Method != http.MethodHead {
		resp.Body = readCloser{strings.NewReader(body)}
	}
	return resp
}

func (f *fakeAnswerer) mark() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

func (f *fakeAnswerer) since(_ *testing.T, from int) []logLine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]logLine(nil), f.seen[from:]...)
}

// bufferedConn is a connection whose first bytes may already sit in a
// bufio.Reader (a client may send its TLS hello right behind the CONNECT).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// readCloser gives a reader a no-op Close.
type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
