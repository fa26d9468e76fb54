package hostport

import (
	"net/url"
	"testing"
)

func TestCanonicalForms(t *testing.T) {
	hosts := map[string]string{
		"Registry.NPMjs.org.":  "registry.npmjs.org",
		"registry.npmjs.org..": "registry.npmjs.org",
		"[::1]":                "::1",
		"[FE80::1]":            "fe80::1",
		"pypi.org":             "pypi.org",
	}
	for in, want := range hosts {
		if got := Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
	urls := []struct{ raw, host, port, origin string }{
		{"https://Registry.NPMjs.org./lodash", "registry.npmjs.org", "443", "https://registry.npmjs.org"},
		{"http://registry.npmjs.org:443/lodash", "registry.npmjs.org", "443", "http://registry.npmjs.org:443"},
		{"http://REPO.test:80/m2", "repo.test", "80", "http://repo.test"},
		{"https://[::1]:8443/x", "::1", "8443", "https://[::1]:8443"},
		{"https://[::1]/x", "::1", "443", "https://[::1]"},
		{"ftp://files.test/x", "files.test", "", "ftp://files.test"},
	}
	for _, tc := range urls {
		u, err := url.Parse(tc.raw)
		if err != nil {
			t.Fatal(err)
		}
		host, port := Of(u)
		if host != tc.host || port != tc.port {
			t.Errorf("Of(%s) = %q, %q; want %q, %q", tc.raw, host, port, tc.host, tc.port)
		}
		if got := Origin(u.Scheme, host, port); got != tc.origin {
			t.Errorf("Origin of %s = %q, want %q", tc.raw, got, tc.origin)
		}
	}
	splits := []struct{ in, def, host, port string }{
		{"Registry.NPMjs.org.:443", "", "registry.npmjs.org", "443"},
		{"[::1]:9000", "", "::1", "9000"},
		{"mirror.example", "443", "mirror.example", "443"},
		{"[::1]", "443", "::1", "443"},
	}
	for _, tc := range splits {
		host, port, err := Split(tc.in, tc.def)
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("Split(%q, %q) = %q, %q, %v; want %q, %q", tc.in, tc.def, host, port, err, tc.host, tc.port)
		}
	}
	for _, bad := range []string{"mirror.example", "::1"} {
		if _, _, err := Split(bad, ""); err == nil {
			t.Errorf("Split(%q, \"\") accepted an address without a port", bad)
		}
	}
	if _, _, err := Split("::1", "443"); err == nil {
		t.Error("Split accepted a bare IPv6 literal, whose last group would be read as a port")
	}
}

// FuzzHostIsIdempotent: a canonical host is its own canonical form, so
// canonicalising twice can never make two keys of one host.
func FuzzHostIsIdempotent(f *testing.F) {
	for _, s := range []string{"A.b.", "[::1]", "x..", "", "[", "]", ".", "Ⅸ.test", "[].", "[[x]]", "x.]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if once := Host(h); Host(once) != once {
			t.Fatalf("Host(%q) = %q, but Host of that is %q", h, once, Host(once))
		}
	})
}
