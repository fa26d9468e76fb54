package proxy

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// TestNPMWritersReadIsTheAddressedRegistrys: npm deprecate, npm unpublish
// <pkg>@<version>, npm owner and npm access read a package's document with
// GET /<pkg>?write=true, change it and PUT the whole document back to the
// registry they read it from. Another registry's document, or a stale
// copy, PUT back over the package would undo whatever it lacks (versions
// published since, a deprecation, an owner): such a read gets the
// addressed registry's own answer (its 503 here, which npm retries), or
// the proxy's 503 while its breaker is open; the next registry is not
// asked and no stale copy is served. An install's GET of the same
// package still fails over.
func TestNPMWritersReadIsTheAddressedRegistrys(t *testing.T) {
	const doc = `{"_id":"left-pad","_rev":"7-a","name":"left-pad","versions":{"1.0.0":{},"1.1.0":{}}}`
	var failing atomic.Bool
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, doc)
	})
	var bWrites atomic.Int64
	var bFailing atomic.Bool
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("write") {
			bWrites.Add(1)
		}
		if bFailing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"_id":"left-pad","_rev":"3-b","name":"left-pad","versions":{"1.0.0":{}}}`)
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "npm"
[npm]
proxies = ["%s", "%s"]
[sidecar]
stale_dir = %q
`, a.URL, b.URL, t.TempDir()), nil)
	keys := fbKeys(t, tp, "npm")
	c := proxyClient(t, tp, nil)
	write := a.URL + "/left-pad?write=true"
	accept := fbHeader("Accept", "application/json")

	// npm read the document for writing once while A was healthy, and an
	// install read the package.
	for _, u := range []string{write, a.URL + "/left-pad"} {
		if resp, body := request(t, c, http.MethodGet, u, accept); resp.StatusCode != 200 || body != doc {
			t.Fatalf("warm-up %s: %d %q", u, resp.StatusCode, body)
		}
		fbWaitStored(t, tp, "npm", u, accept)
	}

	failing.Store(true)
	resp, body := request(t, c, http.MethodGet, write, accept)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Upstream") != "" ||
		resp.Header.Get("X-Nora-Stale") != "" {
		t.Errorf("GET ?write=true while A fails: %d %v %q, want A's own 503", resp.StatusCode, resp.Header, body)
	}

	fbForceOpen(t, tp, keys[0])
	tp.Clock.Advance(time.Second)
	resp, body = request(t, c, http.MethodGet, write, accept)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Breaker-Key") != keys[0] ||
		resp.Header.Get("X-Nora-Stale") != "" {
		t.Errorf("GET ?write=true while A's breaker is open: %d %v %q, want the proxy's 503 for A", resp.StatusCode, resp.Header, body)
	}
	bFailing.Store(true)
	resp, body = request(t, c, http.MethodGet, write, accept)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Stale") != "" {
		t.Errorf("GET ?write=true while A is open and B fails: %d %v %q, want the proxy's 503, no stale copy",
			resp.StatusCode, resp.Header, body)
	}
	if n := bWrites.Load(); n != 0 {
		t.Errorf("registry B was asked %d reads for writing a package of A", n)
	}
	// An install is served the stale copy as before.
	if resp, body := request(t, c, http.MethodGet, a.URL+"/left-pad", accept); resp.StatusCode != 200 || body != doc ||
		resp.Header.Get("X-Nora-Stale") != "true" {
		t.Errorf("install GET while A is open and B fails: %d %v %q, want the stale copy", resp.StatusCode, resp.Header, body)
	}
}
