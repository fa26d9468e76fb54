package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// A client that reads slowly, pauses, or stops reading says nothing about
// the upstream: the body's idle timer runs only while the proxy waits for
// upstream bytes, never while it waits for the client. A client that stops
// reading altogether is cut off after idle_timeout, and the upstream is not
// charged for it.

// smallBuffers keeps the kernel's socket buffers small, so that a client
// that does not read blocks the proxy's writes at once instead of after
// megabytes of loopback buffering.
const smallBuffers = 8 << 10

// smallSendListener shrinks the send buffer of every accepted connection.
type smallSendListener struct{ net.Listener }

func (l smallSendListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(smallBuffers)
	}
	return c, err
}

// slowReaderConfig: one npm upstream whose proxy_timeout (and so its body
// read timeout) is 1 s, threshold 2, and the given idle_timeout.
func slowReaderConfig(base, idle, extra string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = 30
[registries]
enable = "npm"
[npm]
proxy = %q
proxy_timeout = 1
[sidecar]
idle_timeout = %q
%s`, base, idle, extra)
}

// smallReadClient is a proxy client whose connections have a small receive
// buffer. roots, when set, are the only trusted roots.
func smallReadClient(t *testing.T, tp *testProxy, roots *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(tp.URL), DialContext: smallReadDialer().DialContext,
		DisableCompression: true, TLSClientConfig: roots}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// smallReadDialer dials connections with a small receive buffer (set before
// the connect, so the window is small from the start).
func smallReadDialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, smallBuffers)
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// bigBody serves n bytes as fast as the connection takes them.
func bigBody(n int) http.HandlerFunc {
	chunk := strings.Repeat("x", 32<<10)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(n))
		for left := n; left > 0; left -= len(chunk) {
			if _, err := io.WriteString(w, chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
	}
}

// readerCase is one way of reading a body.
type readerCase struct {
	name string
	size int
	// read consumes body; it returns how many bytes it read and the
	// error that ended the reading.
	read func(body io.Reader) (int64, error)
	// wantWhole: the client must get the whole body. stops: the client
	// stops reading after read returns, and the proxy must give up on it
	// (and so on the upstream's body) within cutWithin, but not before the
	// upstream's read timeout could have fired. A stopped reader is cut
	// after one to three idle periods: as Linux compacts a full receive
	// queue it opens the window a little, so the socket of a client that
	// reads nothing still takes a few KiB more (seen: 20 KiB, then 4 KiB,
	// then none), and bytes taken count as the client reading.
	wantWhole bool
	stops     bool
	cutWithin time.Duration
}

func readerCases(idle time.Duration) []readerCase {

	return []readerCase{
		{name: "pauses twice as long as the read timeout", size: 512 << 10, wantWhole: true,
			read: func(body io.Reader) (int64, error) {
				n, err := io.CopyN(io.Discard, body, 16<<10)
				if err != nil {
					return n, err
				}
				time.Sleep(2 * time.Second) // the client's pause, not a wait for the proxy
				m, err := io.Copy(io.Discard, body)
				return n + m, err
			}},
		{name: "reads steadily at 10 KiB/s", size: 96 << 10, wantWhole: true,
			read: func(body io.Reader) (int64, error) {
				var n int64
				buf := make([]byte, 1<<10)
				for {
					k, err := body.Read(buf)
					n += int64(k)
					if err == io.EOF {
						return n, nil
					}
					if err != nil {
						return n, err
					}
					time.Sleep(100 * time.Millisecond) // the client's pace
				}
			}},
		{name: "stops reading", size: 64 << 20, stops: true, cutWithin: 3*idle + 3*time.Second,
			read: func(body io.Reader) (int64, error) {
				return io.CopyN(io.Discard, body, 16<<10)
			}},
	}
}

// readerEnv is one proxy in front of one upstream, for one reader case.
type readerEnv struct {
	tp     *testProxy
	bodies *servedBodies
	client *http.Client
	url    string // the body's URL, without query
	key    string // the upstream's breaker key
}

// runReaderCases runs every reader case against its own proxy and
// upstream (made by newEnv), so one case's success cannot hide another's
// failure: a success resets the count.
func runReaderCases(t *testing.T, idle time.Duration, newEnv func(t *testing.T) readerEnv) {
	for _, rc := range readerCases(idle) {
		t.Run(rc.name, func(t *testing.T) {
			t.Parallel()
			env := newEnv(t)
			target := fmt.Sprintf("%s?size=%d", env.url, rc.size)
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, target, nil)
			resp, err := env.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			n, err := rc.read(resp.Body)
			if rc.wantWhole && (err != nil || n != int64(rc.size)) {
				t.Errorf("read %d of %d bytes: %v", n, rc.size, err)
			}
			if rc.stops {
				stopped := time.Now()
				select {
				case <-env.bodies.done(target):
				case <-time.After(rc.cutWithin):
					t.Fatalf("the proxy still sends to a client that stopped reading %v ago", rc.cutWithin)
				}
				// The upstream's read timeout is 1 s and idle_timeout 3 s: a
				// cut this early is the upstream being blamed for the client.
				if d := time.Since(stopped); d < 2*time.Second {
					t.Errorf("cut off %v after the client stopped reading, before its idle timeout", d)
				}
				resp.Body.Close()
			}
			// The request's verdict is reported when its body is done with.
			testkit.PollUntil(t, 5*time.Second, func() bool { return env.bodies.finished(target) })
			if s := breakerOf(t, env.tp, env.key); s.State != breakerstate.Closed || s.FailureCount != 0 {
				t.Errorf("the reader moved the upstream's breaker: %s, %d failures", s.State, s.FailureCount)
			}
		})
	}
}

// servedBodies serves ?size= bytes and tells when the write of each request
// (by its full URL) has ended, which is when the proxy stopped reading it.
type servedBodies struct {
	mu    sync.Mutex
	ended map[string]chan struct{}
}

func newServedBodies() *servedBodies { return &servedBodies{ended: map[string]chan struct{}{}} }

func (s *servedBodies) done(url string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, err := neturl.Parse(url)
	if err != nil {
		panic(err)
	}
	key := u.RequestURI()
	if s.ended[key] == nil {
		s.ended[key] = make(chan struct{})
	}
	return s.ended[key]
}

// finished reports whether the request to url has ended on the upstream.
func (s *servedBodies) finished(url string) bool {
	select {
	case <-s.done(url):
		return true
	default:
		return false
	}
}

func (s *servedBodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer close(s.done("http://x" + r.URL.RequestURI()))
	var n int
	fmt.Sscan(r.URL.Query().Get("size"), &n)
	bigBody(n)(w, r)
}

func TestHealthSlowReadersPlain(t *testing.T) {
	runReaderCases(t, slowIdle, func(t *testing.T) readerEnv {
		bodies := newServedBodies()
		up := newUpstream(t, bodies.ServeHTTP)
		cfg := testkit.LoadConfig(t, slowReaderConfig(up.URL, slowIdle.String(), ""), nil)
		tp := startProxyWrapped(t, cfg, zerolog.Nop(), func(ln net.Listener) net.Listener { return smallSendListener{ln} })
		return readerEnv{tp: tp, bodies: bodies, client: smallReadClient(t, tp, nil),
			url: up.URL + "/pkg/-/pkg-1.tgz", key: "npm:" + up.URL}
	})
}

func TestHealthSlowReadersIntercepted(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			t.Parallel()
			runReaderCases(t, slowIdle, func(t *testing.T) readerEnv { return interceptedReaderEnv(t, h2) })
		})
	}
}

// slowIdle is the idle_timeout of the slow-reader tests.
const slowIdle = 3 * time.Second

func interceptedReaderEnv(t *testing.T, h2 bool) readerEnv {
	bodies := newServedBodies()
	up := newTLSUpstream(t, bodies.ServeHTTP)
	extra, pool := interceptCA(t, up.Server)
	cfg := testkit.LoadConfig(t, slowReaderConfig(up.URL, slowIdle.String(), extra), nil)
	tp := startProxyWrapped(t, cfg, zerolog.Nop(), func(ln net.Listener) net.Listener { return smallSendListener{ln} })
	tlsConf := &tls.Config{RootCAs: pool, Time: tp.Clock.Now, NextProtos: []string{"http/1.1"}}
	client := smallReadClient(t, tp, tlsConf)
	if h2 {
		tlsConf.NextProtos = []string{"h2"}
		client.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	}
	return readerEnv{tp: tp, bodies: bodies, client: client, url: up.URL + "/pkg/-/pkg-1.tgz", key: "npm:" + up.URL}
}
