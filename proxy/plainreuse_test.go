package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// rawUpstream is a TCP server on loopback that hands each connection to
// serve.
func rawUpstream(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestLateBytesOnAKeptConnectionReachNoOtherRequest: an upstream that sends
// bytes nobody asked for a moment after an answer that is complete at its
// headers or its Content-Length (the body of a HEAD answer, of a 204, more
// than the announced length: common bugs of hand-written servers). net/http's
// transport closes an idle connection that receives such bytes; the proxy's
// own plain transport must not hand them, on the kept connection, to the
// next request to the same host:port — another client's, for another
// upstream — as its answer: that client would get a 502 and an upstream
// that did nothing wrong a failure (docs/behaviour.md §5.1).
func TestLateBytesOnAKeptConnectionReachNoOtherRequest(t *testing.T) {
	for _, c := range []struct {
		name, method, head, wantBody string
		wantStatus                   int
	}{
		{"body of a HEAD answer", http.MethodHead, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nContent-Type: application/java-archive\r\n\r\n", "", 200},
		{"body of a 204", http.MethodGet, "HTTP/1.1 204 No Content\r\n\r\n", "", 204},
		{"bytes past the Content-Length", http.MethodGet, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood", "good", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			answered := make(chan struct{})
			sentLate := make(chan struct{})
			base := rawUpstream(t, func(conn net.Conn) {
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if strings.HasPrefix(req.URL.Path, "/a/") {
						_, _ = io.WriteString(conn, c.head)
						<-answered
						_, _ = io.WriteString(conn, "jarbytes") // the bytes nobody asked for
						close(sentLate)
						continue
					}
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood")
				}
			})
			tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "maven"
[maven]
proxies = ["%s/a", "%s/b"]
hedge_after = 0
`, base, base), nil)
			resp, body := request(t, proxyClient(t, tp, nil), c.method, base+"/a/g/x.jar", nil)
			if resp.StatusCode != c.wantStatus || body != c.wantBody {
				t.Fatalf("%s /a: %d %q, want %d %q", c.method, resp.StatusCode, body, c.wantStatus, c.wantBody)
			}
			close(answered)
			<-sentLate
			resp, body = request(t, proxyClient(t, tp, nil), http.MethodGet, base+"/b/g/y.jar", nil)
			if resp.StatusCode != 200 || body != "good" {
				t.Errorf("the next request to the host:port: %d %q, want 200 \"good\"", resp.StatusCode, body)
			}
			for _, key := range []string{"maven:" + base + "/a", "maven:" + base + "/b"} {
				if s := breakerOf(t, tp, key); s.FailureCount != 0 {
					t.Errorf("%s has %d failures", key, s.FailureCount)
				}
			}
		})
	}
}
