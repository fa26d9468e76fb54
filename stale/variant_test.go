package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
