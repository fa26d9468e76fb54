package proxy

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/squidtest"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// Integration tests with a real parent proxy: Debian's squid, asking for
// basic credentials, as a corporate proxy does (docs/behaviour.md §5.8).

// squidUsers is the one account the tests' squid knows.
var squidUsers = map[string]string{"bot": "s3cret"}

// origin is a registry that serves "<path> from <name>", counts requests,
// remembers whether any carried Proxy-Authorization (none may) and can be
// switched to answering 500.
type origin struct {
	*upstream
	name       string
	proxyAuths atomic.Int64
	vias       atomic.Value // the last request's Via
	down       atomic.Bool
}

func newOrigin(t *testing.T, name string, tls bool) *origin {
	t.Helper()
	o := &origin{name: name}
	o.vias.Store("")
	h := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			o.proxyAuths.Add(1)
		}
		o.vias.Store(r.Header.Get("Via"))
		if o.down.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, r.URL.Path+" from "+o.name)
	}
	if tls {
		o.upstream = newTLSUpstream(t, h)
	} else {
		o.upstream = newUpstream(t, h)
	}
	return o
}

// squidMavenNpm is a configuration with a maven upstream at mavenURL and
// an npm one at npmURL (different formats: neither fails over to the
// other), both breakers at threshold 2, through parent with bot's
// credentials, plus more [sidecar] lines.
func squidMavenNpm(parentAddr, mavenURL, npmURL, sidecar string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = 30
[registries]
enable = "maven,npm"
[maven]
proxies = ["%s/m2"]
proxy_timeout = 10
[npm]
proxy = "%s"
proxy_timeout = 10
[sidecar]
parent_proxy = "http://bot:s3cret@%s"
%s
`, mavenURL, npmURL, parentAddr, sidecar)
}

// waitAccessLog waits until squid has logged a line containing each of
// wants (it logs when a transaction ends).
func waitAccessLog(t *testing.T, sq *squidtest.Squid, wants ...string) {
	t.Helper()
	ok := testkit.Poll(10*time.Second, func() bool {
		log := sq.AccessLog()
		for _, w := range wants {
			if !strings.Contains(log, w) {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("squid's access log lacks %q:\n%s", wants, sq.AccessLog())
	}
}

// clientFor is a client through tp that trusts roots and checks
// certificates against the proxy's clock (the interception CA's leaves are
// dated by it).
func clientFor(t *testing.T, tp *testProxy, roots *x509.CertPool) *http.Client {
	c := proxyClient(t, tp, roots)
	c.Transport.(*http.Transport).TLSClientConfig.Time = tp.Clock.Now
	return c
}

// TestSquidParentCarriesHTTPSAndHTTP: with squid as the parent, an https
// upstream is reached through squid's CONNECT (the client's requests
// intercepted, or its CONNECT tunnelled blind) and a plain http upstream
// in absolute form; squid is sent the credentials and the upstreams never
// are; the parent's breaker is listed as its own format.
func TestSquidParentCarriesHTTPSAndHTTP(t *testing.T) {
	for _, mode := range []string{"intercepted", "blind tunnel"} {
		t.Run(mode, func(t *testing.T) {
			sq := squidtest.Start(t, squidtest.Options{Users: squidUsers})
			secure := newOrigin(t, "secure", true)
			plain := newOrigin(t, "plain", false)
			sidecar := fmt.Sprintf("upstream_ca = %q\n", writeUpstreamCA(t, secure.Server))
			roots := x509.NewCertPool()
			roots.AddCert(secure.Certificate())
			if mode == "intercepted" {
				lines, pool := interceptCA(t, secure.Server)
				sidecar, roots = lines, pool
			}
			tp := newTestProxy(t, squidMavenNpm(sq.Addr, secure.URL, plain.URL, sidecar), nil)
			c := clientFor(t, tp, roots)
			for _, tc := range []struct{ url, want string }{
				{secure.URL + "/m2/g/a/1/a-1.jar", "/m2/g/a/1/a-1.jar from secure"},
				{plain.URL + "/left-pad", "/left-pad from plain"},
			} {
				if resp, body := getURL(t, c, tc.url); resp.StatusCode != 200 || body != tc.want {
					t.Fatalf("GET %s: %d %q\n%s", tc.url, resp.StatusCode, body, tp.Logs.String())
				}
			}
			// squid logs a CONNECT when its tunnel ends: close the idle
			// connections that keep the tunnels open (the client's, and the
			// proxy's inside them).
			c.Transport.(*http.Transport).CloseIdleConnections()
			tp.state.Load().transport.CloseIdleConnections()
			waitAccessLog(t, sq, "CONNECT "+secure.Listener.Addr().String()+" bot",
				"GET "+plain.URL+"/left-pad bot")
			for _, o := range []*origin{secure, plain} {
				if n := o.proxyAuths.Load(); n != 0 || o.hits.Load() != 1 {
					t.Fatalf("%s saw %d requests, %d with Proxy-Authorization; want 1 and none", o.name, o.hits.Load(), n)
				}
			}
			if via := plain.vias.Load().(string); !strings.Contains(via, "nora-breaker") || !strings.Contains(via, "squid") {
				t.Fatalf("plain upstream's Via %q: it did not come through nora-breaker and squid", via)
			}
			parentKey := "parent:" + sq.URL
			if b := breakerOf(t, tp, parentKey); b.Format != "parent" || b.State != breakerstate.Closed {
				t.Fatalf("parent breaker %+v", b)
			}
			if strings.Contains(tp.Logs.String(), "s3cret") {
				t.Fatal("the log shows the parent's password")
			}
		})
	}
}

// TestSquidStoppedOpensTheParentsBreaker: squid stops; each request's
// connection to it is refused, which counts for the parent's breaker and
// never for the upstream's; the clients get stale copies throughout, a
// request with no copy the 503 of the open parent; /health, /breakers and
// the metrics show the parent open; squid back, the parent's probe closes
// it.
func TestSquidStoppedOpensTheParentsBreaker(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			sq := squidtest.Start(t, squidtest.Options{Users: squidUsers})
			o := newOrigin(t, "maven", scheme == "https")
			other := newOrigin(t, "npm", false)
			sidecar := fmt.Sprintf("stale_dir = %q\n", t.TempDir())
			var roots *x509.CertPool
			if scheme == "https" {
				var lines string
				lines, roots = interceptCA(t, o.Server)
				sidecar += lines
			}
			tp := newTestProxy(t, squidMavenNpm(sq.Addr, o.URL, other.URL, sidecar), nil)
			c := clientFor(t, tp, roots)
			jar := o.URL + "/m2/g/a/1/a-1.jar"
			if resp, body := getURL(t, c, jar); resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "" {
				t.Fatalf("warm-up: %d %q", resp.StatusCode, body)
			}
			fbWaitStored(t, tp, "maven", jar, nil)
			sq.Stop()
			upKey, parentKey := tp.Config().Upstreams[0].Key, "parent:"+sq.URL
			for i := range 3 {
				resp, body := getURL(t, c, jar)
				if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "true" || body != "/m2/g/a/1/a-1.jar from maven" {
					t.Fatalf("request %d with squid down: %d %v %q", i, resp.StatusCode, resp.Header, body)
				}
			}
			p := breakerOf(t, tp, parentKey)
			if p.State != breakerstate.Open || p.FailureCount != 2 {
				t.Fatalf("parent breaker %+v, want open after its threshold of 2", p)
			}
			if u := breakerOf(t, tp, upKey); u.State != breakerstate.Closed || u.FailureCount != 0 || u.Rejections != 0 {
				t.Fatalf("upstream breaker %+v: the parent's failures moved it", u)
			}
			// A request's log line is written once its body is done, which
			// can be just after the client has it.
			skipped := `"skipped":"parent","parent":"` + parentKey + `"`
			if !testkit.Poll(5*time.Second, func() bool { return strings.Contains(tp.Logs.String(), skipped) }) {
				t.Fatalf("no request skipped the upstream for its parent:\n%s", tp.Logs.String())
			}
			// A request with no copy gets the parent's 503.
			resp, _ := getURL(t, c, o.URL+"/m2/never/fetched.jar")
			if resp.StatusCode != 503 || resp.Header.Get("X-Nora-Breaker-State") != "open" || resp.Header.Get("Retry-After") != "30" ||
				resp.Header.Get("X-Nora-Breaker-Key") != parentKey {
				t.Fatalf("no copy, parent open: %d %v", resp.StatusCode, resp.Header)
			}
			wantParentOpenOnAdmin(t, tp, parentKey)
			// squid is back; once the parent's reset_timeout has passed its
			// probe succeeds and the upstream serves fresh again.
			sq.Restart(t)
			tp.Clock.Advance(31 * time.Second)
			if resp, body := getURL(t, c, jar); resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "" {
				t.Fatalf("squid back: %d %v %q", resp.StatusCode, resp.Header, body)
			}
			if p := breakerOf(t, tp, parentKey); p.State != breakerstate.Closed {
				t.Fatalf("parent breaker %+v after its probe succeeded", p)
			}
		})
	}
}

// wantParentOpenOnAdmin checks that /health, /breakers and the metrics
// show the parent's breaker open, as the parent format's.
func wantParentOpenOnAdmin(t *testing.T, tp *testProxy, key string) {
	t.Helper()
	get := func(path string) string {
		resp, err := http.Get(tp.AdminURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var health struct {
		Status  string `json:"status"`
		Formats map[string]struct {
			Status   string `json:"status"`
			Breakers map[string]struct {
				Status string `json:"status"`
			} `json:"breakers"`
		} `json:"upstreams"`
	}
	if err := json.Unmarshal([]byte(get("/health")), &health); err != nil {
		t.Fatal(err)
	}
	if f := health.Formats["parent"]; health.Status != "degraded" || f.Status != "open" || f.Breakers[key].Status != "open" {
		t.Fatalf("/health: %+v", health)
	}
	var breakers []struct{ Key, Format, State, Host string }
	if err := json.Unmarshal([]byte(get("/breakers")), &breakers); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range breakers {
		if b.Key == key {
			found = b.Format == "parent" && b.State == "open" && b.Host != ""
		}
	}
	if !found {
		t.Fatalf("/breakers does not show %s open: %+v", key, breakers)
	}
	if m := get("/metrics"); !strings.Contains(m, `nora_circuit_breaker_state{registry="`+key+`"} 1`) {
		t.Fatalf("metrics lack the parent's open state")
	}
	if page := get("/"); !strings.Contains(page, key) {
		t.Fatalf("the status page does not show %s", key)
	}
}

// TestSquid503ForOneRegistry: one registry is down, so squid answers 503
// for it (to its CONNECT, or its absolute-form request): that registry's
// breaker opens, as it would on the refused dial without a parent, while
// the other registry through the same squid stays closed and the parent's
// breaker counts nothing.
func TestSquid503ForOneRegistry(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			sq := squidtest.Start(t, squidtest.Options{Users: squidUsers})
			healthy := newOrigin(t, "npm", scheme == "https")
			deadURL := scheme + "://" + closedPort(t)
			sidecar := ""
			var roots *x509.CertPool
			if scheme == "https" {
				sidecar, roots = interceptCA(t, healthy.Server)
			}
			tp := newTestProxy(t, squidMavenNpm(sq.Addr, deadURL, healthy.URL, sidecar), nil)
			c := clientFor(t, tp, roots)
			deadKey, healthyKey := "maven:"+deadURL+"/m2", "npm:"+healthy.URL
			for i := range 2 {
				if resp, body := getURL(t, c, deadURL+"/m2/g/a/1/a-1.jar"); resp.StatusCode < 500 {
					t.Fatalf("request %d to the dead registry: %d %q", i, resp.StatusCode, body)
				}
				if resp, body := getURL(t, c, healthy.URL+"/left-pad"); resp.StatusCode != 200 {
					t.Fatalf("request %d to the healthy registry: %d %q", i, resp.StatusCode, body)
				}
			}
			if b := breakerOf(t, tp, deadKey); b.State != breakerstate.Open {
				t.Fatalf("dead registry's breaker %+v, want open after squid's two 503s\n%s", b, tp.Logs.String())
			}
			if b := breakerOf(t, tp, healthyKey); b.State != breakerstate.Closed || b.FailureCount != 0 {
				t.Fatalf("healthy registry's breaker %+v", b)
			}
			if b := breakerOf(t, tp, "parent:"+sq.URL); b.State != breakerstate.Closed || b.FailureCount != 0 {
				t.Fatalf("parent breaker %+v: squid's answers about a registry counted for it", b)
			}
			// squid did answer for the dead registry: it was asked.
			_, deadAddr, _ := strings.Cut(deadURL, "://")
			waitAccessLog(t, sq, deadAddr, "/503 ")
		})
	}
}

// TestSquidNoProxyHostDialledDirectly: a parent_no_proxy host is dialled
// directly, never through squid, while the other upstream goes through it.
func TestSquidNoProxyHostDialledDirectly(t *testing.T) {
	sq := squidtest.Start(t, squidtest.Options{Users: squidUsers})
	direct := newOrigin(t, "maven", false)
	viaParent := newOrigin(t, "npm", false)
	directAddr := direct.Listener.Addr().String()
	tp := newTestProxy(t, squidMavenNpm(sq.Addr, direct.URL, viaParent.URL,
		fmt.Sprintf("parent_no_proxy = [%q]", directAddr)), nil)
	c := clientFor(t, tp, nil)
	if resp, body := getURL(t, c, direct.URL+"/m2/x.jar"); resp.StatusCode != 200 || body != "/m2/x.jar from maven" {
		t.Fatalf("direct: %d %q", resp.StatusCode, body)
	}
	if resp, _ := getURL(t, c, viaParent.URL+"/x"); resp.StatusCode != 200 {
		t.Fatalf("through squid: %d", resp.StatusCode)
	}
	waitAccessLog(t, sq, viaParent.URL+"/x bot")
	if log := sq.AccessLog(); strings.Contains(log, directAddr) {
		t.Fatalf("squid saw the parent_no_proxy host:\n%s", log)
	}
	if via := direct.vias.Load().(string); strings.Contains(via, "squid") {
		t.Fatalf("the direct host's request came through squid (Via %q)", via)
	}
}
