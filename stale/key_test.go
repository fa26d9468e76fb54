package stale

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestKey(t *testing.T) {
	const (
		dockerAccept = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json"
		npmAccept    = "application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8, */*"
		pipAccept    = "application/vnd.pypi.simple.v1+json, text/html; q=0.01"
	)
	tests := []struct {
		name    string
		url     string
		format  string
		mode    string
		header  map[string]string
		tls     bool
		want    string
		wantBad bool
	}{
		{name: "docker manifest keeps Accept", url: "https://registry-1.docker.io/v2/library/nginx/manifests/latest",
			format: "docker", header: map[string]string{"Accept": dockerAccept},
			want: "https://registry-1.docker.io/v2/library/nginx/manifests/latest\naccept=" + dockerAccept},
		{name: "docker manifest by digest keeps Accept", url: "https://ghcr.io/v2/o/r/manifests/sha256:" + strings.Repeat("ab", 32),
			format: "docker", header: map[string]string{"Accept": "x"},
			want: "https://ghcr.io/v2/o/r/manifests/sha256:" + strings.Repeat("ab", 32) + "\naccept=x"},
		// A digest the cache cannot check the bytes against (§6.1).
		{name: "docker manifest by a short digest", url: "https://ghcr.io/v2/o/r/manifests/sha256:ab", format: "docker", wantBad: true},
		{name: "docker manifest without Accept", url: "https://ghcr.io/v2/o/r/manifests/v1", format: "docker",
			want: "https://ghcr.io/v2/o/r/manifests/v1\naccept="},
		{name: "docker blob ignores Accept", url: "https://registry-1.docker.io/v2/library/nginx/blobs/sha256:aa",
			format: "docker", header: map[string]string{"Accept": dockerAccept},
			want: "https://registry-1.docker.io/v2/library/nginx/blobs/sha256:aa"},
		{name: "docker name called manifests is not a manifest", url: "https://r.io/v2/manifests/x",
			format: "docker", header: map[string]string{"Accept": "x"}, want: "https://r.io/v2/manifests/x"},
		{name: "npm packument keeps Accept", url: "https://registry.npmjs.org/lodash", format: "npm",
			header: map[string]string{"Accept": npmAccept}, want: "https://registry.npmjs.org/lodash\naccept=" + npmAccept},
		{name: "npm scoped packument keeps escaping", url: "https://registry.npmjs.org/@types%2fnode", format: "npm",
			header: map[string]string{"Accept": "a"}, want: "https://registry.npmjs.org/@types%2Fnode\naccept=a"},
		// One byte, one spelling (issue 22, point 4): pnpm's %2F and npm's
		// %2f are one packument.
		{name: "percent-encodings of one byte are one key", url: "https://registry.npmjs.org/@types%2Fnode", format: "npm",
			header: map[string]string{"Accept": "a"}, want: "https://registry.npmjs.org/@types%2Fnode\naccept=a"},
		{name: "a host with a trailing dot is the host", url: "https://Registry.NPMjs.org.:443/left-pad", format: "npm",
			header: map[string]string{"Accept": "a"}, want: "https://registry.npmjs.org/left-pad\naccept=a"},
		{name: "npm tarball ignores Accept", url: "https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz",
			format: "npm", header: map[string]string{"Accept": npmAccept},
			want: "https://registry.npmjs.org/lodash/-/lodash-4.17.21.tgz"},
		{name: "pypi simple page keeps Accept", url: "https://pypi.org/simple/requests/", format: "pypi",
			header: map[string]string{"Accept": pipAccept}, want: "https://pypi.org/simple/requests/\naccept=" + pipAccept},
		{name: "pypi simple page without slash", url: "https://pypi.org/simple/requests", format: "pypi",
			header: map[string]string{"Accept": "a"}, want: "https://pypi.org/simple/requests\naccept=a"},
		{name: "pypi file ignores Accept", url: "https://files.pythonhosted.org/packages/ab/cd/requests-2.0-py3-none-any.whl",
			format: "pypi", header: map[string]string{"Accept": pipAccept},
			want: "https://files.pythonhosted.org/packages/ab/cd/requests-2.0-py3-none-any.whl"},
		{name: "other formats ignore Accept", url: "https://repo1.maven.org/maven2/a/b/1/b-1.pom", format: "maven",
			header: map[string]string{"Accept": "a"}, want: "https://repo1.maven.org/maven2/a/b/1/b-1.pom"},
		{name: "host lower-cased, default http port dropped", url: "http://Example.COM:80/X", format: "go",
			want: "http://example.com/X"},
		{name: "default https port dropped", url: "https://proxy.golang.org:443/m/@v/list", format: "go",
			want: "https://proxy.golang.org/m/@v/list"},
		{name: "other port kept", url: "https://nexus.local:8443/repo/a", format: "maven",
			want: "https://nexus.local:8443/repo/a"},
		{name: "http port 443 kept", url: "http://nexus.local:443/a", format: "maven", want: "http://nexus.local:443/a"},
		{name: "ipv6 default port", url: "http://[::1]:80/a", format: "go", want: "http://[::1]/a"},
		{name: "ipv6 other port", url: "http://[::1]:8080/a", format: "go", want: "http://[::1]:8080/a"},
		{name: "user:pass stripped", url: "https://user:secret@nexus.local/repo/a.jar", format: "maven",
			want: "https://nexus.local/repo/a.jar"},
		{name: "query values digested", url: "https://index.crates.io/config.json?a=1&b=%20&c", format: "cargo",
			want: "https://index.crates.io/config.json?a=~" + sha256hex("1") + "&b=~" + sha256hex("%20") + "&~" + sha256hex("c")},
		{name: "empty path is root", url: "https://pypi.org", format: "cargo", want: "https://pypi.org/"},
		{name: "scheme from TLS when URL is relative", url: "/simple/x/", format: "cargo", tls: true,
			want: "https://example.com/simple/x/"},
		{name: "off refuses Authorization", url: "https://r.io/a", format: "go", mode: modeOff,
			header: map[string]string{"Authorization": "Bearer t"}, wantBad: true},
		{name: "off refuses Cookie", url: "https://r.io/a", format: "go", mode: modeOff,
			header: map[string]string{"Cookie": "s=1"}, wantBad: true},
		{name: "off stores anonymous", url: "https://r.io/a", format: "go", mode: modeOff, want: "https://r.io/a"},
		{name: "isolate hashes Authorization", url: "https://r.io/a", format: "go", mode: modeIsolate,
			header: map[string]string{"Authorization": "Bearer t"}, want: "https://r.io/a\ncred=" + sha256hex("Bearer t\x00\x01")},
		{name: "isolate hashes Cookie", url: "https://r.io/a", format: "go", mode: modeIsolate,
			header: map[string]string{"Cookie": "s=1"}, want: "https://r.io/a\ncred=" + sha256hex("\x01s=1\x00")},
		{name: "empty mode means isolate", url: "https://r.io/a", format: "go",
			header: map[string]string{"Authorization": "Bearer t"}, want: "https://r.io/a\ncred=" + sha256hex("Bearer t\x00\x01")},
		{name: "isolate anonymous has no suffix", url: "https://r.io/a", format: "go", mode: modeIsolate, want: "https://r.io/a"},
		{name: "share ignores credentials", url: "https://r.io/a", format: "go", mode: modeShare,
			header: map[string]string{"Authorization": "Bearer t", "Cookie": "s"}, want: "https://r.io/a"},
		{name: "unknown mode refuses", url: "https://r.io/a", format: "go", mode: "shared", wantBad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.url, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			if tt.tls {
				req.TLS = &tls.ConnectionState{}
			} else {
				req.TLS = nil
			}
			got, ok := keyFor(req, tt.format, tt.mode)
			if ok == tt.wantBad {
				t.Fatalf("Key ok = %v, want %v (key %q)", ok, !tt.wantBad, got)
			}
			if got != tt.want {
				t.Errorf("Key = %q\nwant  %q", got, tt.want)
			}
		})
	}
}

func TestKeyIsolatesTenants(t *testing.T) {
	key := func(authz string) string {
		req := httptest.NewRequest(http.MethodGet, "https://r.io/a", nil)
		req.Header.Set("Authorization", authz)
		k, ok := keyFor(req, "go", modeIsolate)
		if !ok {
			t.Fatalf("Key refused %q", authz)
		}
		return k
	}
	if key("Bearer one") == key("Bearer two") {
		t.Fatal("two credentials share a key")
	}
}

func TestKeyRefusesSmuggledSeparators(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "https://r.io/a", nil)
	req.URL.RawQuery = "x\ncred=00"
	if k, ok := keyFor(req, "go", modeShare); ok {
		t.Fatalf("Key accepted a newline in the query: %q", k)
	}
	req = httptest.NewRequest(http.MethodGet, "https://registry.npmjs.org/x", nil)
	req.Header["Accept"] = []string{"a\ncred=00"}
	if k, ok := keyFor(req, "npm", modeShare); ok {
		t.Fatalf("Key accepted a newline in Accept: %q", k)
	}
	if _, ok := keyFor(nil, "go", modeShare); ok {
		t.Fatal("Key accepted a nil request")
	}
}

func BenchmarkKey(b *testing.B) {
	req := httptest.NewRequest(http.MethodGet, "https://registry-1.docker.io/v2/library/nginx/manifests/latest", nil)
	req.Header.Set("Accept", "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	req.Header.Set("Authorization", "Bearer abcdefghijklmnopqrstuvwxyz")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := keyFor(req, "docker", modeIsolate); !ok {
			b.Fatal("not ok")
		}
	}
}

// TestFindServesACopyOnlyWhereTheModeAllows stores copies under each mode
// and asks for them under each mode, as a reload between the two would: a
// copy is served only to a request the current mode allows it for.
func TestFindServesACopyOnlyWhereTheModeAllows(t *testing.T) {
	const url = "https://r.io/secret"
	request := func(authz string) *http.Request {
		req := httptest.NewRequest(http.MethodGet, url, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		return req
	}
	tests := []struct {
		name             string
		storedMode       string
		storedBy         string // "" = anonymous
		askMode, askedBy string
		want             bool
	}{
		{"share copy, share ask, other tenant", modeShare, "Bearer ALICE", modeShare, "Bearer BOB", true},
		{"share copy, isolate ask, other tenant", modeShare, "Bearer ALICE", modeIsolate, "Bearer BOB", false},
		{"share copy, isolate ask, anonymous", modeShare, "Bearer ALICE", modeIsolate, "", false},
		{"share copy, off ask, anonymous", modeShare, "Bearer ALICE", modeOff, "", false},
		{"share copy of anonymous, isolate ask, anonymous", modeShare, "", modeIsolate, "", true},
		{"isolate copy, isolate ask, same tenant", modeIsolate, "Bearer ALICE", modeIsolate, "Bearer ALICE", true},
		{"isolate copy, isolate ask, other tenant", modeIsolate, "Bearer ALICE", modeIsolate, "Bearer BOB", false},
		{"anonymous copy, off ask, anonymous", modeIsolate, "", modeOff, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCache(t, Options{})
			stored, ok := forMode(request(tt.storedBy), "go", tt.storedMode)
			if !ok {
				t.Fatal("storing request refused")
			}
			resp := okResponse(strings.NewReader("private"), 7)
			c.Store(stored, resp)
			io.ReadAll(resp.Body)
			resp.Body.Close()
			c.commits.Wait()
			asked, ok := forMode(request(tt.askedBy), "go", tt.askMode)
			if !ok {
				if tt.want {
					t.Fatal("asking request refused")
				}
				return
			}
			e, found := c.Find(asked)
			if found {
				e.Body.Close()
			}
			if found != tt.want {
				t.Fatalf("served = %v, want %v", found, tt.want)
			}
		})
	}
}

// TestKeyURLShapingHeaders: an answer to a request carrying headers an
// upstream builds its links from is kept apart from one without them
// (issue 20, point 9: a page fetched with X-Forwarded-Host: evil.example
// was served from stale to a victim who sent none).
func TestKeyURLShapingHeaders(t *testing.T) {
	key := func(h map[string]string) string {
		req := httptest.NewRequest(http.MethodGet, "https://nexus.corp/repository/pypi/simple/requests/", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		k, ok := keyFor(req, "pypi", modeIsolate)
		if !ok {
			t.Fatalf("%v: not keyable", h)
		}
		return k
	}
	plain := key(nil)
	for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Prefix", "Forwarded",
		"X-Original-URL", "X-Rewrite-URL", "X-Host"} {
		shaped := key(map[string]string{h: "evil.example"})
		if shaped == plain {
			t.Errorf("%s: the same key as a request without it", h)
		}
		if again := key(map[string]string{h: "evil.example"}); again != shaped {
			t.Errorf("%s: the same value gives another key", h)
		}
		if other := key(map[string]string{h: "good.example"}); other == shaped {
			t.Errorf("%s: another value gives the same key", h)
		}
	}
	if key(map[string]string{"User-Agent": "pip/23.2"}) != plain {
		t.Error("a header that shapes no URL changed the key")
	}
}
