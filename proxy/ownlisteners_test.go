package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// The admin API must not be reachable through the proxy: a request sent
// through the proxy port to its own listeners is refused whatever address
// names them, with deny_unlisted or without, even when an upstream lives on
// the same loopback address (docs/behaviour.md §10). allow_hosts names
// every one of those addresses (and, for the CONNECT, the admin port), so
// neither the loopback rule nor deny_unlisted nor the CONNECT port rule
// refuses them: the own-listener check is the only thing that can.
func TestOwnListenersAreNeverReachedThroughTheProxy(t *testing.T) {
	npm := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	hosts := []string{"127.0.0.1", "localhost", "[::1]", "0.0.0.0", "127.0.0.2"}
	for _, deny := range []bool{false, true} {
		t.Run(fmt.Sprintf("deny_unlisted=%v", deny), func(t *testing.T) {
			text := func(allow []string) string {
				return fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "npm"
[npm]
proxy = %q
[sidecar]
deny_unlisted = %v
admin_token = "s3cret"
allow_hosts = ["%s"]
`, npm.URL, deny, strings.Join(allow, `", "`))
			}
			var allow []string
			for _, h := range hosts {
				allow = append(allow, strings.Trim(h, "[]"))
			}
			tp := newTestProxy(t, text(allow), nil)
			_, adminPort, _ := net.SplitHostPort(strings.TrimPrefix(tp.AdminURL, "http://"))
			_, proxyPort, _ := net.SplitHostPort(tp.URL.Host)
			// The admin port is known only now: a CONNECT may name it once
			// allow_hosts lists it with its port.
			if restart, err := tp.Reload(testkit.LoadConfig(t, text(append(allow, "127.0.0.1:"+adminPort)), nil)); err != nil || len(restart) != 0 {
				t.Fatalf("reload: %v, needs restart %v", err, restart)
			}
			c := proxyClient(t, tp, nil)
			key := "npm:" + npm.URL
			for _, host := range hosts {
				for _, port := range []string{adminPort, proxyPort} {
					for _, call := range []struct{ method, path string }{
						{"GET", "/breakers"}, {"GET", "/metrics"}, {"POST", "/breakers/force?key=" + key + "&state=open"},
					} {
						url := "http://" + net.JoinHostPort(strings.Trim(host, "[]"), port) + call.path
						resp, _ := request(t, c, call.method, url, http.Header{"Authorization": {"Bearer s3cret"}})
						if resp.StatusCode != http.StatusForbidden {
							t.Errorf("%s %s through the proxy: %d, want 403", call.method, url, resp.StatusCode)
						}
					}
				}
			}
			if s := breakerOf(t, tp, key); s.State != breakerstate.Closed || s.Forced != "" {
				t.Fatalf("the breaker was forced through the proxy: %+v", s)
			}
			// The upstream on the same loopback address still works.
			if resp, _ := getURL(t, c, npm.URL+"/left-pad"); resp.StatusCode != 200 {
				t.Fatalf("the upstream itself: %d", resp.StatusCode)
			}
			// CONNECT to the admin port is refused too, by the own-listener
			// check: the dial is refused, so the answer is 403.
			resp, _, _ := ixRawConnect(t, tp, net.JoinHostPort("127.0.0.1", adminPort))
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("CONNECT to the admin port: %d, want 403", resp.StatusCode)
			}
		})
	}
}

// TestLoopbackOnlyWhereTheConfigurationNamesIt: a loopback server that no
// upstream, resolve entry or allow_hosts names is not reachable through the
// proxy, whether addressed directly or by a name that resolves there.
func TestLoopbackOnlyWhereTheConfigurationNamesIt(t *testing.T) {
	hidden := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "local service") })
	tp := newTestProxy(t, ixMaven("http://repo.test", true, ""), nil)
	c := proxyClient(t, tp, nil)
	if resp, _ := getURL(t, c, hidden.URL+"/internal"); resp.StatusCode != http.StatusForbidden || hidden.hits.Load() != 0 {
		t.Fatalf("unnamed loopback service: %d (hits %d), want 403 and untouched", resp.StatusCode, hidden.hits.Load())
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(hidden.URL, "http://"))
	if resp, _ := getURL(t, c, "http://localhost:"+port+"/internal"); resp.StatusCode != http.StatusForbidden || hidden.hits.Load() != 0 {
		t.Fatalf("by the name localhost: %d (hits %d), want 403 and untouched", resp.StatusCode, hidden.hits.Load())
	}
}
