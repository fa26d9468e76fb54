package docker

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// call is format.Call over an in-memory transport: it records the
// Authorization of every request it sends.
type call struct {
	rt   http.RoundTripper
	u    *config.Upstream
	rel  string
	sent []string
}

func (c *call) Request() *http.Request {
	return httptest.NewRequest(http.MethodGet, c.u.URL.String()+c.rel, nil)
}

func (c *call) Send(out *http.Request) (*http.Response, error) {
	out.RequestURI = ""
	c.sent = append(c.sent, out.Header.Get("Authorization"))
	return c.rt.RoundTrip(out)
}

// routes names the realm host's breaker key.
type routes map[string]string

func (r routes) KeyOf(u *url.URL) string { return r[u.Host] }

// TestSendNegotiatesTokenOnce: a registry that challenges gets a token
// fetched once and a retry with it; the next request sends the cached token
// first; a token the registry stops taking is fetched anew.
func TestSendNegotiatesTokenOnce(t *testing.T) {
	var want atomic.Value // the token the registry takes
	want.Store("Bearer tok-1")
	var realmHits atomic.Int64
	tr := testkit.Transport{
		"reg.test": testkit.NewUpstream(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != want.Load().(string) {
				w.Header().Set("Www-Authenticate", `Bearer realm="http://auth.test/token",service="reg.test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			io.WriteString(w, "manifest")
		}),
		"auth.test": testkit.NewUpstream(func(w http.ResponseWriter, r *http.Request) {
			n := realmHits.Add(1)
			if got := r.URL.Query().Get("scope"); got != "repository:library/x:pull" {
				t.Errorf("token asked for scope %q", got)
			}
			fmt.Fprintf(w, `{"token":"tok-%d","expires_in":300}`, n)
		}),
	}
	u := testkit.ConfigUpstream(t, "docker", "http://reg.test")
	f := New(Options{Now: newFakeClock().Now})
	send := func() *call {
		t.Helper()
		c := &call{rt: tr, u: u, rel: "/v2/library/x/manifests/1"}
		resp, err := f.Send(format.Candidate{Upstream: u, Client: c.Request(), Rel: c.rel,
			Env: format.Env{Transport: tr, Routes: routes{"auth.test": "realm-key"}}, Call: c})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "manifest" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		return c
	}
	steps := []struct {
		name      string
		take      string   // the token the registry takes from now on
		wantSent  []string // Authorization of each attempt
		wantFetch int64    // realm hits so far
	}{
		{"challenged, then a retry with the token", "Bearer tok-1", []string{"", "Bearer tok-1"}, 1},
		{"the cached token goes first", "Bearer tok-1", []string{"Bearer tok-1"}, 1},
		{"a refused token is fetched anew", "Bearer tok-2", []string{"Bearer tok-1", "Bearer tok-2"}, 2},
	}
	for _, s := range steps {
		want.Store(s.take)
		c := send()
		if strings.Join(c.sent, "|") != strings.Join(s.wantSent, "|") || realmHits.Load() != s.wantFetch {
			t.Errorf("%s: sent %q with %d fetches, want %q with %d", s.name, c.sent, realmHits.Load(),
				s.wantSent, s.wantFetch)
		}
	}
	if got := f.Realm(u); got != "realm-key" {
		t.Errorf("Realm = %q, want the realm host's key", got)
	}
}

// TestSubstitutable: a docker request may be answered by another registry
// or a stale copy when it is a GET or HEAD, except a HEAD of a blob, which
// is a pusher asking the registry it pushes to (docs/behaviour.md §5.4).
func TestSubstitutable(t *testing.T) {
	const d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		method, path string
		want         bool
	}{
		{http.MethodGet, "/v2/team/app/blobs/" + d, true},
		{http.MethodHead, "/v2/team/app/blobs/" + d, false},
		{http.MethodHead, "/v2/team/app/manifests/1", true},
		{http.MethodGet, "/v2/team/app/manifests/" + d, true},
		{http.MethodHead, "/v2/", true},
		{http.MethodPost, "/v2/team/app/blobs/uploads/", false},
		{http.MethodPut, "/v2/team/app/manifests/1", false},
		{http.MethodGet, "/v2/team/app/blobs/uploads/5a9f", false},
	} {
		req, err := http.NewRequest(c.method, "https://registry.test"+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := New(Options{}).Substitutable(req); got != c.want {
			t.Errorf("%s %s: substitutable %t, want %t", c.method, c.path, got, c.want)
		}
	}
}

// TestPushScopes: the repositories a token request asks to push to.
func TestPushScopes(t *testing.T) {
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"scope=repository:team/app:pull,push", []string{"team/app"}},
		{"scope=repository:team/app:pull", nil},
		{"scope=repository:team/app:*", []string{"team/app"}},
		{"scope=repository:a:pull&scope=repository:b:push", []string{"b"}},
		{"scope=repository:a:push+repository:b:pull,push", []string{"a", "b"}},
		{"scope=registry:catalog:*", nil},
		{"service=registry", nil},
	} {
		req, _ := http.NewRequest(http.MethodGet, "https://auth.test/token?"+c.query, nil)
		if got := pushScopes(req); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.query, got, c.want)
		}
	}
}

// TestManifestRepository: the repository of a manifest path.
func TestManifestRepository(t *testing.T) {
	for _, c := range []struct {
		path, want string
		ok         bool
	}{
		{"/v2/team/app/manifests/1", "team/app", true},
		{"/v2/library/hello/manifests/sha256:abc", "library/hello", true},
		{"/v2/team/app/blobs/sha256:abc", "", false},
		{"/v2/manifests/1", "", false},
		{"/team/app/manifests/1", "", false},
	} {
		got, ok := manifestRepository(c.path)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %q %t, want %q %t", c.path, got, ok, c.want, c.ok)
		}
	}
}

// TestHedgeable: every docker request may be hedged but the /v2/ ping.
func TestHedgeable(t *testing.T) {
	for path, want := range map[string]bool{"/v2/": false, "/v2": false, "/v2/team/app/manifests/1": true,
		"/v2/team/app/blobs/sha256:" + strings.Repeat("a", 64): true, "/token": true} {
		req, _ := http.NewRequest(http.MethodGet, "https://registry.test"+path, nil)
		if got := New(Options{}).Hedgeable(req); got != want {
			t.Errorf("%s: hedgeable %t, want %t", path, got, want)
		}
	}
}
