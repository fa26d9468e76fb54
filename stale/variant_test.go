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
	"strings"
	"testing"
	"time"
)

// storeFor tees body as the answer to req (headers as given) under p and
// waits for the commit.
func storeFor(t *testing.T, c *Cache, ref Ref, status int, hdr http.Header, body string) {
	t.Helper()
	resp := &http.Response{StatusCode: status, Header: hdr, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body))}
	c.Store(ref, resp)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	c.commits.Wait()
}

func requestWith(kv ...string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, "https://r.io/pkg", nil)
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	return req
}

// TestVariantsAreServedOnlyToMatchingRequests: a gzip copy never reaches a
// client that did not ask for gzip; a copy that varies by a header is only
// served to a request with the same value.
func TestVariantsAreServedOnlyToMatchingRequests(t *testing.T) {
	tests := []struct {
		name    string
		stored  []string // request headers of the storing request
		respHdr http.Header
		asked   []string
		wantHit bool
	}{
		{"gzip copy, client accepts gzip", []string{"Accept-Encoding", "gzip"},
			http.Header{"Content-Encoding": {"gzip"}}, []string{"Accept-Encoding", "gzip, br"}, true},
		{"gzip copy, client asked for nothing", []string{"Accept-Encoding", "gzip"},
			http.Header{"Content-Encoding": {"gzip"}}, nil, false},
		{"gzip copy, client refuses gzip", []string{"Accept-Encoding", "gzip"},
			http.Header{"Content-Encoding": {"gzip"}}, []string{"Accept-Encoding", "br, gzip;q=0"}, false},
		{"gzip copy, client accepts anything", []string{"Accept-Encoding", "gzip"},
			http.Header{"Content-Encoding": {"gzip"}}, []string{"Accept-Encoding", "*"}, true},
		{"identity copy serves everyone", []string{"Accept-Encoding", "gzip"}, http.Header{}, nil, true},
		{"Vary: X-Arch, same value", []string{"X-Arch", "arm64"}, http.Header{"Vary": {"X-Arch"}},
			[]string{"X-Arch", "arm64"}, true},
		{"Vary: X-Arch, other value", []string{"X-Arch", "arm64"}, http.Header{"Vary": {"X-Arch"}},
			[]string{"X-Arch", "amd64"}, false},
		{"Vary: X-Arch, absent", []string{"X-Arch", "arm64"}, http.Header{"Vary": {"x-arch, Accept-Encoding"}},
			nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestCache(t, Options{})
			stored, _ := forMode(requestWith(tc.stored...), "go", modeIsolate)
			storeFor(t, c, stored, 200, tc.respHdr, "payload")
			asked, _ := forMode(requestWith(tc.asked...), "go", modeIsolate)
			e, hit := c.Find(asked)
			if hit {
				e.Body.Close()
			}
			if hit != tc.wantHit {
				t.Fatalf("served = %v, want %v", hit, tc.wantHit)
			}
		})
	}
	t.Run("Vary: * is never kept", func(t *testing.T) {
		c, _ := newTestCache(t, Options{})
		req := requestWith()
		if c.StorableFor(Ref{}, req, &http.Response{StatusCode: 200, Header: http.Header{"Vary": {"*"}}}) {
			t.Fatal("Vary: * storable")
		}
	})
}

// TestBlobCopiesAreCheckedAgainstTheirDigest: bytes that do not hash to
// the digest they are kept under are never committed.
func TestBlobCopiesAreCheckedAgainstTheirDigest(t *testing.T) {
	body := "layer bytes"
	sum := sha256.Sum256([]byte(body))
	good := "sha256:" + hex.EncodeToString(sum[:])
	c, _ := newTestCache(t, Options{})
	p := Policy{Mode: modeIsolate}
	ref, ok := p.BlobRef(good, "", nil)
	if !ok {
		t.Fatal("BlobRef refused a good digest")
	}
	storeFor(t, c, ref, 200, http.Header{}, "tampered bytes")
	if _, hit := c.Find(ref); hit {
		t.Fatal("a body that does not match its digest was kept")
	}
	storeFor(t, c, ref, 200, http.Header{}, body)
	e, hit := c.Find(ref)
	if !hit {
		t.Fatal("the right bytes were not kept")
	}
	e.Body.Close()
	for _, bad := range []string{"sha512:" + strings.Repeat("a", 128), "sha256:xyz", "sha256:", "latest"} {
		if _, ok := p.BlobRef(bad, "", nil); ok {
			t.Errorf("BlobRef accepted %q", bad)
		}
	}
	// A private blob is kept apart from the public one.
	priv, _ := p.BlobRef(good, "cred-digest", nil)
	if priv.Key == ref.Key {
		t.Fatal("a blob fetched with credentials shares the public key")
	}
}

// TestNegativeAnswersAreKept: a 404 is kept with its headers and served
// with its status; a newer 200 replaces it at once, refresh interval or not.
func TestNegativeAnswersAreKept(t *testing.T) {
	c, _ := newTestCache(t, Options{RefreshAfter: 30e9})
	ref, _ := forMode(requestWith(), "deb", modeIsolate)
	storeFor(t, c, ref, http.StatusNotFound, http.Header{"X-Repo": {"debian"}}, "not found")
	e, hit := c.Find(ref)
	if !hit || e.Status != http.StatusNotFound || e.Header.Get("X-Repo") != "debian" {
		t.Fatalf("negative copy: hit %v %+v", hit, e)
	}
	e.Body.Close()
	storeFor(t, c, ref, http.StatusOK, http.Header{}, "now it exists")
	e, hit = c.Find(ref)
	if !hit || e.Status != http.StatusOK {
		t.Fatalf("the 200 did not replace the young 404: %+v", e)
	}
	e.Body.Close()
}

// secretsOnDisk lists the files under dir that hold any of secrets.
func secretsOnDisk(t *testing.T, dir string, secrets ...string) []string {
	t.Helper()
	var out []string
	for _, name := range filesIn(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				out = append(out, name+" holds "+s)
			}
		}
	}
	return out
}

// TestVaryByCredentialsKeepsThemOffDisk: an answer that varies by the
// request's credentials (or any other header) records a digest of each
// value, never the value: the .meta file is at rest in stale_dir, and the
// key itself only ever holds a digest of credentials (docs/behaviour.md §6,
// §10). The digest still tells requests apart.
func TestVaryByCredentialsKeepsThemOffDisk(t *testing.T) {
	dir := t.TempDir()
	c, _ := newTestCache(t, Options{Dir: dir})
	// share: the key ignores credentials, so only Vary keeps these apart.
	p := Policy{Mode: modeShare}
	sent := []string{"Authorization", "Bearer s3cr3t-token", "Cookie", "session=c00kie", "X-Api-Key", "k3y-value"}
	ref, _ := p.For(requestWith(sent...), "go")
	storeFor(t, c, ref, 200, http.Header{"Vary": {"Authorization, Cookie", "X-Api-Key"}}, "payload")
	if _, n := c.Stats(); n != 1 {
		t.Fatalf("%d entries stored", n)
	}
	if leaks := secretsOnDisk(t, dir, "s3cr3t-token", "c00kie", "k3y-value"); len(leaks) > 0 {
		t.Fatalf("credentials kept in clear: %v", leaks)
	}
	for _, tc := range []struct {
		name string
		kv   []string
		want bool
	}{
		{"the same credentials", sent, true},
		{"another token", []string{"Authorization", "Bearer other", "Cookie", "session=c00kie", "X-Api-Key", "k3y-value"}, false},
		{"another cookie", []string{"Authorization", "Bearer s3cr3t-token", "Cookie", "session=other", "X-Api-Key", "k3y-value"}, false},
		{"no credentials", nil, false},
	} {
		asked, _ := p.For(requestWith(tc.kv...), "go")
		e, hit := c.Find(asked)
		if hit {
			e.Body.Close()
		}
		if hit != tc.want {
			t.Errorf("%s: served = %v, want %v", tc.name, hit, tc.want)
		}
	}
}

// TestVaryValuesKeptInClearByAnOlderVersionAreDropped: a .meta written
// before Vary values were digested holds them in clear, credentials
// included. Open drops such an entry (its files go), so no credential of
// an older version stays at rest and no copy is matched by a clear value.
func TestVaryValuesKeptInClearByAnOlderVersionAreDropped(t *testing.T) {
	dir := t.TempDir()
	first, _ := newTestCache(t, Options{Dir: dir})
	ref, _ := forMode(requestWith("Authorization", "Bearer s3cr3t-token"), "go", modeShare)
	storeFor(t, first, ref, 200, http.Header{"Vary": {"Authorization"}}, "payload")
	first.Close()

	// Rewrite the entry as the older version wrote it.
	path := filepath.Join(entryDir(dir, ref.Key), keyHash(ref.Key)+metaSuffix)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "vary_sha256")
	m["vary"] = map[string]string{"Authorization": "Bearer s3cr3t-token"}
	data, _ = json.Marshal(m)
	writeFile(t, path, string(data))

	second, _ := newTestCache(t, Options{Dir: dir})
	if e, hit := second.Find(ref); hit {
		e.Body.Close()
		t.Error("a copy matched by a value kept in clear was served")
	}
	if _, n := second.Stats(); n != 0 {
		t.Errorf("%d entries loaded", n)
	}
	if leaks := secretsOnDisk(t, dir, "s3cr3t-token"); len(leaks) > 0 {
		t.Errorf("an older version's clear credential survived Open: %v", leaks)
	}
}

// TestACopyInSeveralCodingsNeedsEveryOne: a body coded twice (gzip, then
// br) can only be decoded by a client that reads both, whether the stored
// Content-Encoding lists them on one line or on two (docs/behaviour.md §6).
func TestACopyInSeveralCodingsNeedsEveryOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stored []string // Content-Encoding lines of the copy
		asked  string   // Accept-Encoding of the request
		want   bool
	}{
		{"two lines, gzip alone", []string{"gzip", "br"}, "gzip", false},
		{"two lines, br alone", []string{"gzip", "br"}, "br", false},
		{"two lines, both", []string{"gzip", "br"}, "gzip, br", true},
		{"two lines, anything", []string{"gzip", "br"}, "*", true},
		{"two lines, br refused", []string{"gzip", "br"}, "gzip, *, br;q=0", false},
		{"one line, gzip alone", []string{"gzip, br"}, "gzip", false},
		{"one line, both", []string{"gzip, br"}, "br, gzip", true},
		{"one line, names in another case", []string{"GZIP, Br"}, "gzip, br", true},
		{"identity among them", []string{"identity, gzip"}, "gzip", true},
		{"empty items", []string{" , gzip,"}, "gzip", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestCache(t, Options{})
			stored, _ := forMode(requestWith("Accept-Encoding", "gzip, br"), "go", modeIsolate)
			storeFor(t, c, stored, 200, http.Header{"Content-Encoding": tc.stored}, "coded twice")
			asked, _ := forMode(requestWith("Accept-Encoding", tc.asked), "go", modeIsolate)
			e, hit := c.Find(asked)
			if hit {
				e.Body.Close()
			}
			if hit != tc.want {
				t.Fatalf("Content-Encoding %q, Accept-Encoding %q: served = %v, want %v", tc.stored, tc.asked, hit, tc.want)
			}
		})
	}
}

// TestQueryValuesKeepOffDisk: a token a client sends in the query string
// (GitLab's private_token, a job_token, a signature) is a credential like
// any header's: the key written to stale_dir holds a digest of each query
// value, never the value (docs/behaviour.md §10), and the digest still
// tells the requests apart.
func TestQueryValuesKeepOffDisk(t *testing.T) {
	dir := t.TempDir()
	c, _ := newTestCache(t, Options{Dir: dir})
	at := func(query string) Ref {
		ref, ok := Policy{}.For(httptest.NewRequest(http.MethodGet, "https://gitlab.test/api/v4/packages/maven/a/1/a-1.jar?"+query, nil), "maven")
		if !ok {
			t.Fatalf("?%s: not cacheable", query)
		}
		return ref
	}
	storeFor(t, c, at("private_token=glpat-s3cr3t&ns=gl4b"), 200, http.Header{}, "payload")
	if _, n := c.Stats(); n != 1 {
		t.Fatalf("%d entries stored", n)
	}
	if leaks := secretsOnDisk(t, dir, "glpat-s3cr3t", "gl4b"); len(leaks) > 0 {
		t.Fatalf("query values kept in clear: %v", leaks)
	}
	for _, tc := range []struct {
		query string
		want  bool
	}{
		{"private_token=glpat-s3cr3t&ns=gl4b", true},
		{"private_token=glpat-other&ns=gl4b", false},
		{"private_token=glpat-s3cr3t&ns=other", false},
		{"ns=gl4b&private_token=glpat-s3cr3t", false}, // another URL, as before
		{"private_token=&ns=gl4b", false},
		{"glpat-s3cr3t&ns=gl4b", false},
	} {
		e, hit := c.Find(at(tc.query))
		if hit {
			e.Body.Close()
		}
		if hit != tc.want {
			t.Errorf("?%s: served = %v, want %v", tc.query, hit, tc.want)
		}
	}
}

// TestQueryKeptInClearByAnOlderVersionIsDropped: an entry written before
// query values were digested holds them in clear in its key; Open drops it
// (its files go), while an older entry without a query is kept.
func TestQueryKeptInClearByAnOlderVersionIsDropped(t *testing.T) {
	dir := t.TempDir()
	older := func(key string) {
		m := meta{Version: 2, Key: key, Status: 200, Size: 7, StoredAt: time.Now(), Body: keyHash(key) + ".1.body"}
		data, _ := json.Marshal(m)
		writeFile(t, filepath.Join(entryDir(dir, key), keyHash(key)+metaSuffix), string(data))
		writeFile(t, filepath.Join(entryDir(dir, key), m.Body), "payload")
	}
	older("https://gitlab.test/a-1.jar?private_token=glpat-s3cr3t")
	older("https://gitlab.test/a-2.jar")
	c, _ := newTestCache(t, Options{Dir: dir})
	if _, n := c.Stats(); n != 1 {
		t.Errorf("%d entries loaded, want the one without a query", n)
	}
	if e, hit := c.Find(Ref{Key: "https://gitlab.test/a-2.jar", Mode: modeIsolate}); !hit {
		t.Error("the older entry without a query was dropped")
	} else {
		e.Body.Close()
	}
	if leaks := secretsOnDisk(t, dir, "glpat-s3cr3t"); len(leaks) > 0 {
		t.Errorf("an older version's clear query survived Open: %v", leaks)
	}
}
