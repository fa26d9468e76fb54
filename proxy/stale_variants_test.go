package proxy

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// staleEnv is one maven upstream with a stale cache that can be taken down.
type staleEnv struct {
	tp   *testProxy
	c    *http.Client
	base string
	down *atomic.Bool
}

func newStaleEnv(t *testing.T, h http.HandlerFunc) *staleEnv {
	down := &atomic.Bool{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		h(w, r)
	})
	base := up.URL + "/m2"
	tp := newTestProxy(t, staleModeConfig(base, filepath.Join(t.TempDir(), "stale"), "isolate"), nil)
	return &staleEnv{tp: tp, c: proxyClient(t, tp, nil), base: base, down: down}
}

// TestStaleNegativeAnswerServedDuringOutage: apt asks for InRelease before
// Release; an unsigned repository has no InRelease, and unless its 404 is
// served stale during an outage apt stops there.
func TestStaleNegativeAnswerServedDuringOutage(t *testing.T) {
	e := newStaleEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/m2/dists/stable/InRelease" {
			w.Header().Set("X-Repo", "local")
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "Release file")
	})
	url := e.base + "/dists/stable/InRelease"
	if resp, _ := getURL(t, e.c, url); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("healthy: %d", resp.StatusCode)
	}
	fbWaitStored(t, e.tp, "maven", url, nil)
	e.down.Store(true)
	resp, _ := getURL(t, e.c, url)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Nora-Stale") != "true" || resp.Header.Get("X-Repo") != "local" {
		t.Fatalf("InRelease during the outage: %d %v, want its stale 404", resp.StatusCode, resp.Header)
	}
}

// TestStaleGzipCopyNeverReachesAClientThatDidNotAskForIt.
func TestStaleGzipCopyNeverReachesAClientThatDidNotAskForIt(t *testing.T) {
	e := newStaleEnv(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") == "gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "\x1f\x8bgzipped")
			return
		}
		io.WriteString(w, "plain")
	})
	url := e.base + "/g/a/1/a-1.pom"
	gz := fbHeader("Accept-Encoding", "gzip")
	if resp, _ := request(t, e.c, "GET", url, gz); resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("priming: %v", resp.Header)
	}
	fbWaitStored(t, e.tp, "maven", url, gz)
	e.down.Store(true)
	resp, body := request(t, e.c, "GET", url, fbHeader("Accept-Encoding", "identity"))
	if resp.Header.Get("Content-Encoding") == "gzip" || resp.Header.Get("X-Nora-Stale") != "" {
		t.Fatalf("identity client got the gzip copy: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if resp, _ := request(t, e.c, "GET", url, gz); resp.Header.Get("X-Nora-Stale") != "true" || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip client: %d %v, want the stale gzip copy", resp.StatusCode, resp.Header)
	}
}

// TestStaleVaryByCredentialsKeepsThemOffDisk: an upstream answer with
// Vary: Authorization, Cookie must not make the stale cache write the
// client's credentials into stale_dir in clear (docs/behaviour.md §6, §10):
// the copy records a digest of each value it varies by. During an outage
// the copy still goes only to a request with the same credentials.
func TestStaleVaryByCredentialsKeepsThemOffDisk(t *testing.T) {
	for _, mode := range []string{"isolate", "share"} {
		t.Run(mode, func(t *testing.T) {
			var down atomic.Bool
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if down.Load() {
					http.Error(w, "down", http.StatusBadGateway)
					return
				}
				w.Header().Set("Vary", "Authorization, Cookie")
				io.WriteString(w, "jar")
			})
			base := up.URL + "/m2"
			dir := filepath.Join(t.TempDir(), "stale")
			tp := newTestProxy(t, staleModeConfig(base, dir, mode), nil)
			c := proxyClient(t, tp, nil)
			hdr := fbHeader("Authorization", "Bearer s3cr3t-token-value", "Cookie", "session=c00kie-value")
			url := base + "/g/a.jar"
			if resp, body := request(t, c, "GET", url, hdr); resp.StatusCode != 200 || body != "jar" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			fbWaitStored(t, tp, "maven", url, hdr)
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(p)
				if bytes.Contains(b, []byte("s3cr3t-token-value")) || bytes.Contains(b, []byte("c00kie-value")) {
					t.Errorf("the client's credentials are kept in clear in %s: %s", p, b)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			down.Store(true)
			if resp, _ := request(t, c, "GET", url, hdr); resp.Header.Get("X-Nora-Stale") != "true" {
				t.Errorf("the same credentials during the outage: %d, want the stale copy", resp.StatusCode)
			}
			other := fbHeader("Authorization", "Bearer another-token", "Cookie", "session=c00kie-value")
			if resp, _ := request(t, c, "GET", url, other); resp.Header.Get("X-Nora-Stale") != "" {
				t.Errorf("other credentials were served the copy: %d", resp.StatusCode)
			}
		})
	}
}

// TestStaleCopyInTwoCodingsNeedsBoth: a copy coded gzip then br, stored
// with the codings on two Content-Encoding lines or on one, is served
// during an outage only to a client that reads both (docs/behaviour.md §6).
func TestStaleCopyInTwoCodingsNeedsBoth(t *testing.T) {
	for name, codings := range map[string][]string{"two lines": {"gzip", "br"}, "one line": {"gzip, br"}} {
		t.Run(name, func(t *testing.T) {
			e := newStaleEnv(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Content-Encoding"] = codings
				io.WriteString(w, "\x0b\x02\x80brotli of gzip")
			})
			url := e.base + "/g/a/1/a-1.pom"
			both := fbHeader("Accept-Encoding", "gzip, br")
			if resp, _ := request(t, e.c, "GET", url, both); resp.StatusCode != 200 {
				t.Fatalf("priming: %d", resp.StatusCode)
			}
			// "*" admits any coding: the copy is there once this finds it.
			fbWaitStored(t, e.tp, "maven", url, fbHeader("Accept-Encoding", "*"))
			e.down.Store(true)
			if resp, _ := request(t, e.c, "GET", url, fbHeader("Accept-Encoding", "gzip")); resp.Header.Get("X-Nora-Stale") != "" {
				t.Errorf("a client that reads gzip alone was served the copy coded %q", resp.Header.Values("Content-Encoding"))
			}
			if resp, _ := request(t, e.c, "GET", url, both); resp.Header.Get("X-Nora-Stale") != "true" {
				t.Errorf("the client that stored the copy, asking the same, is not served it during the outage: %d", resp.StatusCode)
			}
		})
	}
}
