package proxy

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
)

// TestStaleCopyServesEverySpellingOfAnEscape: a scoped packument stored for
// npm and yarn (/@acme%2futil) is pnpm's too (/@acme%2Futil) once the
// registry is down (issue 22, point 4: pnpm got 503, ERR_PNPM_FETCH_502).
func TestStaleCopyServesEverySpellingOfAnEscape(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"name":"@acme/util"}`)
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "npm"
[npm]
proxy = "%s"
[sidecar]
stale_dir = %q
`, up.URL, filepath.Join(t.TempDir(), "stale")), nil)
	c := proxyClient(t, tp, nil)
	accept := http.Header{"Accept": {"application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"}}
	if resp, _ := request(t, c, "GET", up.URL+"/@acme%2futil", accept); resp.StatusCode != 200 {
		t.Fatalf("healthy: %d", resp.StatusCode)
	}
	fbWaitStored(t, tp, "npm", up.URL+"/@acme%2futil", accept)
	fbForceOpen(t, tp, "npm:"+up.URL)
	for _, spelling := range []string{"/@acme%2Futil", "/@acme%2futil"} {
		resp, body := request(t, c, "GET", up.URL+spelling, accept)
		if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Stale") != "true" || body != `{"name":"@acme/util"}` {
			t.Errorf("%s with the registry down: %d stale=%q %q, want the stored packument", spelling,
				resp.StatusCode, resp.Header.Get("X-Nora-Stale"), body)
		}
	}
}
