package urlnorm

import (
	"net/url"
	"strings"
	"testing"
)

func TestPath(t *testing.T) {
	for in, want := range map[string]string{
		"/@acme%2futil":        "/@acme%2Futil",
		"/@acme%2Futil":        "/@acme%2Futil",
		"/a%e2%82%ac":          "/a%E2%82%AC",
		"/no/escapes":          "/no/escapes",
		"/bad%zz/and%2":        "/bad%zz/and%2",
		"/%%2f":                "/%%2F",
		"/already%2F%3A/upper": "/already%2F%3A/upper",
	} {
		if got := Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzPath: the rule changes only the case of hex digits after a %, so the
// path still means the same bytes, and it is idempotent.
func FuzzPath(f *testing.F) {
	for _, s := range []string{"/@acme%2futil", "/%", "/%a", "%%%2f2f", "/x%c3%a9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got := Path(p)
		if Path(got) != got || len(got) != len(p) || !strings.EqualFold(got, p) {
			t.Fatalf("Path(%q) = %q", p, got)
		}
		a, errA := url.PathUnescape(p)
		b, errB := url.PathUnescape(got)
		if (errA == nil) != (errB == nil) || a != b {
			t.Fatalf("Path(%q) = %q changed the bytes: %q vs %q", p, got, a, b)
		}
	})
}
