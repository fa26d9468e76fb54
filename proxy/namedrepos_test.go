package proxy

import (
	"fmt"
	"net/http"
	"testing"
)

// TestNamedReposAreNotEachOthersCandidates: rpm and deb upstreams are named
// repositories ([rpm.proxies] epel = …, docker-ce = …), not mirrors of one
// another, and every one of them has /repodata/repomd.xml (or
// /dists/<suite>/InRelease) at its root: another repository's index is
// another key's signature over other packages. So when the addressed one
// fails its client gets that failure, and the other is never asked (nor
// its answer kept as the addressed URL's stale copy). On main the second
// repository's index answered for the first, and was kept for it.
func TestNamedReposAreNotEachOthersCandidates(t *testing.T) {
	for _, tc := range []struct{ format, path string }{
		{"rpm", "/repodata/repomd.xml"},
		{"deb", "/dists/bookworm/InRelease"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			first := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "bad gateway", http.StatusBadGateway)
			})
			second := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "index of the second repository for %s", r.URL.Path)
			})
			tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 100
[registries]
enable = %q
[%s.proxies]
first = "%s/first"
second = "%s/second"
[sidecar]
stale_dir = %q
`, tc.format, tc.format, first.URL, second.URL, t.TempDir()), nil)
			c := proxyClient(t, tp, nil)
			resp, body := request(t, c, http.MethodGet, first.URL+"/first"+tc.path, nil)
			if resp.StatusCode != http.StatusBadGateway || second.hits.Load() != 0 {
				t.Fatalf("%s of repository first: %d %q (X-Nora-Upstream %q), second asked %d times; want first's 502, second never asked",
					tc.path, resp.StatusCode, body, resp.Header.Get("X-Nora-Upstream"), second.hits.Load())
			}
		})
	}
}
