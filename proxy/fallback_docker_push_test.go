package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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

// TestDockerPushersTagCheckIsTheAddressedRegistrys: before pushing a tag,
// crane (and skopeo) HEAD it at the registry they push to and skip the
// push when it already names the digest they push. The proxy sees the
// token request, so it knows a token obtained with a push scope for the
// repository: a HEAD of a manifest carrying such a token is part of a push
// and gets the addressed registry's own answer, never another registry's
// (whose tag may name that digest while the addressed one has nothing).
// A HEAD with a token obtained to pull still fails over, as a pull does.
func TestDockerPushersTagCheckIsTheAddressedRegistrys(t *testing.T) {
	var a *upstream
	a = newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			scope := r.URL.Query().Get("scope")
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"token":"tok-for-%s","expires_in":300}`, strings.NewReplacer(":", "-", "/", "-", ",", "-").Replace(scope))
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer tok-for-") {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="a"`, a.URL))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable) // a passing fault
	})
	var bHeads atomic.Int64
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		bHeads.Add(1)
		w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("b", 64))
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.WriteHeader(http.StatusOK)
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 100
[registries]
enable = "docker"
[[docker.upstreams]]
url = "%s"
[[docker.upstreams]]
url = "%s"
`, a.URL, b.URL), nil)
	c := proxyClient(t, tp, nil)
	token := func(scope string) string {
		t.Helper()
		resp, body := getURL(t, c, a.URL+"/token?service=a&scope="+scope)
		var tok struct{ Token string }
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &tok) != nil || tok.Token == "" {
			t.Fatalf("token for %s: %d %q", scope, resp.StatusCode, body)
		}
		return tok.Token
	}
	head := func(tok string) *http.Response {
		t.Helper()
		resp, _ := request(t, c, http.MethodHead, a.URL+"/v2/team/app/manifests/1",
			fbHeader("Accept", manifestAccept, "Authorization", "Bearer "+tok))
		return resp
	}

	push := token("repository:team/app:pull,push")
	if resp := head(push); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Nora-Upstream") != "" {
		t.Errorf("a pusher's HEAD of its tag while A fails: %d %v, want A's own 503", resp.StatusCode, resp.Header)
	}
	if n := bHeads.Load(); n != 0 {
		t.Errorf("registry B was asked %d HEADs of a tag being pushed to A", n)
	}
	// Another repository's push token makes no push of team/app.
	other := token("repository:team/other:pull,push")
	if resp := head(other); resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") == "" {
		t.Errorf("HEAD with a token to push another repository: %d %v, want B's answer", resp.StatusCode, resp.Header)
	}
	pull := token("repository:team/app:pull")
	if resp := head(pull); resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") == "" {
		t.Errorf("a puller's HEAD while A fails: %d %v, want B's answer", resp.StatusCode, resp.Header)
	}
}
