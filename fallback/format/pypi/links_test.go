package pypi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

const (
	htmlType = "text/html; charset=utf-8"
	jsonType = "application/vnd.pypi.simple.v1+json"
	sha      = "#sha256=0123456789abcdef"
)

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRewritePyPIPageHTML(t *testing.T) {
	tests := []struct {
		name, page, in, want string
	}{
		{
			name: "relative with fragment",
			in:   `<a href="../../packages/x.whl` + sha + `">x.whl</a>`,
			want: `<a href="http://b.test/packages/x.whl` + sha + `">x.whl</a>`,
		},
		{
			name: "single quotes kept",
			in:   `<a href='x-1.0.tar.gz'>x</a>`,
			want: `<a href='http://b.test/simple/x/x-1.0.tar.gz'>x</a>`,
		},
		{
			name: "unquoted value gets quotes",
			in:   `<a href=/files/x.whl data-yanked>x</a>`,
			want: `<a href="http://b.test/files/x.whl" data-yanked>x</a>`,
		},
		{
			name: "spaces around equals, upper-case name, self-closing",
			in:   "<A class=c HREF = \"x.whl\"/>",
			want: "<A class=c HREF = \"http://b.test/simple/x/x.whl\"/>",
		},
		{
			name: "entities decoded for resolution and re-escaped",
			in:   `<a href="x.whl?a=1&amp;b=2&copy=3">x</a>`,
			want: `<a href="http://b.test/simple/x/x.whl?a=1&amp;b=2&amp;copy=3">x</a>`,
		},
		{
			name: "data attributes untouched, even when they look like hrefs",
			in:   `<a data-href="rel" data-requires-python="&gt;=3.8" href="x.whl" data-dist-info-metadata="sha256=ab">x</a>`,
			want: `<a data-href="rel" data-requires-python="&gt;=3.8" href="http://b.test/simple/x/x.whl" data-dist-info-metadata="sha256=ab">x</a>`,
		},
		{
			name: "absolute links untouched",
			in:   `<a href="https://files.pythonhosted.org/packages/x.whl` + sha + `">x</a>`,
			want: `<a href="https://files.pythonhosted.org/packages/x.whl` + sha + `">x</a>`,
		},
		{
			name: "base href is honoured and made absolute",
			in:   "<html><head><base href=\"../../files/\"></head><body>\n<a href=\"x.whl\">x</a><a href=\"https://o.test/y\">y</a>",
			want: "<html><head><base href=\"http://b.test/files/\"></head><body>\n<a href=\"http://b.test/files/x.whl\">x</a><a href=\"https://o.test/y\">y</a>",
		},
		{
			name: "absolute base applies to links before it; later bases ignored",
			in:   `<a href="x.whl">x</a><BASE HREF="https://cdn.test/p/"><base href="/ignored/">`,
			want: `<a href="https://cdn.test/p/x.whl">x</a><BASE HREF="https://cdn.test/p/"><base href="/ignored/">`,
		},
		{
			name: "links in comments, scripts and other attributes untouched",
			in:   `<!-- <a href="c.whl"> --><script>"<a href='s.whl'>"</script><link href="style.css"><a name="n">`,
			want: `<!-- <a href="c.whl"> --><script>"<a href='s.whl'>"</script><link href="style.css"><a name="n">`,
		},
		{
			name: "first of duplicate hrefs, as parsers see it",
			in:   `<a href="one.whl" href="two.whl">`,
			want: `<a href="http://b.test/simple/x/one.whl" href="two.whl">`,
		},
		{
			name: "userinfo of the page URL never leaks",
			page: "http://user:pass@b.test/simple/x/",
			in:   `<a href="x.whl">`,
			want: `<a href="http://b.test/simple/x/x.whl">`,
		},
		{
			name: "unterminated tag at end of input kept",
			in:   `<a href="x.whl">x</a><a href="y`,
			want: `<a href="http://b.test/simple/x/x.whl">x</a><a href="y`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := tt.page
			if page == "" {
				page = "http://b.test/simple/x/"
			}
			got, changed, err := rewritePyPIPage([]byte(tt.in), htmlType, mustURL(t, page))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			if changed != (tt.in != tt.want) {
				t.Errorf("changed = %v", changed)
			}
		})
	}
}

func TestRewritePyPIPageJSON(t *testing.T) {
	page := mustURL(t, "https://b.test/simple/x/")
	in := `{"meta":{"api-version":"1.1"},"name":"x","files":[` +
		`{"filename":"x.whl","url":"../../packages/x.whl` + sha + `","hashes":{"sha256":"ab"},"requires-python":">=3.8","yanked":false,"size":12345678901234567890},` +
		`{"filename":"y.whl","url":"https://files.test/y.whl?a=1&b=2"},` +
		`{"filename":"z.whl","url":42},"not an object"],"versions":["1.0"]}`
	got, changed, err := rewritePyPIPage([]byte(in), jsonType, page)
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v", changed, err)
	}
	var doc struct {
		Meta  map[string]string `json:"meta"`
		Name  string            `json:"name"`
		Files []json.RawMessage `json:"files"`
		Vers  []string          `json:"versions"`
	}
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if doc.Name != "x" || doc.Meta["api-version"] != "1.1" || len(doc.Vers) != 1 || len(doc.Files) != 4 {
		t.Errorf("other fields not kept: %s", got)
	}
	for _, want := range []string{
		`"url":"https://b.test/packages/x.whl` + sha + `"`,
		`"url":"https://files.test/y.whl?a=1&b=2"`,
		`"size":12345678901234567890`,
		`"requires-python":">=3.8"`,
		`"url":42`,
		`"not an object"`,
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
}

func TestRewritePyPIPageUnchanged(t *testing.T) {
	page := mustURL(t, "https://b.test/simple/x/")
	tests := []struct {
		name, contentType, body string
		wantErr                 error
	}{
		{"json all absolute", jsonType, `{"files":[{"url":"https://f.test/x.whl"}],"name":"x"}`, nil},
		{"json without files", jsonType, `{"meta":{"api-version":"1.0"},"projects":[{"name":"x"}]}`, nil},
		{"unknown content type", "application/octet-stream", `<a href="x.whl">`, nil},
		{"no content type", "", `<a href="x.whl">`, nil},
		{"html all absolute", "application/vnd.pypi.simple.v1+html", `<a href="https://f.test/x.whl">`, nil},
		{"too large", htmlType, strings.Repeat(" ", maxPyPIPage+1), errPageTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, err := rewritePyPIPage([]byte(tt.body), tt.contentType, page)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if changed || string(got) != tt.body {
				t.Errorf("body changed (changed=%v)", changed)
			}
		})
	}
	if _, _, err := rewritePyPIPage([]byte(`{"files":`), jsonType, page); err == nil {
		t.Error("invalid JSON: no error")
	}
}

// allHrefsAbsolute reports whether every <a>/<base> href the tokenizer sees
// parses as an absolute URL: then the rewrite must leave the page alone.
func allHrefsAbsolute(body []byte) bool {
	z := html.NewTokenizer(bytes.NewReader(body))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return true
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			if !hasAttr || (string(name) != "a" && string(name) != "base") {
				continue
			}
			if href, ok := firstHref(z); ok {
				if u, err := url.Parse(trimHTMLSpace(string(href))); err == nil && u.Scheme == "" {
					return false
				}
			}
		}
	}
}

// checkHrefSpans compares hrefValueSpan with the tokenizer on every start
// tag whose href needs no decoding: both must find the same value.
func checkHrefSpans(t *testing.T, body []byte) {
	z := html.NewTokenizer(bytes.NewReader(body))
	off := 0
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return
		}
		raw := body[off : off+len(z.Raw())]
		off += len(raw)
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		if _, hasAttr := z.TagName(); !hasAttr {
			continue
		}
		val, tokOK := firstHref(z)
		span, ok := hrefValueSpan(raw)
		if ok && !tokOK {
			t.Fatalf("scanner found an href the tokenizer did not in %q", raw)
		}
		if !ok || bytes.ContainsAny(val, "\x00\r\ufffd") || bytes.ContainsAny(raw[span.start:span.end], "&\x00\r") {
			continue
		}
		if got := raw[span.start:span.end]; !bytes.Equal(got, val) {
			t.Fatalf("scanner found href %q, tokenizer %q, in %q", got, val, raw)
		}
	}
}

func allJSONURLsAbsolute(body []byte) bool {
	var doc struct{ Files []json.RawMessage }
	if json.Unmarshal(body, &doc) != nil {
		return true
	}
	for _, f := range doc.Files {
		var entry map[string]any
		if json.Unmarshal(f, &entry) != nil {
			continue
		}
		if s, ok := entry["url"].(string); ok {
			if u, err := url.Parse(trimHTMLSpace(s)); err == nil && u.Scheme == "" {
				return false
			}
		}
	}
	return true
}

func FuzzRewritePyPIPage(f *testing.F) {
	seeds := []struct {
		json bool
		body string
	}{
		{false, `<!DOCTYPE html><html><body><a href="../../packages/x.whl` + sha + `" data-requires-python="&gt;=3.8">x</a><br/></body></html>`},
		{false, `<base href="../files/"><a href='y.tar.gz'>y</a><a href=z.zip>z</a>`},
		{false, `<a href="https://files.pythonhosted.org/packages/x.whl">x</a>`},
		{false, `<a =href="x" href = 'y' href=z/ >`},
		{false, "<a href=\"\tx\n\">< a href=<a/href=/x><a href"},
		{false, `<a href="&amp;&copy=1&#x41;">`},
		{true, `{"meta":{"api-version":"1.1"},"name":"x","files":[{"filename":"x","url":"../x.whl#sha256=ab"}]}`},
		{true, `{"files":[{"url":"https://f.test/x"},{"url":null},1,[]]}`},
		{true, `{"files":{"url":"x"}}`},
	}
	for _, s := range seeds {
		f.Add(s.json, []byte(s.body))
	}
	page := mustURL(f, "https://user:pw@b.test/simple/x/?q=1")
	f.Fuzz(func(t *testing.T, isJSON bool, body []byte) {
		ct, absolute := htmlType, allHrefsAbsolute
		if isJSON {
			ct, absolute = jsonType, allJSONURLsAbsolute
		}
		if !isJSON {
			checkHrefSpans(t, body)
		}
		orig := bytes.Clone(body)
		out, changed, err := rewritePyPIPage(body, ct, page)
		if !bytes.Equal(body, orig) {
			t.Fatal("input modified")
		}
		if (err != nil || !changed) && !bytes.Equal(out, body) {
			t.Fatalf("unchanged result differs from input (err=%v)", err)
		}
		if absolute(body) && changed {
			t.Fatalf("absolute-only input was rewritten:\n%q\n%q", body, out)
		}
		if !changed {
			return
		}
		if bytes.Contains(out, []byte("pw@")) {
			t.Fatalf("page credentials leaked: %q", out)
		}
		again, changed2, err := rewritePyPIPage(out, ct, page)
		if err != nil || changed2 {
			t.Fatalf("second rewrite changed=%v err=%v:\n%q\n%q\n%q", changed2, err, body, out, again)
		}
	})
}

// pypiTestPage builds an index page of about size bytes with relative
// (or absolute) links, like a large project's simple page.
func pypiTestPage(size int, absolute bool) []byte {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html><head><title>Links for big</title></head><body><h1>Links for big</h1>\n")
	prefix := "../../packages/"
	if absolute {
		prefix = "https://files.pythonhosted.org/packages/"
	}
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, `<a href="%sab/cd/big-1.0.%d-py3-none-any.whl#sha256=%064x" data-requires-python="&gt;=3.8" data-dist-info-metadata="sha256=%064x">big-1.0.%d-py3-none-any.whl</a><br/>`+"\n", prefix, i, i, i, i)
	}
	b.WriteString("</body></html>\n")
	return b.Bytes()
}

func BenchmarkRewritePyPIPage(b *testing.B) {
	page := mustURL(b, "https://b.test/simple/big/")
	for _, bc := range []struct {
		name     string
		absolute bool
	}{{"relative", false}, {"absolute", true}} {
		body := pypiTestPage(1<<20, bc.absolute)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, changed, err := rewritePyPIPage(body, htmlType, page); err != nil || changed == bc.absolute {
					b.Fatalf("changed=%v err=%v", changed, err)
				}
			}
		})
	}
}
