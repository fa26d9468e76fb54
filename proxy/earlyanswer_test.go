package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// earlyStreamingUpstream answers an upload with 200 and the first half of
// a 2000-byte body at once, then reads the whole request body before it
// sends the rest: a server that streams its answer while it takes the
// upload (full duplex).
func earlyStreamingUpstream(w http.ResponseWriter, r *http.Request) {
	_ = http.NewResponseController(w).EnableFullDuplex()
	w.Header().Set("Content-Length", "2000")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, strings.Repeat("a", 1000))
	_ = http.NewResponseController(w).Flush()
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		return
	}
	_, _ = io.WriteString(w, strings.Repeat("b", 1000))
}

// startEarlyUpload sends, on a raw connection to the proxy, a POST that
// announces a 100000-byte body and sends 10 bytes of it, and reads the
// answer's headers and first 1000 bytes.
func startEarlyUpload(t *testing.T, tp *testProxy, url, host string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", tp.URL.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n\r\n0123456789", url, host)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the early answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("early answer %d, want 200", resp.StatusCode)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatalf("reading the first half: %v", err)
	}
	return conn
}

// TestUploadAbandonedAfterAnEarlyAnswerIsNeutral: the upstream answered an
// upload early (200, its body streaming) and waits for the rest of the
// upload before it sends more; the client then goes away, or stalls,
// before it has sent its body. Nothing may be counted against the
// upstream (docs/behaviour.md §5.1): while the answer waits, the upstream
// waits on the client's upload, so the answer's read timeout (proxy_timeout,
// 1 s) must not run out on it; the client's idle_timeout (3 s, longer, so
// that on its own the read timeout would always run out first) is the
// client's timer; and the answer that breaks off when the transport cuts
// the upstream's connection for the broken upload is the client's doing.
//
// Over HTTP/2 (the shared pool) the client's request is an absolute-form
// https one on the plain port. There a client that stalls used to hold the
// request for as long as its connection stayed open: x/net's transport
// closes the request body on the goroutine that ends the stream, and
// net/http's Close drained the rest of the upload from the stalled client
// with no deadline, so the answer was never cut and no log line written.
func TestUploadAbandonedAfterAnEarlyAnswerIsNeutral(t *testing.T) {
	for _, c := range []struct {
		how string
		h2  bool
	}{{"closes", false}, {"stalls", false}, {"closes", true}, {"stalls", true}} {
		how := c.how
		t.Run(fmt.Sprintf("%s upstream-h2=%v", how, c.h2), func(t *testing.T) {
			sidecar := "[sidecar]\nidle_timeout = \"3s\"\n"
			var up *upstream
			if c.h2 {
				up = &upstream{Server: httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.ProtoMajor != 2 {
						t.Errorf("upstream asked over %s", r.Proto)
					}
					earlyStreamingUpstream(w, r)
				}))}
				up.EnableHTTP2 = true
				up.StartTLS()
				t.Cleanup(up.Close)
				sidecar += fmt.Sprintf("upstream_ca = %q\n", writeUpstreamCA(t, up.Server))
			} else {
				up = newUpstream(t, earlyStreamingUpstream)
			}
			tp, watch := ixStartProxy(t, ixMavenWithin(up.URL, true, 1, sidecar))
			host := up.Listener.Addr().String()
			// Three at once, as many as failure_threshold: the stalls
			// take their 3 s together.
			var wg sync.WaitGroup
			for range 3 {
				conn := startEarlyUpload(t, tp, up.URL+"/maven2/g/a/1/a-1.jar", host)
				if how == "closes" {
					conn.Close()
					continue
				}
				// Stalls: reads on until the proxy cuts the answer.
				wg.Go(func() { _, _ = io.Copy(io.Discard, conn) })
			}
			wg.Wait()
			watch.waitForN(t, `"method":"POST"`, 3)
			if s := breakerOf(t, tp, ixKey(up.URL)); s.FailureCount != 0 {
				for _, l := range strings.Split(tp.Logs.String(), "\n") {
					if strings.Contains(l, `"method":"POST"`) {
						t.Log(l)
					}
				}
			}
			wantUnmoved(t, tp, ixKey(up.URL))
		})
	}
}
