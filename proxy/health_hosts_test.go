package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Every host is judged on its own: another port of an upstream's host is
// not that upstream's, and each alias host has its own breaker, so a
// success on one host never wipes out another host's failures.

// TestHealthOtherPortOfAnUpstreamHost: requests to another port of the
// npm upstream's host are unclassified (or refused under deny_unlisted) and
// never move its breaker.
func TestHealthOtherPortOfAnUpstreamHost(t *testing.T) {
	npm := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })
	other := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	for _, deny := range []bool{false, true} {
		t.Run(fmt.Sprintf("deny_unlisted=%v", deny), func(t *testing.T) {
			// Without deny_unlisted the other port is listed in allow_hosts
			// (loopback is only reached where the configuration names it),
			// so it is forwarded unclassified.
			allow := allowHostsLine(other)
			if deny {
				allow = ""
			}
			tp, logs := ixStartProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 2
[registries]
enable = "npm"
[npm]
proxy = %q
[sidecar]
deny_unlisted = %v
%s
`, npm.URL, deny, allow))
			c := proxyClient(t, tp, nil)
			before := other.hits.Load()
			for i := range 3 {
				resp, _ := request(t, c, "GET", other.URL+"/x", nil)
				want := http.StatusBadGateway // the other server's own answer
				if deny {
					want = http.StatusForbidden
				}
				if resp.StatusCode != want {
					t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
				}
			}
			if deny && other.hits.Load() != before {
				t.Fatal("a refused request reached the other port")
			}
			if !deny {
				logs.waitForN(t, `"result":"unclassified"`, 3)
			}
			wantUnmoved(t, tp, "npm:"+npm.URL)
		})
	}
}

// hostsEnv is a proxy whose upstream hosts are loopback servers reached by
// name through [sidecar.resolve].
type hostsEnv struct {
	tp     *testProxy
	client *http.Client
	hosts  map[string]*upstream
}

// newHostsEnv configures format with formatTOML (the lines of its table),
// the given aliases of aliasKey (an upstream key, or "" for the format), and
// one server per host name in hosts. Threshold 2, reset 30 s.
func newHostsEnv(t *testing.T, format, formatTOML, aliasKey string, aliases []string, hosts map[string]http.HandlerFunc) *hostsEnv {
	t.Helper()
	e := &hostsEnv{hosts: map[string]*upstream{}}
	resolve := ""
	for name, h := range hosts {
		e.hosts[name] = newUpstream(t, h)
		resolve += fmt.Sprintf("%q = %q\n", name+":80", strings.TrimPrefix(e.hosts[name].URL, "http://"))
	}
	quoted := make([]string, len(aliases))
	for i, a := range aliases {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	e.tp = newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 2
reset_timeout = 30
[registries]
enable = %q
[%s]
%s
[sidecar.aliases]
%q = [%s]
[sidecar.resolve]
%s`, format, format, formatTOML, aliasKeyOr(aliasKey, format), strings.Join(quoted, ", "), resolve), nil)
	e.client = proxyClient(t, e.tp, nil)
	return e
}

func aliasKeyOr(key, format string) string {
	if key == "" {
		return format
	}
	return key
}

// blackhole never answers: the request waits until the proxy gives up.
func blackhole(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func serveText(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, s) }
}

// TestHealthPageHostDownFileHostUp: pypi.org black-holed while
// files.pythonhosted.org serves. Every pip run fails a page and succeeds on
// a file; the page host's breaker must still open at its threshold, and
// files keep being served while it is open.
func TestHealthPageHostDownFileHostUp(t *testing.T) {
	e := newHostsEnv(t, "pypi", "proxy = \"http://pypi.test/simple\"\nproxy_timeout = 1", "", []string{"files.test"},
		map[string]http.HandlerFunc{"pypi.test": blackhole, "files.test": serveText("wheel")})
	pageKey := "pypi:http://pypi.test/simple"
	for run := range 2 {
		if resp, _ := getURL(t, e.client, "http://pypi.test/simple/requests/"); resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("run %d: page %d, want 504", run, resp.StatusCode)
		}
		if resp, body := getURL(t, e.client, "http://files.test/packages/requests.whl"); resp.StatusCode != 200 || body != "wheel" {
			t.Fatalf("run %d: file %d %q", run, resp.StatusCode, body)
		}
	}
	if s := breakerOf(t, e.tp, pageKey); s.State != breakerstate.Open {
		t.Fatalf("page host after two failed runs: %s with %d failures, want open", s.State, s.FailureCount)
	}
	// The open breaker answers for the page host: the black hole is not
	// asked (and so not waited for).
	pageHits := e.hosts["pypi.test"].hits.Load()
	resp, _ := getURL(t, e.client, "http://pypi.test/simple/requests/")
	if resp.StatusCode != http.StatusServiceUnavailable || e.hosts["pypi.test"].hits.Load() != pageHits {
		t.Fatalf("page with its breaker open: %d, page host asked %d more times; want 503 and not asked",
			resp.StatusCode, e.hosts["pypi.test"].hits.Load()-pageHits)
	}
	if resp, body := getURL(t, e.client, "http://files.test/packages/requests.whl"); resp.StatusCode != 200 || body != "wheel" {
		t.Fatalf("file while the page host is open: %d %q, want it served", resp.StatusCode, body)
	}
	fileKey := pageKey + "@files.test"
	if s := breakerOf(t, e.tp, fileKey); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("file host breaker %s: %s, %d failures", fileKey, s.State, s.FailureCount)
	}
	// /breakers says which host each key is; /health's pypi status is the
	// worst of its hosts' breakers.
	if v := breakerViewOf(t, e.tp, fileKey); v.Host != "files.test" || v.Upstream != pageKey || v.State != "closed" {
		t.Fatalf("/breakers shows %s as %+v, want closed host files.test of %s", fileKey, v, pageKey)
	}
	_, health := ixAdmin(t, e.tp, "GET", "/health", "")
	var h struct {
		Upstreams map[string]struct {
			Status   string
			Breakers map[string]struct{ Status string }
		}
	}
	if err := json.Unmarshal([]byte(health), &h); err != nil {
		t.Fatal(err)
	}
	if pypi := h.Upstreams["pypi"]; pypi.Status != "open" || pypi.Breakers[fileKey].Status != "closed" {
		t.Fatalf("/health pypi: %+v", pypi)
	}
}

// TestHealthCargoIndexDownStaticUp: index.crates.io black-holed while
// static.crates.io serves the downloads: the index host's breaker opens.
func TestHealthCargoIndexDownStaticUp(t *testing.T) {
	e := newHostsEnv(t, "cargo", "proxy = \"http://crates.test\"\nproxy_timeout = 1", "",
		[]string{"index.crates.test", "static.crates.test"}, map[string]http.HandlerFunc{
			"crates.test": serveText("api"), "index.crates.test": blackhole, "static.crates.test": serveText("crate")})
	for run := range 2 {
		if resp, _ := getURL(t, e.client, "http://index.crates.test/se/rd/serde"); resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("run %d: index %d, want 504", run, resp.StatusCode)
		}
		if resp, body := getURL(t, e.client, "http://static.crates.test/crates/serde/serde-1.0.0.crate"); resp.StatusCode != 200 || body != "crate" {
			t.Fatalf("run %d: download %d %q", run, resp.StatusCode, body)
		}
	}
	if s := breakerOf(t, e.tp, "cargo@index.crates.test"); s.State != breakerstate.Open {
		t.Fatalf("index host: %s with %d failures, want open", s.State, s.FailureCount)
	}
	for _, key := range []string{"cargo", "cargo@static.crates.test"} {
		if s := breakerOf(t, e.tp, key); s.State != breakerstate.Closed || s.FailureCount != 0 {
			t.Fatalf("%s: %s with %d failures, want closed and clean", key, s.State, s.FailureCount)
		}
	}
}

// TestHealthDockerRealmDownGoesToTheNextRegistry: the hub itself answers,
// but its token realm is down, so its clients cannot authenticate: once the
// realm host's breaker opens, the hub counts as open and pulls are served by
// the next registry.
func TestHealthDockerRealmDownGoesToTheNextRegistry(t *testing.T) {
	challenge := `Bearer realm="http://auth.hub.test/token",service="hub.test"`
	hosts := map[string]http.HandlerFunc{
		"hub.test": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Www-Authenticate", challenge)
			w.WriteHeader(http.StatusUnauthorized)
		},
		"auth.hub.test": blackhole,
		"mirror.test": func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "from mirror "+r.URL.Path)
		},
	}
	e := newHostsEnv(t, "docker", `proxy_timeout = 1
[[docker.upstreams]]
url = "http://hub.test"
[[docker.upstreams]]
url = "http://mirror.test"`, "docker:http://hub.test", []string{"auth.hub.test"}, hosts)
	const hub, mirror = "docker:http://hub.test", "docker:http://mirror.test"
	realm := hub + "@auth.hub.test"
	// The ping teaches the proxy where the hub's realm is.
	if resp, _ := getURL(t, e.client, "http://hub.test/v2/"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ping: %d, want the hub's 401", resp.StatusCode)
	}
	for i := range 2 {
		if resp, _ := getURL(t, e.client, "http://auth.hub.test/token?service=hub.test&scope=repository:lib/x:pull"); resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("token request %d: %d, want 504", i, resp.StatusCode)
		}
	}
	if s := breakerOf(t, e.tp, realm); s.State != breakerstate.Open {
		t.Fatalf("realm breaker %s: %s, want open", realm, s.State)
	}
	resp, body := getURL(t, e.client, "http://hub.test/v2/lib/x/manifests/1")
	if resp.StatusCode != 200 || body != "from mirror /v2/lib/x/manifests/1" || resp.Header.Get("X-Nora-Upstream") != mirror {
		t.Fatalf("manifest with the realm down: %d %q (served by %q), want the mirror's", resp.StatusCode, body,
			resp.Header.Get("X-Nora-Upstream"))
	}
	if resp, body := getURL(t, e.client, "http://hub.test/v2/"); resp.StatusCode != 200 || body != "from mirror /v2/" {
		t.Fatalf("ping with the realm down: %d %q, want the mirror's", resp.StatusCode, body)
	}
	if s := breakerOf(t, e.tp, hub); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("the hub itself answered all along, yet its breaker is %s with %d failures", s.State, s.FailureCount)
	}
}
