package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/stale"
)

// TestDockerBlobExistenceCheckIsTheAddressedRegistrys: a HEAD of a blob is
// a pusher's question to the registry it pushes to — docker push, crane,
// skopeo, oras and helm each ask it before uploading a blob and skip the
// upload when the answer is 200 — and no puller asks it. Another
// registry's 200, or a stale copy of the blob, is no answer about the
// addressed one: the pusher would skip the upload and the registry refuse
// the manifest for a blob it never got (MANIFEST_BLOB_UNKNOWN). So such a
// HEAD gets the addressed registry's own answer (its 5xx here, which
// pushers retry), or the proxy's 503 while its breaker is open; the other
// registry is not asked. A GET of the same blob still fails over (a pull).
func TestDockerBlobExistenceCheckIsTheAddressedRegistrys(t *testing.T) {
	sum := sha256.Sum256([]byte("blob"))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	blob := "/v2/team/app/blobs/" + digest
	var failing atomic.Bool
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Docker-Content-Digest", digest)
		w.Header().Set("Content-Length", "4")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			fmt.Fprint(w, "blob")
		}
	})
	var bHeads atomic.Int64
	var bFailing atomic.Bool
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			bHeads.Add(1)
		}
		if bFailing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Length", "4")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			fmt.Fprint(w, "blob")
		}
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
[sidecar]
stale_dir = %q
`, a.URL, b.URL, t.TempDir()), nil)
	keys := fbKeys(t, tp, "docker")
	c := proxyClient(t, tp, nil)

	// A pull stored the blob while A was healthy.
	if resp, body := getURL(t, c, a.URL+blob); resp.StatusCode != 200 || body != "blob" {
		t.Fatalf("warm-up GET: %d %q", resp.StatusCode, body)
	}
	sc := tp.Config().Sidecar
	ref, ok := stale.Policy{Mode: sc.StaleAuthenticated, CredentialHeaders: sc.CredentialHeaders}.BlobRef(digest, "", nil)
	if !ok || !testkit.Poll(10*time.Second, func() bool {
		e, ok := tp.stale.Find(ref)
		if ok {
			e.Body.Close()
		}
		return ok
	}) {
		t.Fatal("the blob never reached the stale cache")
	}

	failing.Store(true)
	resp, _ := request(t, c, http.MethodHead, a.URL+blob, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Upstream") != "" ||
		resp.Header.Get("X-Nora-Stale") != "" {
		t.Errorf("HEAD of a blob while A fails: %d %v, want A's own 503", resp.StatusCode, resp.Header)
	}
	if n := bHeads.Load(); n != 0 {
		t.Errorf("registry B was asked %d HEADs of a blob pushed to A", n)
	}

	fbForceOpen(t, tp, keys[0])
	tp.Clock.Advance(time.Second)
	resp, _ = request(t, c, http.MethodHead, a.URL+blob, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Breaker-Key") != keys[0] ||
		resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Nora-Stale") != "" {
		t.Errorf("HEAD of a blob while A's breaker is open: %d %v, want the proxy's 503 for A", resp.StatusCode, resp.Header)
	}
	if n := bHeads.Load(); n != 0 {
		t.Errorf("registry B was asked %d HEADs of a blob pushed to A", n)
	}

	// A pull of the blob still goes on to B.
	if resp, body := getURL(t, c, a.URL+blob); resp.StatusCode != 200 || body != "blob" ||
		resp.Header.Get("X-Nora-Upstream") != keys[1] {
		t.Errorf("GET of the blob while A is open: %d %q %v, want B's answer", resp.StatusCode, body, resp.Header)
	}

	// B failing too: the pull is served the stale copy, the existence
	// check is not.
	bFailing.Store(true)
	if resp, body := getURL(t, c, a.URL+blob); resp.StatusCode != 200 || body != "blob" ||
		resp.Header.Get("X-Nora-Stale") != "true" {
		t.Errorf("GET of the blob while A is open and B fails: %d %q %v, want the stale copy", resp.StatusCode, body, resp.Header)
	}
	resp, _ = request(t, c, http.MethodHead, a.URL+blob, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Stale") != "" {
		t.Errorf("HEAD of a blob while A is open and B fails: %d %v, want the proxy's 503", resp.StatusCode, resp.Header)
	}
}
