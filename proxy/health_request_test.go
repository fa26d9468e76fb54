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

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// A client's own broken request is its problem: it is answered 400 and the
// upstream's breaker does not move, however often it is sent. Before, any
// client could cut an upstream off for everybody this way.

// brokenChunked is a request whose chunked body has an invalid chunk size.
func brokenChunked(method, target, host string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", method, target, host)
}

// exchangeOn writes req on conn and reads one answer.
func exchangeOn(t *testing.T, conn net.Conn, req string) *http.Response {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func wantUnmoved(t *testing.T, tp *testProxy, key string) {
	t.Helper()
	if s := breakerOf(t, tp, key); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("breaker %s moved: %s, %d failures", key, s.State, s.FailureCount)
	}
}

func TestHealthBrokenRequestBodyPlain(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		io.WriteString(w, "ok")
	})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	host := strings.TrimPrefix(up.URL, "http://")
	for _, method := range []string{"POST", "GET"} {
		for i := range 10 {
			resp, _ := ixRaw(t, tp, brokenChunked(method, up.URL+"/maven2/x.jar", host))
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s %d: %d, want 400", method, i, resp.StatusCode)
			}
		}
	}
	wantUnmoved(t, tp, ixKey(up.URL))
}

func TestHealthBrokenRequestBodyIntercepted(t *testing.T) {
	ix := newIxIntercept(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		io.WriteString(w, "ok")
	})
	target := strings.TrimPrefix(ix.up.URL, "https://")
	t.Run("h1 broken chunked body", func(t *testing.T) {
		for i := range 10 {
			tc := ixTLSInTunnel(t, ix.tp, ix.ca, target, "http/1.1")
			resp := exchangeOn(t, tc, brokenChunked("POST", "/maven2/x.jar", target))
			tc.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("POST %d: %d, want 400", i, resp.StatusCode)
			}
		}
		wantUnmoved(t, ix.tp, ixKey(ix.up.URL))
	})
	t.Run("h2 DATA shorter than content-length", func(t *testing.T) {
		for i := range 10 {
			status := h2ShortBody(t, ix, target)
			if status != http.StatusBadRequest && status != 0 {
				t.Fatalf("request %d: %d, want 400 (or the stream reset)", i, status)
			}
		}
		wantUnmoved(t, ix.tp, ixKey(ix.up.URL))
	})
}

// h2ShortBody sends, over an intercepted HTTP/2 connection, a POST that
// declares content-length 10 and ends its stream after 5 bytes. It returns
// the answer's status, or 0 if the proxy reset the stream instead.
func h2ShortBody(t *testing.T, ix *ixIntercept, target string) int {
	t.Helper()
	tc := ixTLSInTunnel(t, ix.tp, ix.ca, target, "h2")
	defer tc.Close()
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(tc, tc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", target},
		{":path", "/maven2/x.jar"}, {"content-length", "10"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, []byte("short")); err != nil {
		t.Fatal(err)
	}
	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" {
					var status int
					fmt.Sscan(hf.Value, &status)
					return status
				}
			}
		case *http2.RSTStreamFrame:
			return 0
		case *http2.GoAwayFrame:
			t.Fatalf("connection closed: %v", f.ErrCode)
		}
	}
}

// TestHealthNotImplementedIsAlive: an upstream that does not implement a
// method (501) or an HTTP version (505) answered; it is not broken.
func TestHealthNotImplementedIsAlive(t *testing.T) {
	for _, status := range []int{http.StatusNotImplemented, http.StatusHTTPVersionNotSupported} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })
			tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
			c := proxyClient(t, tp, nil)
			for i := range 5 {
				if resp, _ := request(t, c, "FOO", up.URL+"/maven2/x", nil); resp.StatusCode != status {
					t.Fatalf("request %d: %d, want the upstream's %d", i, resp.StatusCode, status)
				}
			}
			wantUnmoved(t, tp, ixKey(up.URL))
		})
	}
}
