package pypi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"

	"golang.org/x/net/html"

	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// maxPyPIPage is the largest PyPI simple page rewritePyPIPage accepts; a
// larger one is passed on unchanged (docs/behaviour.md §5.4).
const maxPyPIPage = 32 << 20

// errPageTooLarge reports a page over maxPyPIPage.
var errPageTooLarge = errors.New("pypi simple page too large to rewrite")

// pypiKind says which PEP a simple page follows.
type pypiKind int

const (
	pypiOther pypiKind = iota
	pypiHTML           // PEP 503
	pypiJSON           // PEP 691
)

// rewritePyPIPage makes the relative file links of a PyPI simple page
// absolute against pageURL, the URL the substituted index served it from.
// The client asked another index, so without this it would resolve the
// links against the wrong host. HTML pages (PEP 503) have the href of <a>
// elements rewritten, honouring the first <base href>, and keep every other
// byte; JSON pages (PEP 691) have files[].url rewritten and are re-encoded.
// Absolute URLs are kept as they are, fragments (#sha256=…) are kept.
// Other content types, and any failure, return body unchanged with false.
func rewritePyPIPage(body []byte, contentType string, pageURL *url.URL) ([]byte, bool, error) {
	kind := pypiPageKind(contentType)
	if kind == pypiOther {
		return body, false, nil
	}
	if pageURL == nil {
		return body, false, errors.New("rewriting pypi page: no page URL")
	}
	if len(body) > maxPyPIPage {
		return body, false, fmt.Errorf("%w: %d bytes", errPageTooLarge, len(body))
	}
	// Userinfo of the candidate's URL must never reach the client's page.
	base := format.WithoutUserinfo(pageURL)
	if kind == pypiJSON {
		return rewritePyPIJSON(body, base)
	}
	out, changed := rewritePyPIHTML(body, base)
	return out, changed, nil
}

func pypiPageKind(contentType string) pypiKind {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt, _, _ = strings.Cut(contentType, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	switch mt {
	case "text/html", "application/vnd.pypi.simple.v1+html", "application/vnd.pypi.simple.latest+html":
		return pypiHTML
	case "application/vnd.pypi.simple.v1+json", "application/vnd.pypi.simple.latest+json":
		return pypiJSON
	}
	return pypiOther
}

// rewritePyPIHTML walks the page with the x/net/html tokenizer, whose raw
// tokens partition the input, and copies them through, replacing only the
// href value of <a> elements and of the first <base href>. The output
// buffer is only allocated once something changes.
func rewritePyPIHTML(body []byte, page *url.URL) ([]byte, bool) {
	docBase, hasBase := documentBase(body, page)
	var out []byte
	off := 0
	z := html.NewTokenizer(bytes.NewReader(body))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			break
		}
		// Slice the caller's body rather than z.Raw(): TagName and TagAttr
		// lower-case the tokenizer's own buffer in place.
		raw := body[off : off+len(z.Raw())]
		var edit hrefEdit
		var ok bool
		if tt == html.StartTagToken || tt == html.SelfClosingTagToken {
			switch name, hasAttr := z.TagName(); {
			case !hasAttr:
			case string(name) == "a":
				edit, ok = hrefRewrite(z, raw, docBase)
			case string(name) == "base" && hasBase:
				// Only the first <base href> counts; it resolves against the
				// page and must itself become absolute for the client.
				edit, ok = hrefRewrite(z, raw, page)
				hasBase = !hasHrefAttr(raw)
			}
		}
		if ok && out == nil {
			out = make([]byte, 0, len(body)+len(body)/4)
			out = append(out, body[:off]...)
		}
		switch {
		case ok:
			out = edit.appendTo(out, raw)
		case out != nil:
			out = append(out, raw...)
		}
		off += len(raw)
	}
	if out == nil {
		return body, false
	}
	// Bytes the tokenizer never returned (an unterminated tag at EOF).
	return append(out, body[off:]...), true
}

// documentBase returns the URL links resolve against: the first <base href>
// of the document resolved against page, else page. It reports whether a
// usable <base href> exists. Most index pages have none, so a cheap scan
// for "<base" avoids a second tokenizer pass.
func documentBase(body []byte, page *url.URL) (*url.URL, bool) {
	if !containsFold(body, "<base") {
		return page, false
	}
	z := html.NewTokenizer(bytes.NewReader(body))
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return page, false
		}
		if tt != html.StartTagToken && tt != html.SelfClosingTagToken {
			continue
		}
		if name, hasAttr := z.TagName(); !hasAttr || string(name) != "base" {
			continue
		}
		href, ok := firstHref(z)
		if !ok {
			continue
		}
		s := trimHTMLSpace(string(href))
		ref, err := url.Parse(s)
		if err != nil || s == "" {
			return page, false
		}
		return page.ResolveReference(ref), true
	}
}

// firstHref returns the tokenizer's (entity-decoded) value of the current
// tag's href attribute; the tokenizer keeps only the first of duplicates.
// The slice points into the tokenizer's buffer.
func firstHref(z *html.Tokenizer) ([]byte, bool) {
	for {
		key, val, more := z.TagAttr()
		if string(key) == "href" {
			return val, true
		}
		if !more {
			return nil, false
		}
	}
}

// hrefEdit is a new, escaped value for the attribute value at span.
type hrefEdit struct {
	span  attrSpan
	value string
}

// appendTo appends raw to dst with the edit applied. An unquoted value is
// given quotes: the new URL may hold bytes that would end it.
func (e hrefEdit) appendTo(dst, raw []byte) []byte {
	dst = append(dst, raw[:e.span.start]...)
	if e.span.quote == 0 {
		dst = append(dst, '"')
		dst = append(dst, e.value...)
		dst = append(dst, '"')
	} else {
		dst = append(dst, e.value...)
	}
	return append(dst, raw[e.span.end:]...)
}

// hrefRewrite works out how to make the href of the tag raw absolute
// against base; false means the tag stays as it is. The decoded value
// comes from the tokenizer (attribute-mode entity rules), its position in
// raw from hrefValueSpan; both must agree that the tag has an href.
func hrefRewrite(z *html.Tokenizer, raw []byte, base *url.URL) (hrefEdit, bool) {
	span, ok := hrefValueSpan(raw)
	// Absolute links, the common case (pypi.org), are recognised in the raw
	// bytes without allocating: a scheme holds no '&', so entity decoding
	// cannot change it, and resolveRef would leave such a link alone.
	if !ok || hasScheme(bytes.Trim(raw[span.start:span.end], htmlSpace)) {
		return hrefEdit{}, false
	}
	val, ok := firstHref(z)
	if !ok {
		return hrefEdit{}, false
	}
	abs, changed := resolveRef(base, string(val))
	if !changed {
		return hrefEdit{}, false
	}
	return hrefEdit{span: span, value: html.EscapeString(abs)}, true
}

// hasScheme reports whether ref starts with a URL scheme and a colon, by
// the same rule as net/url: such a reference is absolute or unparsable,
// and resolveRef leaves both alone.
func hasScheme(ref []byte) bool {
	for i, c := range ref {
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.':
			if i == 0 {
				return false
			}
		case c == ':':
			return i > 0
		default:
			return false
		}
	}
	return false
}

func hasHrefAttr(raw []byte) bool {
	_, ok := hrefValueSpan(raw)
	return ok
}

// resolveRef resolves ref against base and reports whether the result
// differs from ref. Absolute and unparsable references are left alone.
func resolveRef(base *url.URL, ref string) (string, bool) {
	u, err := url.Parse(trimHTMLSpace(ref))
	if err != nil || u.Scheme != "" {
		return ref, false
	}
	abs := base.ResolveReference(u).String()
	return abs, abs != ref
}

// htmlSpace is the ASCII whitespace HTML trims around URLs.
const htmlSpace = " \t\n\f\r"

func trimHTMLSpace(s string) string {
	return strings.Trim(s, htmlSpace)
}

// containsFold reports whether b contains the ASCII string s, compared
// case-insensitively, without copying b.
func containsFold(b []byte, s string) bool {
	for len(b) >= len(s) {
		i := bytes.IndexByte(b, s[0])
		if i < 0 || len(b)-i < len(s) {
			return false
		}
		if bytes.EqualFold(b[i:i+len(s)], []byte(s)) {
			return true
		}
		b = b[i+1:]
	}
	return false
}

// rewritePyPIJSON rewrites files[].url of a PEP 691 page. Everything else is
// kept as raw JSON; the document is re-encoded only when a URL changed.
func rewritePyPIJSON(body []byte, base *url.URL) ([]byte, bool, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return body, false, fmt.Errorf("rewriting pypi json page: %w", err)
	}
	var files []json.RawMessage
	if err := json.Unmarshal(doc["files"], &files); err != nil {
		return body, false, nil // no files list: nothing of ours to rewrite.
	}
	changed := false
	for i, f := range files {
		if nf, ok := rewriteJSONFile(f, base); ok {
			files[i], changed = nf, true
		}
	}
	if !changed {
		return body, false, nil
	}
	var err error
	if doc["files"], err = encodeJSON(files); err != nil {
		return body, false, fmt.Errorf("rewriting pypi json page: %w", err)
	}
	out, err := encodeJSON(doc)
	if err != nil {
		return body, false, fmt.Errorf("rewriting pypi json page: %w", err)
	}
	return out, true, nil
}

// rewriteJSONFile rewrites the url of one files[] entry; entries that are
// not objects or whose url is not a string are left alone.
func rewriteJSONFile(f json.RawMessage, base *url.URL) (json.RawMessage, bool) {
	var entry map[string]json.RawMessage
	if err := json.Unmarshal(f, &entry); err != nil {
		return nil, false
	}
	// Decoding into any, not string: a JSON null would decode into a
	// string as "" and be "resolved" to the page URL.
	var v any
	if err := json.Unmarshal(entry["url"], &v); err != nil {
		return nil, false
	}
	u, ok := v.(string)
	if !ok {
		return nil, false
	}
	abs, changed := resolveRef(base, u)
	if !changed {
		return nil, false
	}
	var err error
	if entry["url"], err = encodeJSON(abs); err != nil {
		return nil, false
	}
	out, err := encodeJSON(entry)
	if err != nil {
		return nil, false
	}
	return out, true
}

// encodeJSON marshals v without HTML escaping, so URLs keep a readable "&".
func encodeJSON(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
