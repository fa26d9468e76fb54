package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange sends raw bytes to the proxy port and returns the first
// response (nil when the connection closed without one).
func rawExchange(t *testing.T, tp *testProxy, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

func TestConflictingContentLengthAndTransferEncodingIs400(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("upstream saw %s", r.URL) })
	tp := newTestProxy(t, fmt.Sprintf("[registries]\nenable = \"maven\"\n[maven]\nproxies = [%q]\n", up.URL), nil)
	raw := "POST " + up.URL + "/x HTTP/1.1\r\nHost: " + up.Listener.Addr().String() +
		"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	resp := rawExchange(t, tp, raw)
	if resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %v, want 400", resp)
	}
	if up.hits.Load() != 0 {
		t.Fatal("the ambiguous request reached the upstream")
	}
}

// The scanner must follow bodies, so a conflict hidden in the second request
// of a keep-alive connection is caught, and ordinary bodies that merely
// contain header-like text are not mistaken for heads.
func TestFramingFollowsBodiesAcrossKeepAlive(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %d", len(b))
	})
	tp := newTestProxy(t, fmt.Sprintf("[registries]\nenable = \"maven\"\n[maven]\nproxies = [%q]\n", up.URL), nil)
	host := up.Listener.Addr().String()
	body := "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
	first := fmt.Sprintf("POST %s/a HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", up.URL, host, len(body), body)
	chunked := fmt.Sprintf("POST %s/b HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", up.URL, host)
	c, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for i, req := range []string{first, chunked} {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	bad := fmt.Sprintf("POST %s/c HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", up.URL, host)
	if _, err := io.WriteString(c, bad); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("third request: %v %v, want 400", resp, err)
	}
	if got := up.hits.Load(); got != 2 {
		t.Fatalf("upstream saw %d requests, want 2", got)
	}
}

// framingBypasses are requests after which the old scanner stopped looking
// at the connection, although net/http went on reading HTTP/1 requests from
// it: each is answered normally, and a Content-Length + Transfer-Encoding
// request sent after it on the same connection must still be refused.
func framingBypasses(target, host string) map[string]string {
	return map[string]string{
		"websocket Upgrade the upstream declines": "GET " + target + " HTTP/1.1\r\nHost: " + host +
			"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
		"other Upgrade": "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
		// net/http ignores Transfer-Encoding on HTTP/1.0: no body follows.
		"HTTP/1.0 with Transfer-Encoding": "POST " + target + " HTTP/1.0\r\nHost: " + host +
			"\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n",
		// A folded line belongs to X-A: this request has no body.
		"folded Transfer-Encoding": "POST " + target + " HTTP/1.1\r\nHost: " + host +
			"\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n\r\n",
	}
}

// framingSequence sends first, reads its answer, then sends a CL+TE request
// and returns both statuses and whatever followed the second answer.
func framingSequence(t *testing.T, conn net.Conn, first, conflicting string) (int, int, string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, first); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("first answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := io.WriteString(conn, conflicting); err != nil {
		t.Fatal(err)
	}
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		return resp.StatusCode, 0, ""
	}
	io.Copy(io.Discard, second.Body)
	second.Body.Close()
	rest, _ := io.ReadAll(br) // the connection must close, with nothing more
	return resp.StatusCode, second.StatusCode, string(rest)
}

// TestFramingHoldsForEveryRequest: the Content-Length + Transfer-Encoding
// refusal holds for every request on a connection, on the plain port and
// inside an intercepted tunnel, whatever came before it, and the refusal is
// the connection's only answer to it.
func TestFramingHoldsForEveryRequest(t *testing.T) {
	e := newBiEnv(t)
	conflict := func(target, host string) string {
		return "POST " + target + " HTTP/1.1\r\nHost: " + host +
			"\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	}
	for name, first := range framingBypasses("http://"+e.plainHost+"/x", e.plainHost) {
		t.Run("plain port/"+name, func(t *testing.T) {
			before := e.plain.hits.Load()
			conn, err := net.Dial("tcp", e.ix.tp.URL.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			s1, s2, rest := framingSequence(t, conn, first, conflict("http://"+e.plainHost+"/y", e.plainHost))
			if s1 != 200 || s2 != 400 || rest != "" {
				t.Fatalf("answers %d, %d, then %q; want 200, 400 and nothing more", s1, s2, rest)
			}
			if n := e.plain.hits.Load() - before; n != 1 {
				t.Fatalf("the origin saw %d requests, want 1", n)
			}
		})
	}
	for name, first := range framingBypasses("/maven2/x.jar", e.target) {
		t.Run("intercepted/"+name, func(t *testing.T) {
			before := e.ix.up.hits.Load()
			tc := biTLSInTunnel(t, e)
			s1, s2, rest := framingSequence(t, tc, first, conflict("/maven2/y.jar", e.target))
			if s1 != 200 || s2 != 400 || rest != "" {
				t.Fatalf("answers %d, %d, then %q; want 200, 400 and nothing more", s1, s2, rest)
			}
			if n := e.ix.up.hits.Load() - before; n != 1 {
				t.Fatalf("the upstream saw %d requests, want 1", n)
			}
		})
	}
}

// TestRefusalsAreTheOnlyAnswer: the answers the connection wrappers write
// themselves (both framings, TLS on the plain port) are complete responses
// whose Content-Length is right, and net/http adds no answer of its own.
func TestRefusalsAreTheOnlyAnswer(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Errorf("upstream saw %s", r.URL) })
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	for name, send := range map[string]string{
		"Content-Length with Transfer-Encoding": "POST " + up.URL + "/maven2/x HTTP/1.1\r\nHost: x\r\n" +
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"TLS on the plain port": string(biClientHello(t)),
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", tp.URL.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			go io.WriteString(c, send)
			all, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("reading until close: %v", err)
			}
			br := bufio.NewReader(bytes.NewReader(all))
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("answer %v %v, want 400", resp, err)
			}
			if _, err := io.ReadAll(resp.Body); err != nil {
				t.Fatalf("body: %v", err)
			}
			if rest, _ := io.ReadAll(br); len(rest) != 0 {
				t.Fatalf("%d bytes after the answer: %q", len(rest), rest)
			}
		})
	}
}

// TestFramingStopsAfterProtocolSwitch: once the upstream switches protocols
// (101) the connection is a byte relay; bytes that look like a forbidden
// HTTP/1 head are the new protocol's and pass, on the plain port and inside
// an intercepted tunnel.
func TestFramingStopsAfterProtocolSwitch(t *testing.T) {
	payload := "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
	echo := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			io.WriteString(w, "jar")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf := make([]byte, len(payload))
		n, _ := io.ReadFull(brw, buf) // the relay may pass it on in pieces
		conn.Write(buf[:n])
	}
	ix := newIxIntercept(t, echo)
	e := &biEnv{ix: ix, target: strings.TrimPrefix(ix.up.URL, "https://")}
	head := "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	relay := func(t *testing.T, conn net.Conn, req string) {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, req)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		io.WriteString(conn, payload)
		got := make([]byte, len(payload))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != payload {
			t.Fatalf("relayed %q, %v; want the payload echoed", got, err)
		}
	}
	t.Run("plain port", func(t *testing.T) {
		// A configured upstream: the plain port relays protocol switches
		// on the transparent path.
		plain := newUpstream(t, echo)
		tp := newTestProxy(t, ixMaven(plain.URL, true, ""), nil)
		conn, err := net.Dial("tcp", tp.URL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		host := strings.TrimPrefix(plain.URL, "http://")
		relay(t, conn, "GET "+plain.URL+"/maven2/ws HTTP/1.1\r\nHost: "+host+"\r\n"+head)
	})
	t.Run("intercepted", func(t *testing.T) {
		relay(t, biTLSInTunnel(t, e), "GET /maven2/ws HTTP/1.1\r\nHost: "+e.target+"\r\n"+head)
	})
	t.Run("plain port, unclassified host", func(t *testing.T) {
		// A host no upstream names (allowed by allow_hosts): its protocol
		// switch is relayed too.
		other := newUpstream(t, echo)
		tp := newTestProxy(t, ixMaven("http://repo.test", true, "[sidecar]\n"+allowHostsLine(other)+"\n"), nil)
		conn, err := net.Dial("tcp", tp.URL.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		host := strings.TrimPrefix(other.URL, "http://")
		relay(t, conn, "GET "+other.URL+"/ws HTTP/1.1\r\nHost: "+host+"\r\n"+head)
	})
}
