package npm

import (
	"encoding/json"
	"testing"
)

// TestMoveTarballs: only versions.*.dist.tarball URLs below the
// candidate's URL move, to the same path below the addressed URL; every
// other byte of the document stays.
func TestMoveTarballs(t *testing.T) {
	const from, to = "https://b.example/reg", "https://a.example"
	cases := []struct{ name, doc, want string }{
		{"moved", `{"versions":{"1.0.0":{"dist":{"tarball":"https://b.example/reg/x/-/x-1.0.0.tgz"}}}}`,
			`{"versions":{"1.0.0":{"dist":{"tarball":"https://a.example/x/-/x-1.0.0.tgz"}}}}`},
		{"scoped, escaped slash and query kept", `{"versions":{"1.0.0":{"dist":{"tarball":"https://B.example:443/reg/@s%2fx/-/x-1.0.0.tgz?a=1&b=2"}}}}`,
			`{"versions":{"1.0.0":{"dist":{"tarball":"https://a.example/@s%2fx/-/x-1.0.0.tgz?a=1&b=2"}}}}`},
		{"JSON escapes in the literal", `{"versions":{"1":{"dist":{"tarball":"https:\/\/b.example\/reg\/x.tgz"}}}}`,
			`{"versions":{"1":{"dist":{"tarball":"https://a.example/x.tgz"}}}}`},
		{"white space kept", "{ \"versions\" : { \"1\" : { \"dist\" : { \"tarball\" :\n \"https://b.example/reg/x.tgz\" } } } }",
			"{ \"versions\" : { \"1\" : { \"dist\" : { \"tarball\" :\n \"https://a.example/x.tgz\" } } } }"},
		{"elsewhere on the host", `{"versions":{"1":{"dist":{"tarball":"https://b.example/other/x.tgz"}}}}`, ""},
		{"a path that only starts like the base", `{"versions":{"1":{"dist":{"tarball":"https://b.example/registry/x.tgz"}}}}`, ""},
		{"another scheme", `{"versions":{"1":{"dist":{"tarball":"http://b.example/reg/x.tgz"}}}}`, ""},
		{"a CDN", `{"versions":{"1":{"dist":{"tarball":"https://cdn.example/reg/x.tgz"}}}}`, ""},
		{"credentials in the URL", `{"versions":{"1":{"dist":{"tarball":"https://u:p@b.example/reg/x.tgz"}}}}`, ""},
		{"not under versions", `{"readme":"https://b.example/reg/x.tgz","dist":{"tarball":"https://b.example/reg/x.tgz"}}`, ""},
		{"odd shapes", `{"versions":{"1":null,"2":[{"dist":{}}],"3":{"dist":{"tarball":7}},"4":{"dist":"x"}},"x":[1,{"a":[]}]}`, ""},
		{"not an object", `["https://b.example/reg/x.tgz"]`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, changed, err := moveTarballs([]byte(c.doc), from, to)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if changed || string(out) != c.doc {
					t.Fatalf("changed to %s", out)
				}
				return
			}
			if !changed || string(out) != c.want {
				t.Fatalf("got %s (changed %v)\nwant %s", out, changed, c.want)
			}
		})
	}
	for _, bad := range []string{`{"versions":{"1":{"dist":{"tarball":`, `{"versions":}`, `not json`} {
		if _, _, err := moveTarballs([]byte(bad), from, to); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzMoveTarballs: a document that parses still parses the same once
// rewritten, apart from the tarball URLs.
func FuzzMoveTarballs(f *testing.F) {
	f.Add(`{"versions":{"1.0.0":{"dist":{"tarball":"https://b.example/reg/x/-/x-1.0.0.tgz"}}}}`)
	f.Add(`{"versions":{"1":{"dist":{"tarball":"https:\/\/b.example\/reg\/x.tgz\u0026"}},"2":{}}}`)
	f.Fuzz(func(t *testing.T, doc string) {
		out, changed, err := moveTarballs([]byte(doc), "https://b.example/reg", "https://a.example")
		if err != nil || !changed {
			return
		}
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			return
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("rewritten %q does not parse: %v", out, err)
		}
	})
}
