package proxy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// A docker pull of an image pulled before works from stale copies when the
// registry, its token realm and the storage its blobs redirect to are all
// down (docs/behaviour.md §6.1): the ping, the token, the manifest and the
// blob bytes (kept by digest, whichever host served them). Bearer tokens are
// new on every pull; copies are kept by who obtained the token, so a private
// image stays private.

// fakeHub is a registry in Docker Hub's shape: bearer tokens from its realm,
// blobs redirected to a CDN with a signature that changes every time.
type fakeHub struct {
	down atomic.Bool

	mu     sync.Mutex
	tokens map[string]string // token → user ("" anonymous)
	sigs   map[string]string // valid CDN signatures → blob digest
	blobs  map[string][]byte // digest → bytes

	cdnSawAuthorization atomic.Bool
	hub, realm, cdn     *upstream
}

const privateRepo = "alice/secret-app"

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{tokens: map[string]string{}, sigs: map[string]string{}, blobs: map[string][]byte{}}
	h.hub = newUpstream(t, h.serveRegistry)
	h.realm = newUpstream(t, h.serveRealm)
	h.cdn = newUpstream(t, h.serveCDN)
	return h
}

func randomHex() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *fakeHub) addBlob(b []byte) string {
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	h.mu.Lock()
	h.blobs[d] = b
	h.mu.Unlock()
	return d
}

func (h *fakeHub) serveRealm(w http.ResponseWriter, r *http.Request) {
	if h.down.Load() {
		http.Error(w, "realm down", http.StatusServiceUnavailable)
		return
	}
	user := ""
	if u, p, ok := r.BasicAuth(); ok {
		if u != "alice" || p != "pw" {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		user = u
	}
	tok := randomHex()
	h.mu.Lock()
	h.tokens[tok] = user
	h.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_in": 300})
}

func (h *fakeHub) serveRegistry(w http.ResponseWriter, r *http.Request) {
	if h.down.Load() {
		http.Error(w, "registry down", http.StatusServiceUnavailable)
		return
	}
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	h.mu.Lock()
	user, valid := h.tokens[tok]
	h.mu.Unlock()
	repo := strings.TrimPrefix(r.URL.Path, "/v2/")
	repo, _, _ = strings.Cut(repo, "/manifests/")
	repo, _, _ = strings.Cut(repo, "/blobs/")
	if !valid || (strings.HasPrefix(r.URL.Path, "/v2/"+privateRepo+"/") && user != "alice") {
		w.Header().Set("Www-Authenticate", fmt.Sprintf(`Bearer realm="http://auth.hub.test/token",service="hub.test",scope="repository:%s:pull"`, repo))
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
		return
	}
	switch {
	case strings.Contains(r.URL.Path, "/manifests/"):
		h.mu.Lock()
		var layer string
		for d := range h.blobs {
			if len(h.blobs[d]) > 0 && (strings.Contains(r.URL.Path, privateRepo) == strings.HasPrefix(string(h.blobs[d]), "private")) {
				layer = d
			}
		}
		h.mu.Unlock()
		body := fmt.Sprintf(`{"schemaVersion":2,"layers":[{"digest":%q}]}`, layer)
		sum := sha256.Sum256([]byte(body))
		w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
		w.Header().Set("Docker-Content-Digest", "sha256:"+hex.EncodeToString(sum[:]))
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		if r.Method != http.MethodHead {
			io.WriteString(w, body)
		}
	case strings.Contains(r.URL.Path, "/blobs/"):
		d := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		sig := randomHex()
		h.mu.Lock()
		h.sigs[sig] = d
		h.mu.Unlock()
		http.Redirect(w, r, "http://cdn.hub.test/blobs/"+d+"?sig="+sig, http.StatusTemporaryRedirect)
	default:
		io.WriteString(w, "{}")
	}
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		h.cdnSawAuthorization.Store(true)
	}
	if h.down.Load() {
		http.Error(w, "cdn down", http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	d, ok := h.sigs[r.URL.Query().Get("sig")]
	b := h.blobs[d]
	h.mu.Unlock()
	if !ok || !strings.HasSuffix(r.URL.Path, d) {
		http.Error(w, "bad signature", http.StatusForbidden)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(b)
}

// dockerDo sends one request with hdr through c and returns the answer with
// its body read.
func dockerDo(c *http.Client, method, u string, hdr http.Header) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(method, u, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// pull does what a docker client does, through c: ping, token (as user, ""
// for anonymous), manifest, blob via its redirect; it returns the layer's
// bytes after checking them against their digest.
func pull(c *http.Client, repo, user string) ([]byte, error) {
	resp, _, err := dockerDo(c, http.MethodGet, "http://hub.test/v2/", nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return nil, fmt.Errorf("ping: %v %v", statusOf(resp), err)
	}
	tokenURL := "http://auth.hub.test/token?service=hub.test&scope=" + url.QueryEscape("repository:"+repo+":pull")
	hdr := http.Header{}
	if user != "" {
		req, _ := http.NewRequest("GET", tokenURL, nil)
		req.SetBasicAuth(user, "pw")
		hdr["Authorization"] = req.Header["Authorization"]
	}
	resp, body, err := dockerDo(c, http.MethodGet, tokenURL, hdr)
	if err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("token: %v %v", statusOf(resp), err)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal(body, &tok); err != nil || tok.Token == "" {
		return nil, fmt.Errorf("token answer %q", body)
	}
	auth := http.Header{"Authorization": {"Bearer " + tok.Token}, "Accept": {"application/vnd.oci.image.manifest.v1+json"}}
	resp, body, err = dockerDo(c, http.MethodGet, "http://hub.test/v2/"+repo+"/manifests/1", auth)
	if err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("manifest: %v %v", statusOf(resp), err)
	}
	var m struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(body, &m); err != nil || len(m.Layers) != 1 {
		return nil, fmt.Errorf("manifest %q", body)
	}
	digest := m.Layers[0].Digest
	resp, body, err = dockerDo(c, http.MethodGet, "http://hub.test/v2/"+repo+"/blobs/"+digest, http.Header{"Authorization": auth["Authorization"]})
	if err == nil && resp.StatusCode == http.StatusTemporaryRedirect {
		resp, body, err = dockerDo(c, http.MethodGet, resp.Header.Get("Location"), nil) // a client follows without the token
	}
	if err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("blob: %v %v", statusOf(resp), err)
	}
	if sum := sha256.Sum256(body); "sha256:"+hex.EncodeToString(sum[:]) != digest {
		return nil, errors.New("blob bytes do not match their digest")
	}
	return body, nil
}

// pullLikeContainerd does what containerd does: no ping; HEAD the tag
// without a token (401), get a token, HEAD the tag with it to learn the
// digest, GET the manifest by digest, then the blob.
func pullLikeContainerd(c *http.Client, repo string) ([]byte, error) {
	accept := http.Header{"Accept": {"application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json"}}
	tag := "http://hub.test/v2/" + repo + "/manifests/1"
	resp, _, err := dockerDo(c, http.MethodHead, tag, accept)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Www-Authenticate") == "" {
		return nil, fmt.Errorf("HEAD tag without a token: %v %v", statusOf(resp), err)
	}
	resp, body, err := dockerDo(c, http.MethodGet, "http://auth.hub.test/token?service=hub.test&scope="+
		url.QueryEscape("repository:"+repo+":pull"), nil)
	var tok struct{ Token string }
	if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &tok) != nil {
		return nil, fmt.Errorf("token: %v %v", statusOf(resp), err)
	}
	auth := accept.Clone()
	auth.Set("Authorization", "Bearer "+tok.Token)
	resp, _, err = dockerDo(c, http.MethodHead, tag, auth)
	digest := ""
	if resp != nil {
		digest = resp.Header.Get("Docker-Content-Digest")
	}
	if err != nil || resp.StatusCode != 200 || digest == "" || resp.ContentLength <= 0 {
		return nil, fmt.Errorf("HEAD tag with a token: %v %v (digest %q)", statusOf(resp), err, digest)
	}
	resp, body, err = dockerDo(c, http.MethodGet, "http://hub.test/v2/"+repo+"/manifests/"+digest, auth)
	if err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("manifest by digest: %v %v", statusOf(resp), err)
	}
	var m struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(body, &m); err != nil || len(m.Layers) != 1 {
		return nil, fmt.Errorf("manifest %q", body)
	}
	resp, body, err = dockerDo(c, http.MethodGet, "http://hub.test/v2/"+repo+"/blobs/"+m.Layers[0].Digest,
		http.Header{"Authorization": auth["Authorization"]})
	if err == nil && resp.StatusCode == http.StatusTemporaryRedirect {
		resp, body, err = dockerDo(c, http.MethodGet, resp.Header.Get("Location"), nil)
	}
	if err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("blob: %v %v", statusOf(resp), err)
	}
	return body, nil
}

func TestDockerPullFromStaleCopies(t *testing.T) {
	h := newFakeHub(t)
	public := []byte("public layer " + randomHex())
	h.addBlob(public)
	h.addBlob([]byte("private layer " + randomHex()))
	addr := func(u *upstream) string { return strings.TrimPrefix(u.URL, "http://") }
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "docker"
[[docker.upstreams]]
url = "http://hub.test"
[sidecar]
stale_dir = %q
[sidecar.aliases]
"docker:http://hub.test" = ["auth.hub.test", "cdn.hub.test"]
[sidecar.resolve]
"hub.test:80" = %q
"auth.hub.test:80" = %q
"cdn.hub.test:80" = %q
`, filepath.Join(t.TempDir(), "stale"), addr(h.hub), addr(h.realm), addr(h.cdn)), nil)
	newClient := func() *http.Client { return proxyClient(t, tp, nil) }
	// pulls makes the four pulls: public (docker, then containerd style),
	// private by its owner, private anonymously; only the last may fail,
	// and it must (it returns the last one's error).
	pulls := func(when string) error {
		if got, err := pull(newClient(), "library/app", ""); err != nil || string(got) != string(public) {
			t.Fatalf("public pull %s: %v", when, err)
		}
		if got, err := pullLikeContainerd(newClient(), "library/app"); err != nil || string(got) != string(public) {
			t.Fatalf("containerd-style pull %s: %v", when, err)
		}
		if _, err := pull(newClient(), privateRepo, "alice"); err != nil {
			t.Fatalf("private pull by its owner %s: %v", when, err)
		}
		_, err := pull(newClient(), privateRepo, "")
		if err == nil {
			t.Fatalf("an anonymous client pulled the private image %s", when)
		}
		return err
	}
	if err := pulls("while healthy"); !strings.HasPrefix(err.Error(), "manifest: 401") {
		t.Fatalf("anonymous private pull while healthy: %v, want the registry's 401 for the manifest", err)
	}
	// Each copy lands after its body, in the background: wait for the
	// whole set the outage pulls need, which is exactly these 11 entries:
	// the ping (401); the tokens for library/app, for alice's private repo
	// and for the anonymous try at it; library/app's manifest by tag (GET,
	// HEAD with a token and HEAD without one, a 401) and by digest;
	// alice's manifest; the public and the private blob (by digest). The
	// blob redirects are not kept. Starting the outage at fewer would let
	// it race the last commit.
	testkit.PollUntil(t, 10*time.Second, func() bool { _, n := tp.stale.Stats(); return n == 11 })

	h.down.Store(true)
	// The anonymous pull gets the ping and its own token from stale copies,
	// then nothing for the private manifest: alice's copy is hers.
	if err := pulls("with registry, realm and storage down"); !strings.HasPrefix(err.Error(), "manifest:") {
		t.Fatalf("anonymous private pull with everything down: %v, want it refused at the manifest", err)
	}
	if h.cdnSawAuthorization.Load() {
		t.Fatal("the CDN received an Authorization header")
	}
	// The outage pulls that worked took every answer from stale copies:
	// the docker-style ones ping, token, manifest and blob (4 each, the
	// public and alice's), the containerd-style one both HEADs, token,
	// manifest and blob (5); the anonymous one its ping and token (2).
	_, metrics := ixAdmin(t, tp, "GET", "/metrics", "")
	served := 0.0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "nora_sidecar_stale_served_total{") {
			var v float64
			fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
			served += v
		}
	}
	if served != 15 {
		t.Fatalf("%v stale copies served, want 4+5+4+2 = 15", served)
	}
}

// TestDockerStaleManifestByDigestMatchesItsBytes: a registry whose
// Docker-Content-Digest names other bytes than the manifest it sends (a
// broken or hostile upstream) must not make the stale cache serve those
// bytes to a GET by that digest during an outage: a digest names the bytes
// (docs/behaviour.md §6.1). The copy still answers its tag.
func TestDockerStaleManifestByDigestMatchesItsBytes(t *testing.T) {
	const body = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`
	claimed := sha256.Sum256([]byte("some other manifest"))
	claimedDigest := "sha256:" + hex.EncodeToString(claimed[:])
	var down atomic.Bool
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if strings.Contains(r.URL.Path, "/manifests/") {
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", claimedDigest)
			io.WriteString(w, body)
			return
		}
		io.WriteString(w, "{}")
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
failure_threshold = 3
[registries]
enable = "docker"
[[docker.upstreams]]
url = %q
[sidecar]
stale_dir = %q
`, up.URL, filepath.Join(t.TempDir(), "stale")), nil)
	c := proxyClient(t, tp, nil)
	accept := http.Header{"Accept": {"application/vnd.oci.image.manifest.v1+json"}}
	tag := up.URL + "/v2/library/app/manifests/latest"
	if resp, got := request(t, c, "GET", tag, accept); resp.StatusCode != 200 || got != body {
		t.Fatalf("by tag: %d %q", resp.StatusCode, got)
	}
	testkit.PollUntil(t, 10*time.Second, func() bool { _, n := tp.stale.Stats(); return n >= 1 })
	down.Store(true)
	if resp, got := request(t, c, "GET", up.URL+"/v2/library/app/manifests/"+claimedDigest, accept); resp.StatusCode == 200 {
		sum := sha256.Sum256([]byte(got))
		t.Errorf("manifest by digest %s during the outage: 200 (stale %q) with bytes that hash to sha256:%s",
			claimedDigest, resp.Header.Get("X-Nora-Stale"), hex.EncodeToString(sum[:]))
	}
	if resp, got := request(t, c, "GET", tag, accept); resp.Header.Get("X-Nora-Stale") != "true" || got != body {
		t.Errorf("by tag during the outage: %d %q, want the stale copy", resp.StatusCode, got)
	}
}
