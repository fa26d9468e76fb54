package proxy

import (
	"bufio"
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

func FuzzFramingScan(f *testing.F) {
	f.Add([]byte("GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n"))
	f.Add([]byte("POST http://a/ HTTP/1.1\r\nContent-Length: 2\r\n\r\nxyGET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte("CONNECT a:443 HTTP/1.1\r\n\r\n\x16\x03\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &framingConn{}
		// Feed in two pieces to exercise state carried across reads.
		half := len(data) / 2
		if c.scan(data[:half]) {
			c.scan(data[half:])
		}
		if len(c.head) > maxScannedHead || len(c.line) > 4096 || c.remain < 0 {
			t.Fatalf("bounds broken: head %d line %d remain %d", len(c.head), len(c.line), c.remain)
		}
	})
}
