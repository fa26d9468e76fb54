package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// adminRoutes is every admin endpoint, with whether it stays open when an
// admin token is set (docs/behaviour.md §7), and the status it answers when
// allowed.
var adminRoutes = []struct {
	method, path string
	open         bool
	status       int
}{
	{"GET", "/metrics", true, 200},
	{"GET", "/health", true, 200},
	{"GET", "/ready", true, 200},
	{"GET", "/", false, 200},
	{"GET", "/breakers", false, 200},
	{"GET", "/breakers/history", false, 200},
	{"POST", "/breakers/force?key=npm:nope&state=open", false, 404},
	{"GET", "/no-such-page", false, 404},
}

func TestAdminTokenGuardsEveryRouteButProbes(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixTwoMaven(up.URL, "http://"+closedPort(t), "[sidecar]\nadmin_token = \"tok-9f2\"\n"), nil)
	for _, r := range adminRoutes {
		without, body := ixAdmin(t, tp, r.method, r.path, "")
		wrong, _ := ixAdmin(t, tp, r.method, r.path, "tok-9f")
		with, _ := ixAdmin(t, tp, r.method, r.path, "tok-9f2")
		switch {
		case r.open && (without.StatusCode != r.status || wrong.StatusCode != r.status):
			t.Errorf("%s %s is open: without token %d, wrong token %d; want %d", r.method, r.path,
				without.StatusCode, wrong.StatusCode, r.status)
		case !r.open && (without.StatusCode != 401 || wrong.StatusCode != 401):
			t.Errorf("%s %s: without token %d, wrong token %d; want 401", r.method, r.path,
				without.StatusCode, wrong.StatusCode)
		case !r.open && (!strings.Contains(without.Header.Get("WWW-Authenticate"), "Bearer") ||
			!strings.Contains(body, "admin token required")):
			t.Errorf("%s %s: 401 without a Bearer challenge: %v %s", r.method, r.path, without.Header, body)
		}
		if with.StatusCode != r.status {
			t.Errorf("%s %s with the token: %d, want %d", r.method, r.path, with.StatusCode, r.status)
		}
	}
	// The scheme name is case-insensitive (RFC 9110 §11.1); the token is not.
	for hdr, want := range map[string]int{"bearer tok-9f2": 200, "BEARER tok-9f2": 200, "Bearer TOK-9F2": 401,
		"Basic tok-9f2": 401, "Bearer": 401, "tok-9f2": 401, "Bearer  tok-9f2 ": 200} {
		req, _ := http.NewRequest("GET", tp.AdminURL+"/breakers", nil)
		req.Header.Set("Authorization", hdr)
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", hdr, resp.StatusCode, want)
		}
	}
}

func TestAdminWithoutTokenIsOpen(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixTwoMaven(up.URL, "http://"+closedPort(t), ""), nil)
	for _, r := range adminRoutes {
		if resp, _ := ixAdmin(t, tp, r.method, r.path, ""); resp.StatusCode != r.status {
			t.Errorf("%s %s without admin_token: %d, want %d", r.method, r.path, resp.StatusCode, r.status)
		}
	}
}

func TestAdminTokenFollowsReload(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	dead := "http://" + closedPort(t)
	tp := newTestProxy(t, ixTwoMaven(up.URL, dead, ""), nil)
	if resp, _ := ixAdmin(t, tp, "GET", "/breakers", ""); resp.StatusCode != 200 {
		t.Fatalf("before reload: %d", resp.StatusCode)
	}
	if _, err := tp.Reload(testkit.LoadConfig(t, ixTwoMaven(up.URL, dead, "[sidecar]\nadmin_token = \"new-tok\"\n"), nil)); err != nil {
		t.Fatal(err)
	}
	if resp, _ := ixAdmin(t, tp, "GET", "/breakers", ""); resp.StatusCode != 401 {
		t.Fatalf("after a reload that sets admin_token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := ixAdmin(t, tp, "GET", "/breakers", "new-tok"); resp.StatusCode != 200 {
		t.Fatalf("with the reloaded token: %d", resp.StatusCode)
	}
}
