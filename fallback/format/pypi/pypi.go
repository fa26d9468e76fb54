// Package pypi is what the PyPI format adds to the fallback loop: a simple
// page served by another index has its relative file links made absolute,
// so the client fetches the files from the index that listed them.
package pypi

import (
	"net/http"

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
func (Format) Present(req *http.Request, resp *http.Response, _ string) bool {
	if resp.StatusCode != http.StatusOK || req.Method != http.MethodGet ||
		pypiPageKind(resp.Header.Get("Content-Type")) == pypiOther {
		return true
	}
	page, contentType := resp.Request.URL, resp.Header.Get("Content-Type")
	return format.RewriteBody(resp, maxPyPIPage, func(plain []byte) ([]byte, bool, error) {
		return rewritePyPIPage(plain, contentType, page)
	})
}
