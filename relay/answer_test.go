package relay

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// answerServer serves every request with Answer(resp()), on HTTP/1 or,
// with h2, HTTP/2 over TLS.
func answerServer(t *testing.T, h2 bool, resp func() *http.Response) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := WatchClientBody(w, r, time.Minute)
		Answer(w, r, resp(), Options{Bufs: NewBuffers(), Body: body})
	}))
	if h2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	c := srv.Client()
	if h2 {
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = true
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: c.Transport.(*http.Transport).TLSClientConfig.RootCAs,
			NextProtos: []string{"h2"}}
	}
	return srv, c
}

// TestAnswerAddsNothing: an upstream answer without Content-Type or Date
// reaches the client without them, on HTTP/1 and HTTP/2 (issue 20, point
// 5: net/http would sniff a Content-Type and add a Date).
func TestAnswerAddsNothing(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			srv, c := answerServer(t, h2, func() *http.Response {
				return &http.Response{StatusCode: 200, Header: http.Header{"X-Content-Type-Options": {"nosniff"}},
					ContentLength: -1, Body: io.NopCloser(strings.NewReader("<html><body>looks like html</body></html>"))}
			})
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			io.Copy(io.Discard, resp.Body)
			if h2 && resp.ProtoMajor != 2 {
				t.Fatalf("spoke %s", resp.Proto)
			}
			for _, added := range []string{"Content-Type", "Date"} {
				if v, ok := resp.Header[added]; ok {
					t.Errorf("%s: %q was added to an answer that had none", added, v)
				}
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("the upstream's own header was lost: %v", resp.Header)
			}
		})
	}
}

// TestAnswerEarlyGoesOutAtOnce: an answer written while the client still
// holds back its body (Expect: 100-continue, nothing sent yet) reaches the
// client at once, closing the connection (issue 20, point 4).
func TestAnswerEarlyGoesOutAtOnce(t *testing.T) {
	srv, _ := answerServer(t, false, func() *http.Response {
		return &http.Response{StatusCode: http.StatusUnauthorized, Header: http.Header{"Content-Type": {"text/plain"}},
			ContentLength: 6, Body: io.NopCloser(strings.NewReader("denied"))}
	})
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n")
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPut})
	if err != nil {
		t.Fatalf("no answer to a client that holds its body back: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 401 || string(body) != "denied" || !resp.Close {
		t.Fatalf("got %d %q close=%v, want the 401 with Connection: close", resp.StatusCode, body, resp.Close)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after an early answer")
	}
}

// TestClientBodyStallIsTheClients: a client that stops sending its body for
// the idle timeout makes the read fail, instead of holding the request (and
// the upstream waiting for the rest) for ever.
func TestClientBodyStallIsTheClients(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := WatchClientBody(w, r, 300*time.Millisecond)
		_, err := io.ReadAll(body)
		got <- err
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc")
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("a body that stalled read as complete")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stalled body held the read for 10 s (idle timeout 300 ms)")
	}
}

// writeSizes is a ResponseWriter that keeps the size of its largest write.
type writeSizes struct {
	hdr     http.Header
	largest int
	total   int64
}

func (w *writeSizes) Header() http.Header { return w.hdr }
func (w *writeSizes) WriteHeader(int)     {}
func (w *writeSizes) Write(p []byte) (int, error) {
	w.largest = max(w.largest, len(p))
	w.total += int64(len(p))
	return len(p), nil
}

// TestLargeBodiesStreamInLargeWrites: a body the upstream says is large is
// copied in writes of the large buffer's size; one of unknown length, or a
// small one, in the small size (so a thousand idle answers do not each
// hold a quarter megabyte).
func TestLargeBodiesStreamInLargeWrites(t *testing.T) {
	const size = 3 << 20
	cases := []struct {
		name   string
		length int64
		want   int
	}{
		{"large, length known", size, largeBuffer},
		{"length unknown", -1, smallBuffer},
		{"just under large", largeBody - 1, smallBuffer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := int64(size)
			if c.length >= 0 {
				n = c.length
			}
			w := &writeSizes{hdr: http.Header{}}
			req := httptest.NewRequest(http.MethodGet, "http://repo.test/a.jar", nil)
			Answer(w, req, &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: c.length,
				Body: io.NopCloser(io.LimitReader(zeros{}, n))}, Options{Bufs: NewBuffers()})
			if w.total != n || w.largest != c.want {
				t.Fatalf("%d bytes in writes of at most %d; want %d in writes of %d", w.total, w.largest, n, c.want)
			}
		})
	}
}

// zeros reads as endless zero bytes, filling every read.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
