package proxy

import (
	"io"
	"net/http"
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
