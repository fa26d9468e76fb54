package proxy

import (
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
