package coalesce

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestKeyRefuses(t *testing.T) {
	get := func(mod func(*http.Request)) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://repo.test/g/a/1/a-1.jar", nil)
		if mod != nil {
			mod(r)
		}
		return r
	}
	set := func(k, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set(k, v) } }
	for _, c := range []struct {
		name string
		req  *http.Request
		ok   bool
	}{
		{"plain GET", get(nil), true},
		{"HEAD", httptest.NewRequest(http.MethodHead, "http://repo.test/a", nil), false},
		{"POST", httptest.NewRequest(http.MethodPost, "http://repo.test/a", nil), false},
		{"a body", httptest.NewRequest(http.MethodGet, "http://repo.test/a", strings.NewReader("x")), false},
		{"Range", get(set("Range", "bytes=0-99")), false},
		{"If-Range", get(set("If-Range", `"e1"`)), false},
		{"a websocket", get(set("Upgrade", "websocket")), false},
	} {
		if _, ok := Key("base", c.req, ""); ok != c.ok {
			t.Errorf("%s: ok %v, want %v", c.name, ok, c.ok)
		}
	}
}

// TestFresh: no-cache in either header, in any case, asks for a fresh
// answer; max-age=0 alone does not (it allows revalidation).
func TestFresh(t *testing.T) {
	for _, c := range []struct {
		header, value string
		fresh         bool
	}{
		{"Cache-Control", "max-age=0, no-cache", true},
		{"Cache-Control", "NO-CACHE", true},
		{"Cache-Control", "no-cache, no-store", true},
		{"Pragma", "no-cache", true},
		{"Cache-Control", "max-age=0", false},
		{"Cache-Control", "no-store", false},
		{"", "", false},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://repo.test/a", nil)
		if c.header != "" {
			r.Header.Set(c.header, c.value)
		}
		if _, ok := Key("base", r, ""); !ok {
			t.Errorf("%s: %s: refused", c.header, c.value)
		}
		if got := Fresh(r); got != c.fresh {
			t.Errorf("%s: %s: fresh %v, want %v", c.header, c.value, got, c.fresh)
		}
	}
}

// TestKeyTellsRequestsApart: requests share a key only when everything an
// answer depends on is the same.
func TestKeyTellsRequestsApart(t *testing.T) {
	base := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "http://repo.test/g/a.jar?x=1", nil)
		r.Header.Set("Accept-Encoding", "gzip")
		r.Header.Set("User-Agent", "maven")
		return r
	}
	key := func(stale string, r *http.Request, cred string) string {
		k, ok := Key(stale, r, cred)
		if !ok {
			t.Fatal("refused")
		}
		return k
	}
	ref := key("s", base(), "c1")
	same := base()
	same.Header.Set("User-Agent", "gradle") // in no key: an answer that varies by it says so
	same.RemoteAddr = "10.0.0.9:4242"
	if key("s", same, "c1") != ref {
		t.Error("requests that differ only in User-Agent and address do not share a key")
	}
	for name, k := range map[string]string{
		"stale key":       key("t", base(), "c1"),
		"credentials":     key("s", base(), "c2"),
		"no credentials":  key("s", base(), ""),
		"query":           key("s", withURL(base(), "http://repo.test/g/a.jar?x=2"), "c1"),
		"host":            key("s", withHost(base(), "mirror.test"), "c1"),
		"Accept-Encoding": key("s", withHeader(base(), "Accept-Encoding", "br"), "c1"),
		"If-None-Match":   key("s", withHeader(base(), "If-None-Match", `"e1"`), "c1"),
		"If-Modified":     key("s", withHeader(base(), "If-Modified-Since", "Mon, 01 Jan 2024 00:00:00 GMT"), "c1"),
	} {
		if k == ref {
			t.Errorf("%s: a different request shares the key", name)
		}
	}
	// Fields are written with their lengths: moving bytes from one field
	// to the next makes another key.
	if key("ab", base(), "c") == key("a", base(), "bc") {
		t.Error("two different requests spell one key")
	}
}

func withURL(r *http.Request, u string) *http.Request {
	n := httptest.NewRequest(http.MethodGet, u, nil)
	n.Header = r.Header
	return n
}

func withHost(r *http.Request, h string) *http.Request { r.Host = h; return r }

func withHeader(r *http.Request, k, v string) *http.Request { r.Header.Set(k, v); return r }
