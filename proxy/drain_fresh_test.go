package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestShutdownClosesConnectionsWithoutARequestAlike: a client connection
// that has not sent its first request when the shutdown begins (a client
// that connected ahead of need, or one whose request is about to come) is
// closed by the drain once it is 5 s old, on the plain port and inside an
// intercepted HTTP/1.1 tunnel alike (docs/behaviour.md §8). On main the
// intercepted one held the drain for its whole 10 s header timeout, twice
// the plain port's.
func TestShutdownClosesConnectionsWithoutARequestAlike(t *testing.T) {
	for _, kind := range []string{"plain", "intercepted h1"} {
		t.Run(kind, func(t *testing.T) {
			up := newTLSUpstream(t, func(http.ResponseWriter, *http.Request) {})
			lines, pool := interceptCA(t, up.Server)
			cfg := testkit.LoadConfig(t, ixMaven(up.URL, true, "[sidecar]\n"+lines), nil)
			tp := startProxyWith(t, cfg, zerolog.Nop(), nil, 20*time.Second)
			if kind == "plain" {
				c, err := net.Dial("tcp", tp.URL.Host)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
			} else {
				ixTLSInTunnel(t, tp, pool, strings.TrimPrefix(up.URL, "https://"), "http/1.1")
			}
			start := time.Now()
			if err := tp.stop(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 8*time.Second {
				t.Fatalf("%s: a connection without a request held the drain for %v, want about 5 s", kind, d)
			}
		})
	}
}

// acceptSignal tells of every connection the proxy port accepts.
type acceptSignal struct {
	net.Listener
	accepted chan struct{}
}

func (l acceptSignal) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.accepted <- struct{}{}:
		default:
		}
	}
	return c, err
}

// TestShutdownAnswersARequestOnAConnectionAcceptedBefore: a client that
// connected to the plain port before the shutdown began and sends its
// request just after gets it answered, with Connection: close, as a client
// handed over to an intercepted tunnel does (docs/behaviour.md §8). On main
// http.Server.Shutdown dropped it: net/http closes a connection whose
// request it reads once a shutdown has begun, without an answer, and the
// client saw an unexpected EOF.
func TestShutdownAnswersARequestOnAConnectionAcceptedBefore(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	cfg := testkit.LoadConfig(t, "[sidecar]\n"+allowHostsLine(up)+"\n", nil)
	accepted := make(chan struct{}, 1)
	tp := startProxyWith(t, cfg, zerolog.Nop(), func(ln net.Listener) net.Listener {
		return acceptSignal{Listener: ln, accepted: accepted}
	}, 20*time.Second)
	c, err := net.Dial("tcp", tp.URL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted
	stopped := beginShutdown(t, tp)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	host := strings.TrimPrefix(up.URL, "http://")
	io.WriteString(c, "GET "+up.URL+"/x HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a request on a connection accepted before the shutdown: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok" || !resp.Close {
		t.Fatalf("got %d %q (close %v), want the upstream's 200 with Connection: close", resp.StatusCode, b, resp.Close)
	}
	<-stopped
}
