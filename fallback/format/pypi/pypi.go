// Package pypi is what the PyPI format adds to the fallback loop: a simple
// page served by another index has its relative file links made absolute,
// so the client fetches the files from the index that listed them.
package pypi

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// Format is the PyPI format. It keeps no state.
type Format struct{ format.Plain }

var _ format.Format = Format{}

// Present rewrites the links of a simple page (PEP 503 HTML, PEP 691 JSON)
// that a candidate index served to a GET, against the URL it was asked.
// It does not yet say when a page could not be rewritten
// (format.Presented.NotStorable).
func (Format) Present(req *http.Request, resp *http.Response) format.Presented {
	if resp.StatusCode == http.StatusOK && req.Method == http.MethodGet &&
		pypiPageKind(resp.Header.Get("Content-Type")) != pypiOther {
		rewrite(resp, resp.Request.URL)
	}
	return format.Presented{}
}

// rewrite buffers a page up to maxPyPIPage and rewrites its links. A larger
// page, or one that cannot be read whole, streams on untouched.
func rewrite(resp *http.Response, page *url.URL) {
	if resp.ContentLength > maxPyPIPage {
		return
	}
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		// Compressed pages pass through untouched: rewriting them would
		// mean decompressing on the hot path.
		return
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxPyPIPage+1))
	if err != nil || int64(len(buf)) > maxPyPIPage {
		resp.Body = format.NewPrefixedBody(buf, resp.Body)
		return
	}
	resp.Body.Close()
	out, changed, err := rewritePyPIPage(buf, resp.Header.Get("Content-Type"), page)
	if err != nil || !changed {
		out = buf
	}
	resp.Body = format.NewBytesBody(out)
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.TransferEncoding = nil
}
