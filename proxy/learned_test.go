package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// A registry whose blobs live on storage it redirects to keeps working
// under deny_unlisted: the storage host is learned from the redirect, as an
// alias host of the registry, for ten minutes after the last one
// (docs/behaviour.md §3.2).
func TestLearnedRedirectHostUnderDenyUnlisted(t *testing.T) {
	storage := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sig") == "" {
			http.Error(w, "unsigned", http.StatusForbidden)
			return
		}
		io.WriteString(w, "blob bytes")
	})
	mirror := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			http.Redirect(w, r, "http://storage.test/b/sha256-1?sig=abc", http.StatusTemporaryRedirect)
			return
		}
		io.WriteString(w, "manifest")
	})
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[[docker.upstreams]]
url = "http://mirror.test"
[sidecar]
deny_unlisted = true
[sidecar.resolve]
"mirror.test:80" = %q
"storage.test:80" = %q
`, strings.TrimPrefix(mirror.URL, "http://"), strings.TrimPrefix(storage.URL, "http://")), nil)
	c := proxyClient(t, tp, nil)
	blobAt := "http://storage.test/b/sha256-1?sig=abc"
	if resp, _ := fbGet(t, c, blobAt); resp.StatusCode != http.StatusForbidden || storage.hits.Load() != 0 {
		t.Fatalf("storage before any redirect: %d (hits %d), want 403 and untouched", resp.StatusCode, storage.hits.Load())
	}
	resp, _ := fbGet(t, c, "http://mirror.test/v2/lib/x/blobs/sha256:1")
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != blobAt {
		t.Fatalf("blob: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := fbGet(t, c, blobAt); resp.StatusCode != 200 || body != "blob bytes" {
		t.Fatalf("storage after the redirect: %d %q, want it allowed", resp.StatusCode, body)
	}
	key := "docker:http://mirror.test@storage.test"
	if v := breakerViewOf(t, tp, key); v.Host != "storage.test" || v.Upstream != "docker:http://mirror.test" {
		t.Fatalf("learned host's breaker: %+v", v)
	}
	// Nine minutes later it is still known; a redirect now refreshes it.
	tp.Clock.Advance(9 * time.Minute)
	fbGet(t, c, "http://mirror.test/v2/lib/x/blobs/sha256:1")
	tp.Clock.Advance(9 * time.Minute)
	if resp, _ := fbGet(t, c, blobAt); resp.StatusCode != 200 {
		t.Fatalf("9 minutes after the last redirect: %d, want still allowed", resp.StatusCode)
	}
	// Ten minutes after the last redirect it is forgotten.
	tp.Clock.Advance(time.Minute + time.Second)
	hits := storage.hits.Load()
	if resp, _ := fbGet(t, c, blobAt); resp.StatusCode != http.StatusForbidden || storage.hits.Load() != hits {
		t.Fatalf("after its time: %d, want 403 and untouched", resp.StatusCode)
	}
}

// TestLearnedHostIsNeverACandidate: a failing learned host is answered as
// it is (it is an alias host: nobody is asked in its place), and the
// registry's own chain never includes it.
func TestLearnedHostIsNeverACandidate(t *testing.T) {
	storage := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "storage down", http.StatusBadGateway) })
	hub := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://storage.test/blob", http.StatusTemporaryRedirect)
	})
	second := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "second registry") })
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "docker"
[[docker.upstreams]]
url = "http://hub.test"
[[docker.upstreams]]
url = "http://second.test"
[sidecar.resolve]
"hub.test:80" = %q
"second.test:80" = %q
"storage.test:80" = %q
`, strings.TrimPrefix(hub.URL, "http://"), strings.TrimPrefix(second.URL, "http://"),
		strings.TrimPrefix(storage.URL, "http://")), nil)
	c := proxyClient(t, tp, nil)
	fbGet(t, c, "http://hub.test/v2/x/blobs/sha256:1")
	resp, body := fbGet(t, c, "http://storage.test/blob")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "storage down") || resp.Header.Get("X-Nora-Upstream") != "" {
		t.Fatalf("failing learned host: %d %q (served by %q), want its own 502", resp.StatusCode, body,
			resp.Header.Get("X-Nora-Upstream"))
	}
	if second.hits.Load() != 0 {
		t.Fatal("another registry was asked in place of the learned host")
	}
}

// TestLearnedHostsAreBounded: however many hosts redirects name, at most
// maxLearned are remembered, the soonest to expire going first.
func TestLearnedHostsAreBounded(t *testing.T) {
	clock := newFakeClock()
	l := newLearnedHosts(clock.Now)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range maxLearned {
				u, _ := url.Parse(fmt.Sprintf("https://s%d-%d.test/x", g, i))
				l.learn("docker:https://hub", u)
			}
		})
	}
	wg.Wait()
	if n := len(l.current()); n != maxLearned {
		t.Fatalf("%d learned hosts, want the bound %d", n, maxLearned)
	}
	if _, ok := l.lookup("s0-0.test", "443"); ok && len(l.current()) > maxLearned {
		t.Fatal("bound exceeded")
	}
	for _, raw := range []string{"ftp://x.test/", "https:///nohost", "mailto:a@b"} {
		u, _ := url.Parse(raw)
		if l.learn("k", u) {
			t.Errorf("learned from %q", raw)
		}
	}
}
