// Package pypi is what the PyPI format adds to the fallback loop: a simple
// page served by another index has its relative file links made absolute,
// so the client fetches the files from the index that listed them.
package pypi

import (
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// Format is the PyPI format. It keeps no state.
type Format struct{ format.Plain }

var _ format.Format = Format{}

// Present rewrites the links of a simple page (PEP 503 HTML, PEP 691 JSON)
// that a candidate index served to a GET, against the URL it was asked,
// whatever content coding the candidate sent it in. A page it cannot make
// right is passed on as it came and reported not storable: kept, it would
// replace a good stale copy with links that point at the wrong index.
func (Format) Present(req *http.Request, resp *http.Response) bool {
	if resp.StatusCode != http.StatusOK || req.Method != http.MethodGet ||
		pypiPageKind(resp.Header.Get("Content-Type")) == pypiOther {
		return true
	}
	return rewrite(resp, resp.Request.URL)
}

// rewrite buffers a page of up to maxPyPIPage bytes (on the wire, and again
// once decoded), rewrites its links and encodes it again the way it came.
// It reports whether the page is right for the client now: a page with no
// relative link is, and keeps its bytes; a larger page, one that cannot be
// read whole, or one in an unknown or broken coding is not, and streams on
// untouched.
func rewrite(resp *http.Response, page *url.URL) bool {
	codings, err := pageCodings(resp.Header)
	if err != nil || resp.ContentLength > maxPyPIPage {
		return false
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPyPIPage+1))
	if err != nil || int64(len(raw)) > maxPyPIPage {
		resp.Body = format.NewPrefixedBody(raw, resp.Body)
		return false
	}
	resp.Body.Close()
	out, ok := rewritten(raw, codings, resp.Header.Get("Content-Type"), page)
	if out == nil {
		out = raw
	} else {
		// The candidate's validators and digests name the bytes it sent,
		// not these: an If-None-Match with its ETag must not make the
		// rewritten page pass for the index's own.
		for _, h := range []string{"Etag", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest"} {
			resp.Header.Del(h)
		}
	}
	resp.Body = format.NewBytesBody(out)
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.TransferEncoding = nil
	return ok
}

// rewritten is the page raw (in codings) with its links rewritten and
// encoded again, nil when nothing changed; ok is false when the page could
// not be read or rewritten.
func rewritten(raw []byte, codings []contentCoding, contentType string, page *url.URL) (out []byte, ok bool) {
	plain, codings, err := decode(raw, codings)
	if err != nil {
		return nil, false
	}
	out, changed, err := rewritePyPIPage(plain, contentType, page)
	if err != nil || !changed {
		return nil, err == nil
	}
	if out, err = encode(out, codings); err != nil {
		return nil, false
	}
	return out, true
}
