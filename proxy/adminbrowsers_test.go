package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// adminCall sends one request to tp's admin listener with the Host and the
// headers given ("" Host: the listener's address) and returns the status
// and the start of the body.
func adminCall(t *testing.T, tp *testProxy, method, path, host string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, tp.AdminURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 120)) // enough to say why; /metrics is long
	return resp.StatusCode, string(b)
}

// adminPort is the port of tp's admin listener.
func adminPort(t *testing.T, tp *testProxy) string {
	t.Helper()
	u, err := url.Parse(tp.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// TestAdminForceRefusesCrossSiteBrowserRequests: a page of another site
// cannot make the operator's browser force a breaker (docs/behaviour.md §7):
// a POST the browser marks cross-site (Sec-Fetch-Site) or sends with a
// foreign Origin is refused 403 and changes nothing, with no admin token
// set. The same POST from curl (neither header) or from the status page
// itself (same origin) still forces.
func TestAdminForceRefusesCrossSiteBrowserRequests(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	key := ixKey(up.URL)
	force := "/breakers/force?key=" + url.QueryEscape(key) + "&state=open"
	for name, hdr := range map[string]map[string]string{
		"Sec-Fetch-Site cross-site": {"Sec-Fetch-Site": "cross-site"},
		"Sec-Fetch-Site same-site":  {"Sec-Fetch-Site": "same-site"},
		"foreign Origin":            {"Origin": "https://evil.example"},
		"foreign Origin, same port": {"Origin": "http://evil.example:" + adminPort(t, tp)},
	} {
		if code, body := adminCall(t, tp, "POST", force, "", hdr); code != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", name, code, body)
		}
		if b := breakerOf(t, tp, key); b.Forced != "" || b.State.String() != "closed" {
			t.Fatalf("%s: the breaker was changed: forced %q, state %s", name, b.Forced, b.State)
		}
	}
	// Reading is not guarded by this rule: a GET changes nothing.
	if code, _ := adminCall(t, tp, "GET", "/breakers", "", map[string]string{"Sec-Fetch-Site": "cross-site"}); code != 200 {
		t.Errorf("cross-site GET /breakers: %d, want 200", code)
	}
	for name, hdr := range map[string]map[string]string{
		"no browser headers":         nil,
		"Sec-Fetch-Site same-origin": {"Sec-Fetch-Site": "same-origin"},
		"same Origin":                {"Origin": tp.AdminURL},
	} {
		if code, body := adminCall(t, tp, "POST", force, "", hdr); code != 200 {
			t.Errorf("%s: %d %q, want 200", name, code, body)
		}
		if b := breakerOf(t, tp, key); b.Forced != "open" {
			t.Errorf("%s: forced %q, want open", name, b.Forced)
		}
		if err := tp.Breakers().Force(key, breakerstate.ModeAuto); err != nil { // back to auto for the next case
			t.Fatal(err)
		}
	}
}

// TestAdminOnLoopbackRefusesAForeignHostName: a page whose domain was
// rebound to 127.0.0.1 is same-origin with the admin listener for the
// browser, but its requests carry its own host name: on a loopback admin
// listener every route refuses a Host that is neither localhost nor an IP
// literal (docs/behaviour.md §7). curl, the status command, Prometheus and
// probes by address still get their answers.
func TestAdminOnLoopbackRefusesAForeignHostName(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	port := adminPort(t, tp)
	for _, path := range []string{"/breakers", "/breakers/history", "/", "/health", "/ready", "/metrics"} {
		for _, host := range []string{"evil.example:" + port, "evil.example", "EVIL.example.:" + port,
			"localhost.evil.example:" + port, "127.0.0.1.evil.example:" + port} {
			if code, body := adminCall(t, tp, "GET", path, host, nil); code != http.StatusForbidden {
				t.Errorf("GET %s with Host %s: %d %q, want 403", path, host, code, body)
			}
		}
	}
	for _, host := range []string{"", "localhost:" + port, "LocalHost:" + port, "localhost", "127.0.0.1:" + port,
		"[::1]:" + port, "10.1.2.3:" + port} {
		if code, body := adminCall(t, tp, "GET", "/breakers", host, nil); code != 200 {
			t.Errorf("GET /breakers with Host %q: %d %q, want 200", host, code, body)
		}
	}
	// A force with a rebound Host is refused too, and changes nothing.
	key := ixKey(up.URL)
	code, _ := adminCall(t, tp, "POST", "/breakers/force?key="+url.QueryEscape(key)+"&state=open",
		"evil.example:"+port, nil)
	if b := breakerOf(t, tp, key); code != http.StatusForbidden || b.Forced != "" {
		t.Fatalf("force with Host evil.example: %d, forced %q; want 403 and nothing forced", code, b.Forced)
	}
}

// TestAdminOffLoopbackLetsHostNamesThrough: the handler of an admin listener
// on another address (the Helm chart binds every interface, and Prometheus
// and probes name the pod by IP or service name) leaves the Host alone, and
// still refuses a cross-site force. Nothing but loopback is bound here, so
// the handler is given the address it would serve.
func TestAdminOffLoopbackLetsHostNamesThrough(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	for _, addr := range []net.Addr{&net.TCPAddr{IP: net.IPv4zero, Port: 9128}, &net.TCPAddr{IP: net.IPv6unspecified, Port: 9128},
		&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 9128}} {
		h := tp.AdminHandler(addr)
		serve := func(method, path, host string, hdr map[string]string) int {
			r := httptest.NewRequest(method, path, nil)
			r.Host = host
			for k, v := range hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		for _, path := range []string{"/metrics", "/health", "/ready", "/breakers"} {
			for _, host := range []string{"nora-breaker.default.svc:9128", "nora-breaker:9128", "10.1.2.3:9128"} {
				if code := serve("GET", path, host, nil); code != 200 {
					t.Errorf("listener %v: GET %s with Host %s: %d, want 200", addr, path, host, code)
				}
			}
		}
		force := "/breakers/force?key=" + url.QueryEscape(ixKey(up.URL)) + "&state=open"
		if code := serve("POST", force, "nora-breaker:9128", map[string]string{"Sec-Fetch-Site": "cross-site"}); code != 403 {
			t.Errorf("listener %v: cross-site force: %d, want 403", addr, code)
		}
		if b := breakerOf(t, tp, ixKey(up.URL)); b.Forced != "" {
			t.Fatalf("listener %v: a cross-site force forced %q", addr, b.Forced)
		}
	}
}
