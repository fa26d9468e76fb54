package proxy

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
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
	tp := newTestProxy(t, learnedConfig([]string{"mirror.test"}, "deny_unlisted = true",
		map[string]*upstream{"mirror.test": mirror, "storage.test": storage}), nil)
	c := proxyClient(t, tp, nil)
	blobAt := "http://storage.test/b/sha256-1?sig=abc"
	if resp, _ := getURL(t, c, blobAt); resp.StatusCode != http.StatusForbidden || storage.hits.Load() != 0 {
		t.Fatalf("storage before any redirect: %d (hits %d), want 403 and untouched", resp.StatusCode, storage.hits.Load())
	}
	resp, _ := getURL(t, c, "http://mirror.test/v2/lib/x/blobs/sha256:1")
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != blobAt {
		t.Fatalf("blob: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := getURL(t, c, blobAt); resp.StatusCode != 200 || body != "blob bytes" {
		t.Fatalf("storage after the redirect: %d %q, want it allowed", resp.StatusCode, body)
	}
	key := "docker:http://mirror.test@storage.test"
	if v := breakerViewOf(t, tp, key); v.Host != "storage.test" || v.Upstream != "docker:http://mirror.test" {
		t.Fatalf("learned host's breaker: %+v", v)
	}
	// Nine minutes later it is still known; a redirect now refreshes it.
	tp.Clock.Advance(9 * time.Minute)
	if resp, _ := getURL(t, c, "http://mirror.test/v2/lib/x/blobs/sha256:1"); resp.StatusCode != http.StatusTemporaryRedirect ||
		resp.Header.Get("Location") != blobAt {
		t.Fatalf("the refreshing redirect: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	tp.Clock.Advance(9 * time.Minute)
	if resp, _ := getURL(t, c, blobAt); resp.StatusCode != 200 {
		t.Fatalf("9 minutes after the last redirect: %d, want still allowed", resp.StatusCode)
	}
	// Ten minutes after the last redirect it is forgotten.
	tp.Clock.Advance(time.Minute + time.Second)
	hits := storage.hits.Load()
	if resp, _ := getURL(t, c, blobAt); resp.StatusCode != http.StatusForbidden || storage.hits.Load() != hits {
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
	tp := newTestProxy(t, learnedConfig([]string{"hub.test", "second.test"}, "",
		map[string]*upstream{"hub.test": hub, "second.test": second, "storage.test": storage}), nil)
	c := proxyClient(t, tp, nil)
	// The redirect is what makes storage.test a learned host: without it,
	// storage.test would be an unclassified host answered as it is too.
	if resp, _ := getURL(t, c, "http://hub.test/v2/x/blobs/sha256:1"); resp.StatusCode != http.StatusTemporaryRedirect ||
		resp.Header.Get("Location") != "http://storage.test/blob" {
		t.Fatalf("hub: %d Location %q, want its own redirect", resp.StatusCode, resp.Header.Get("Location"))
	}
	learnedKey, hubKey := "docker:http://hub.test@storage.test", "docker:http://hub.test"
	if v := breakerViewOf(t, tp, learnedKey); v.Host != "storage.test" {
		t.Fatalf("learned host's breaker: %+v, want host storage.test", v)
	}
	resp, body := getURL(t, c, "http://storage.test/blob")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "storage down") || resp.Header.Get("X-Nora-Upstream") != "" {
		t.Fatalf("failing learned host: %d %q (served by %q), want its own 502", resp.StatusCode, body,
			resp.Header.Get("X-Nora-Upstream"))
	}
	// The 502 counts against the learned host's own breaker, not the hub's.
	if s := breakerOf(t, tp, learnedKey); s.FailureCount != 1 {
		t.Fatalf("learned host's breaker after its 502: %d failures, want 1", s.FailureCount)
	}
	if s := breakerOf(t, tp, hubKey); s.FailureCount != 0 {
		t.Fatalf("hub's breaker after the learned host's 502: %d failures, want 0", s.FailureCount)
	}
	if second.hits.Load() != 0 {
		t.Fatal("another registry was asked in place of the learned host")
	}
}

// learnedConfig is a docker chain of the registries (each "http://<name>"),
// with the given [sidecar] lines, and a [sidecar.resolve] entry sending
// each name of servers (on port 80) to its server.
func learnedConfig(registries []string, sidecar string, servers map[string]*upstream) string {
	var b strings.Builder
	b.WriteString("[circuit_breaker]\nenabled = true\n[registries]\nenable = \"docker\"\n")
	for _, r := range registries {
		fmt.Fprintf(&b, "[[docker.upstreams]]\nurl = \"http://%s\"\n", r)
	}
	fmt.Fprintf(&b, "[sidecar]\n%s\n[sidecar.resolve]\n", sidecar)
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		fmt.Fprintf(&b, "%q = %q\n", name+":80", strings.TrimPrefix(servers[name].URL, "http://"))
	}
	return b.String()
}

// A learned host that is forgotten takes its series with it: the breaker's
// and the attempt duration histogram's (docs/behaviour.md §3.2, §7). Hosts
// learned from redirects come and go for as long as the proxy runs, and a
// series per host ever seen would grow the scrape without bound.
func TestForgottenLearnedHostLeavesNoSeries(t *testing.T) {
	storage := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "blob bytes") })
	mirror := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		to := "old"
		if strings.Contains(r.URL.Path, "/new/") {
			to = "new"
		}
		http.Redirect(w, r, "http://"+to+".storage.test/b?sig=abc", http.StatusTemporaryRedirect)
	})
	tp := newTestProxy(t, learnedConfig([]string{"mirror.test"}, "deny_unlisted = true",
		map[string]*upstream{"mirror.test": mirror, "old.storage.test": storage, "new.storage.test": storage}), nil)
	c := proxyClient(t, tp, nil)
	oldKey := "docker:http://mirror.test@old.storage.test"
	series := func() string {
		_, text := ixAdmin(t, tp, "GET", "/metrics", "")
		return text
	}
	getURL(t, c, "http://mirror.test/v2/lib/x/blobs/old/sha256:1")
	if resp, body := getURL(t, c, "http://old.storage.test/b?sig=abc"); resp.StatusCode != 200 || body != "blob bytes" {
		t.Fatalf("learned host: %d %q", resp.StatusCode, body)
	}
	if text := series(); !strings.Contains(text, `nora_upstream_request_duration_seconds_count{registry="`+oldKey+`",status="2xx"} 1`) {
		t.Fatalf("the learned host's attempt is not measured:\n%s", text)
	}
	// Past its time, and another host learned (which syncs the set).
	tp.Clock.Advance(11 * time.Minute)
	getURL(t, c, "http://mirror.test/v2/lib/x/blobs/new/sha256:1")
	if slices.Contains(tp.breakers.Keys(), oldKey) {
		t.Fatalf("the forgotten host still has a breaker")
	}
	if text := series(); strings.Contains(text, oldKey) {
		var left []string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, oldKey) {
				left = append(left, l)
			}
		}
		t.Errorf("the forgotten host's series remain:\n%s", strings.Join(left, "\n"))
	}
	if _, ok := tp.sender.HeaderTail(oldKey); ok || tp.sender.Answered(oldKey) != 0 {
		t.Errorf("the sender still keeps the forgotten host's header times")
	}
}
