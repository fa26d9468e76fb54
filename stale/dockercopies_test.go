package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Two docker clients ask for one image in their own ways (issue 27.2):
// skopeo pings /v2/, gets a token and GETs the manifest by tag with its
// Accept list (one header line per type); containerd never pings, HEADs the
// tag without a token (the 401 sends it to the realm), HEADs it again with a
// token, then GETs the manifest by digest, with another Accept list. A cache
// warmed by either serves the other.

const (
	skopeoAccept = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, " +
		"application/vnd.docker.distribution.manifest.v1+prettyjws, application/vnd.docker.distribution.manifest.v1+json, " +
		"application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json"
	ctrAccept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json, " +
		"application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, */*"

	regURL      = "https://reg.test/v2/"
	tagURL      = "https://reg.test/v2/team/app/manifests/1"
	testRealm   = `Bearer realm="https://auth.reg.test/token",service="reg.test"`
	scopedRealm = `Bearer realm="https://auth.reg.test/token",service="reg.test",scope="repository:team/app:pull"`
)

// testManifest is an image manifest and its digest.
var testManifest = `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}`

func manifestDigest() string {
	sum := sha256.Sum256([]byte(testManifest))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// dockerPolicy names credentials the way the docker format does: a bearer
// token stands for whoever obtained it ("anon" anonymously, "alice" with
// alice's password).
func dockerPolicy() Policy {
	return Policy{Credential: func(req *http.Request) (string, bool) {
		switch req.Header.Get("Authorization") {
		case "Bearer anon-token":
			return "", true
		case "Bearer alice-token":
			return "alice-credentials", true
		}
		return "", false
	}}
}

// dockerReq is a client's request: its method and URL, its token ("" for
// none) and its Accept lines.
func dockerReq(method, url, token string, accept ...string) *http.Request {
	req := httptest.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, a := range accept {
		req.Header.Add("Accept", a)
	}
	return req
}

// keep stores the registry's answer to req the way the loop does (a
// manifest's HEAD under its own ref) and waits for the commit.
func keep(t *testing.T, c *Cache, req *http.Request, status int, header http.Header, body string) {
	t.Helper()
	ref, ok := dockerPolicy().For(req, "docker")
	if !ok {
		t.Fatalf("%s %s: not cacheable", req.Method, req.URL)
	}
	if req.Method == http.MethodHead {
		ref = ref.HeadRef()
	}
	resp := &http.Response{StatusCode: status, Header: header.Clone(), Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body))}
	if req.Method == http.MethodHead {
		resp.Body = http.NoBody
	}
	if !c.StorableFor(ref, req, resp) {
		t.Fatalf("%s %s %d: not storable", req.Method, req.URL, status)
	}
	c.Store(ref, resp)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	c.commits.Wait()
}

// served is what the stale cache answers req with, looked up the way the
// loop does (a manifest's HEAD takes its own copy first, then the GET's),
// or nil.
func served(t *testing.T, c *Cache, req *http.Request) (*http.Response, string) {
	t.Helper()
	ref, ok := dockerPolicy().For(req, "docker")
	if !ok {
		t.Fatalf("%s %s: not cacheable", req.Method, req.URL)
	}
	e, found := (*Entry)(nil), false
	if req.Method == http.MethodHead && DockerManifest(req.URL.Path) {
		e, found = c.Find(ref.HeadRef())
	}
	if !found {
		e, found = c.Find(ref)
	}
	if !found {
		return nil, ""
	}
	resp := e.Response(req, c.now())
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func manifestHeader() http.Header {
	return http.Header{"Content-Type": {"application/vnd.oci.image.manifest.v1+json"},
		"Docker-Content-Digest": {manifestDigest()}, "Docker-Distribution-Api-Version": {"registry/2.0"}}
}

func challengeHeader(challenge string) http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Www-Authenticate": {challenge},
		"Docker-Distribution-Api-Version": {"registry/2.0"}}
}

// skopeoStores is what a skopeo copy leaves in the cache (token, as
// whoever token stands for).
func skopeoStores(t *testing.T, c *Cache, token string) {
	keep(t, c, dockerReq(http.MethodGet, regURL, ""), http.StatusUnauthorized, challengeHeader(testRealm), `{"errors":[]}`)
	keep(t, c, dockerReq(http.MethodGet, tagURL, token, strings.Split(skopeoAccept, ", ")...), http.StatusOK,
		manifestHeader(), testManifest)
}

// ctrStores is what a containerd pull leaves in the cache.
func ctrStores(t *testing.T, c *Cache, token string) {
	keep(t, c, dockerReq(http.MethodHead, tagURL, "", ctrAccept), http.StatusUnauthorized, challengeHeader(scopedRealm), "")
	h := manifestHeader()
	h.Set("Content-Length", strconv.Itoa(len(testManifest)))
	headReq := dockerReq(http.MethodHead, tagURL, token, ctrAccept)
	ref, _ := dockerPolicy().For(headReq, "docker")
	resp := &http.Response{StatusCode: 200, Header: h, Body: http.NoBody, ContentLength: int64(len(testManifest))}
	c.Store(ref.HeadRef(), resp)
	resp.Body.Close()
	c.commits.Wait()
	keep(t, c, dockerReq(http.MethodGet, "https://reg.test/v2/team/app/manifests/"+manifestDigest(), token, ctrAccept),
		http.StatusOK, manifestHeader(), testManifest)
}

// ctrPulls checks a containerd-style pull from the cache alone, with token.
func ctrPulls(t *testing.T, c *Cache, token string) {
	t.Helper()
	resp, _ := served(t, c, dockerReq(http.MethodHead, tagURL, "", ctrAccept))
	if resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Www-Authenticate") != scopedRealm {
		t.Fatalf("containerd's HEAD of the tag without a token: %v, want a 401 sending it to the realm for its repository", statusLine(resp))
	}
	resp, body := served(t, c, dockerReq(http.MethodHead, tagURL, token, ctrAccept))
	if resp == nil || resp.StatusCode != 200 || resp.Header.Get("Docker-Content-Digest") != manifestDigest() ||
		resp.ContentLength != int64(len(testManifest)) || body != "" {
		t.Fatalf("containerd's HEAD of the tag: %v, want 200 with the digest and length", statusLine(resp))
	}
	resp, body = served(t, c, dockerReq(http.MethodGet, "https://reg.test/v2/team/app/manifests/"+manifestDigest(), token, ctrAccept))
	if resp == nil || resp.StatusCode != 200 || body != testManifest || resp.Header.Get("X-Nora-Stale") != "true" {
		t.Fatalf("containerd's GET by digest: %v %q", statusLine(resp), body)
	}
}

// skopeoPulls checks a skopeo-style pull from the cache alone, with token.
func skopeoPulls(t *testing.T, c *Cache, token string) {
	t.Helper()
	resp, _ := served(t, c, dockerReq(http.MethodGet, regURL, ""))
	if resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Www-Authenticate") != testRealm {
		t.Fatalf("skopeo's ping: %v %v, want a 401 naming the realm without a scope", statusLine(resp), headerOf(resp))
	}
	resp, body := served(t, c, dockerReq(http.MethodGet, tagURL, token, strings.Split(skopeoAccept, ", ")...))
	if resp == nil || resp.StatusCode != 200 || body != testManifest ||
		resp.Header.Get("Content-Type") != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("skopeo's GET of the tag: %v %q", statusLine(resp), body)
	}
}

func statusLine(resp *http.Response) string {
	if resp == nil {
		return "no copy"
	}
	return resp.Status
}

func headerOf(resp *http.Response) http.Header {
	if resp == nil {
		return nil
	}
	return resp.Header
}

func TestSkopeosCopiesServeContainerd(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	skopeoStores(t, c, "anon-token")
	ctrPulls(t, c, "anon-token")
}

func TestContainerdsCopiesServeSkopeo(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	ctrStores(t, c, "anon-token")
	skopeoPulls(t, c, "anon-token")
}

// A private image stays its owner's across clients: copies alice's token
// fetched serve alice with either client, and never an anonymous one.
func TestPrivateCopiesStayPrivateAcrossClients(t *testing.T) {
	for _, c := range []struct {
		name         string
		stores, pull func(*testing.T, *Cache, string)
	}{
		{"skopeo stored", skopeoStores, ctrPulls},
		{"containerd stored", ctrStores, skopeoPulls},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache, _ := newTestCache(t, Options{})
			c.stores(t, cache, "alice-token")
			c.pull(t, cache, "alice-token")
			for _, req := range []*http.Request{
				dockerReq(http.MethodHead, tagURL, "anon-token", ctrAccept),
				dockerReq(http.MethodGet, tagURL, "anon-token", skopeoAccept),
				dockerReq(http.MethodGet, "https://reg.test/v2/team/app/manifests/"+manifestDigest(), "anon-token", ctrAccept),
				dockerReq(http.MethodGet, tagURL, "", skopeoAccept),
			} {
				if resp, _ := served(t, cache, req); resp != nil && resp.StatusCode == 200 {
					t.Errorf("%s %s as %q was served alice's copy", req.Method, req.URL, req.Header.Get("Authorization"))
				}
			}
		})
	}
}

// A copy is another client's answer only if that client accepts its media
// type: an OCI manifest is no answer for a client that takes docker's
// schema 2 alone.
func TestCopiesOfOtherAcceptListsNeedAnAcceptedMediaType(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	skopeoStores(t, c, "anon-token")
	only := "application/vnd.docker.distribution.manifest.v2+json"
	if resp, _ := served(t, c, dockerReq(http.MethodGet, tagURL, "anon-token", only)); resp != nil {
		t.Fatalf("a client accepting only %s was served %s", only, resp.Header.Get("Content-Type"))
	}
	for _, accept := range []string{"application/*", "*/*;q=0.5", "application/VND.OCI.image.manifest.v1+json"} {
		if resp, _ := served(t, c, dockerReq(http.MethodGet, tagURL, "anon-token", accept)); resp == nil {
			t.Errorf("a client accepting %s was not served the OCI manifest", accept)
		}
	}
	if resp, _ := served(t, c, dockerReq(http.MethodGet, tagURL, "anon-token", "application/vnd.oci.image.manifest.v1+json;q=0")); resp != nil {
		t.Error("q=0 is a refusal, yet the type was served")
	}
}

// Nothing is made up when nothing was stored: no ping from a registry of
// which no tokenless answer is kept, and no challenge for another
// registry's repository.
func TestNoStaleAnswerWithoutAStoredOne(t *testing.T) {
	c, _ := newTestCache(t, Options{})
	keep(t, c, dockerReq(http.MethodGet, tagURL, "anon-token", ctrAccept), http.StatusOK, manifestHeader(), testManifest)
	if resp, _ := served(t, c, dockerReq(http.MethodGet, regURL, "")); resp != nil {
		t.Errorf("a ping was served from a registry whose only copy was fetched with a token: %s", resp.Status)
	}
	if resp, _ := served(t, c, dockerReq(http.MethodHead, "https://other.test/v2/team/app/manifests/1", "", ctrAccept)); resp != nil {
		t.Errorf("another registry's tag was answered: %s", resp.Status)
	}
	// A registry that answered tokenless requests itself (no auth) gets
	// a 200 ping.
	keep(t, c, dockerReq(http.MethodHead, "https://open.test/v2/team/app/manifests/1", "", ctrAccept), http.StatusOK,
		manifestHeader(), "")
	resp, _ := served(t, c, dockerReq(http.MethodGet, "https://open.test/v2/", ""))
	if resp == nil || resp.StatusCode != 200 || resp.Header.Get("Docker-Distribution-Api-Version") != "registry/2.0" {
		t.Errorf("ping of a registry that needs no token: %v %v", statusLine(resp), headerOf(resp))
	}
}

// A digest names the bytes (docs/behaviour.md §6.1): a manifest copy is
// found by a digest only if its body hashes to it. A registry whose
// Docker-Content-Digest names other bytes keeps its copy under the tag it
// was asked by, never under that digest; an answer by digest whose bytes
// differ is not kept, and does not replace the right copy.
func TestAManifestIsFoundByADigestOnlyIfItsBytesHashToIt(t *testing.T) {
	other := sha256.Sum256([]byte("some other manifest"))
	claimed := "sha256:" + hex.EncodeToString(other[:])
	byDigest := func(d string) *http.Request {
		return dockerReq(http.MethodGet, "https://reg.test/v2/team/app/manifests/"+d, "anon-token", ctrAccept)
	}
	t.Run("by tag, claiming another digest", func(t *testing.T) {
		c, _ := newTestCache(t, Options{})
		h := manifestHeader()
		h.Set("Docker-Content-Digest", claimed)
		keep(t, c, dockerReq(http.MethodGet, tagURL, "anon-token", skopeoAccept), http.StatusOK, h, testManifest)
		if resp, body := served(t, c, byDigest(claimed)); resp != nil {
			t.Errorf("GET by %s was served %s %q, bytes of %s", claimed, resp.Status, body, manifestDigest())
		}
		// A HEAD of the tag that names the digest finds nothing either.
		hh := h.Clone()
		hh.Set("Content-Length", strconv.Itoa(len(testManifest)))
		head, _ := dockerPolicy().For(dockerReq(http.MethodHead, "https://reg.test/v2/team/app/manifests/2", "anon-token", ctrAccept), "docker")
		resp := &http.Response{StatusCode: 200, Header: hh, Body: http.NoBody, ContentLength: int64(len(testManifest))}
		c.Store(head.HeadRef(), resp)
		resp.Body.Close()
		c.commits.Wait()
		if resp, _ := served(t, c, dockerReq(http.MethodGet, "https://reg.test/v2/team/app/manifests/2", "anon-token", ctrAccept)); resp != nil {
			t.Errorf("GET of a tag whose HEAD named %s was served %s", claimed, resp.Status)
		}
		if resp, body := served(t, c, dockerReq(http.MethodGet, tagURL, "anon-token", skopeoAccept)); resp == nil || body != testManifest {
			t.Errorf("the copy is no longer served by its own tag: %v", statusLine(resp))
		}
	})
	t.Run("by digest, other bytes", func(t *testing.T) {
		c, _ := newTestCache(t, Options{})
		keep(t, c, byDigest(manifestDigest()), http.StatusOK, manifestHeader(), testManifest)
		keep(t, c, byDigest(manifestDigest()), http.StatusOK, manifestHeader(), `{"schemaVersion":2,"tampered":true}`)
		if resp, body := served(t, c, byDigest(manifestDigest())); resp == nil || body != testManifest {
			t.Errorf("GET by digest after an answer of other bytes: %v %q, want the right copy", statusLine(resp), body)
		}
		keep(t, c, byDigest(claimed), http.StatusOK, manifestHeader(), testManifest)
		if resp, _ := served(t, c, byDigest(claimed)); resp != nil {
			t.Errorf("GET by %s was served bytes that hash to %s", claimed, manifestDigest())
		}
	})
	t.Run("copies written before digests were recorded", func(t *testing.T) {
		// An older version kept no body_sha256 and checked nothing: Open
		// hashes a manifest copy's bytes, so an honest copy is still found
		// by its digest and one holding other bytes is not.
		dir := t.TempDir()
		first, _ := newTestCache(t, Options{Dir: dir})
		tagReq := dockerReq(http.MethodGet, tagURL, "anon-token", skopeoAccept)
		keep(t, first, tagReq, http.StatusOK, manifestHeader(), testManifest)
		keep(t, first, byDigest(manifestDigest()), http.StatusOK, manifestHeader(), testManifest)
		first.Close()
		asOlderVersion := func(req *http.Request, body string) {
			ref, _ := dockerPolicy().For(req, "docker")
			path := filepath.Join(entryDir(dir, ref.Key), keyHash(ref.Key)+metaSuffix)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "body_sha256")
			data, _ = json.Marshal(m)
			writeFile(t, path, string(data))
			if body != "" {
				writeFile(t, filepath.Join(filepath.Dir(path), m["body"].(string)), body)
			}
		}
		asOlderVersion(tagReq, "")
		// Other bytes of the same length, as an older version kept them.
		asOlderVersion(byDigest(manifestDigest()), strings.Replace(testManifest, "layers", "layerz", 1))
		second, _ := newTestCache(t, Options{Dir: dir})
		if resp, body := served(t, second, byDigest(manifestDigest())); resp == nil || body != testManifest {
			t.Errorf("GET by digest after a restart: %v %q, want the copy the tag stored", statusLine(resp), body)
		}
		if resp, body := served(t, second, tagReq); resp == nil || body != testManifest {
			t.Errorf("the older copy is no longer served by its tag: %v", statusLine(resp))
		}
		// Without the tag's copy, the tampered one by digest is no answer.
		second.Close()
		ref, _ := dockerPolicy().For(tagReq, "docker")
		if err := os.Remove(filepath.Join(entryDir(dir, ref.Key), keyHash(ref.Key)+metaSuffix)); err != nil {
			t.Fatal(err)
		}
		third, _ := newTestCache(t, Options{Dir: dir})
		if resp, body := served(t, third, byDigest(manifestDigest())); resp != nil {
			t.Errorf("an older copy whose bytes are others was served by digest: %s %q", resp.Status, body)
		}
	})
	t.Run("digests the cache cannot check", func(t *testing.T) {
		for _, d := range []string{"sha512:" + strings.Repeat("a", 128), "sha256:xyz", "sha256:" + strings.Repeat("A", 64)} {
			if _, ok := dockerPolicy().For(byDigest(d), "docker"); ok {
				t.Errorf("a manifest by %s is kept and served from stale", d)
			}
		}
	})
}
