package npm

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// maxPackument is the largest packument whose tarball URLs are rewritten
// (on the wire, and again once decoded); a larger one is served as it came.
const maxPackument = 32 << 20

// Present moves the tarball URLs of a packument a candidate registry
// served to a GET below the URL the client addressed. npm, pnpm and yarn
// copy a version's dist.tarball into the lockfile (package-lock.json's
// resolved, pnpm-lock.yaml's and yarn.lock's resolution), and npm moves only
// registry.npmjs.org's URLs to the configured registry, so a lockfile
// written during an outage would name the candidate for good: once the
// addressed registry is back and the candidate is gone, or wants
// credentials the client has only for the addressed one, npm ci fails.
// Moved, the tarball's URL is the addressed registry's, and while that is
// down the substitution of docs/behaviour.md §5.4 sends it back to exactly
// the candidate's URL it came from. Only a URL below the candidate's own
// URL is moved: a tarball it lists elsewhere (a CDN) has no URL at the
// addressed registry that leads to it. A packument that cannot be read is
// served as it came and not kept as a stale copy.
func (Format) Present(req *http.Request, resp *http.Response, rel string) bool {
	if resp.StatusCode != http.StatusOK || req.Method != http.MethodGet || !isJSON(resp.Header.Get("Content-Type")) {
		return true
	}
	from, okFrom := base(resp.Request.URL, rel)
	to, okTo := base(req.URL, rel)
	if !okFrom || !okTo || from == to {
		return true
	}
	return format.RewriteBody(resp, maxPackument, func(doc []byte) ([]byte, bool, error) {
		return moveTarballs(doc, from, to)
	})
}

// isJSON reports whether a Content-Type is a JSON document: a full
// packument (application/json) or npm's abbreviated one
// (application/vnd.npm.install-v1+json).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// base is u's upstream URL, u without rel at the end of its path, as
// "scheme://authority/path" in canonical form (no user information, no
// query). ok is false when u's path does not end with rel.
func base(u *url.URL, rel string) (string, bool) {
	p := u.EscapedPath()
	if !strings.HasSuffix(p, rel) {
		return "", false
	}
	host, port := hostport.Of(u)
	return hostport.Origin(u.Scheme, host, port) + strings.TrimSuffix(strings.TrimSuffix(p, rel), "/"), true
}

// moved is tarball moved from below the upstream URL from to below to, or
// "" when it is not below from.
func moved(tarball, from, to string) string {
	u, err := url.Parse(tarball)
	if err != nil || u.User != nil || u.Host == "" || u.Fragment != "" {
		return ""
	}
	host, port := hostport.Of(u)
	b := hostport.Origin(u.Scheme, host, port) + u.EscapedPath()
	if !strings.HasPrefix(b, from+"/") {
		return ""
	}
	out := to + b[len(from):]
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}

// moveTarballs rewrites versions.*.dist.tarball in doc, leaving every other
// byte as it is: the string literals are found by the decoder's offsets and
// replaced in place.
func moveTarballs(doc []byte, from, to string) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type span struct {
		start, end int64
		url        string
	}
	var spans []span
	err := walkObject(dec, func(key string) error {
		if key != "versions" {
			return skipValue(dec)
		}
		return walkObject(dec, func(string) error {
			return walkObject(dec, func(key string) error {
				if key != "dist" {
					return skipValue(dec)
				}
				return walkObject(dec, func(key string) error {
					if key != "tarball" {
						return skipValue(dec)
					}
					before := dec.InputOffset()
					tok, err := dec.Token()
					if err != nil {
						return err
					}
					if s, ok := tok.(string); ok {
						if m := moved(s, from, to); m != "" {
							start := before + int64(bytes.IndexByte(doc[before:dec.InputOffset()], '"'))
							spans = append(spans, span{start, dec.InputOffset(), m})
						}
						return nil
					}
					return skipRest(dec, tok)
				})
			})
		})
	})
	if err != nil {
		return nil, false, err
	}
	if len(spans) == 0 {
		return doc, false, nil
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	last := int64(0)
	for _, s := range spans {
		out.Write(doc[last:s.start])
		if err := enc.Encode(s.url); err != nil {
			return nil, false, err
		}
		out.Truncate(out.Len() - 1) // Encode's newline
		last = s.end
	}
	out.Write(doc[last:])
	return out.Bytes(), true, nil
}

// walkObject reads the value at dec; when it is an object, it calls each
// for every key, which must consume the key's value, else it skips the
// value (a version that is not an object, say, is nobody's business here).
func walkObject(dec *json.Decoder, each func(key string) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return skipRest(dec, tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := each(key); err != nil {
			return err
		}
	}
	_, err = dec.Token() // '}'
	return err
}

// skipValue reads one value at dec.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return skipRest(dec, tok)
}

// skipRest reads the rest of a value whose first token was tok.
func skipRest(dec *json.Decoder, tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
