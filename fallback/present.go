package fallback

import (
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nora-breaker/nora-breaker/config"
)

// present turns a candidate's successful answer into the client's answer:
// it names the key that served, drops cookies (a session the candidate
// opened for the proxy's configured credentials is not the client's, who
// could otherwise replay it to the candidate), makes a relative Location
// absolute against the candidate, and for PyPI pages makes relative file
// links absolute so the client fetches files from the index that listed them.
func (c *Chain) present(r Request, cand *config.Upstream, resp *http.Response) *http.Response {
	resp.Header.Set("X-Nora-Upstream", cand.Key)
	resp.Header.Del("Set-Cookie")
	resp.Header.Del("Set-Cookie2")
	page := *resp.Request.URL
	absoluteLocation(resp.Header, &page)
	if cand.Format == "pypi" && resp.StatusCode == http.StatusOK && r.Client.Method == http.MethodGet &&
		pypiPageKind(resp.Header.Get("Content-Type")) != pypiOther {
		c.rewritePyPI(resp, &page)
	}
	return resp
}

// rewritePyPI buffers a page up to maxPyPIPage and rewrites its links. A
// larger page, or one that cannot be read whole, streams on untouched.
func (c *Chain) rewritePyPI(resp *http.Response, page *url.URL) {
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
		resp.Body = newPrefixedBody(buf, resp.Body)
		return
	}
	resp.Body.Close()
	out, changed, err := rewritePyPIPage(buf, resp.Header.Get("Content-Type"), page)
	if err != nil || !changed {
		out = buf
	}
	resp.Body = newBytesBody(out)
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.TransferEncoding = nil
}

// dockerScope derives the pull scope from a registry path when the
// challenge named none: /v2/<name>/manifests/<ref> or /v2/<name>/blobs/<d>.
func dockerScope(rel string) []string {
	p := strings.TrimPrefix(rel, "/v2/")
	if p == rel {
		return nil
	}
	for _, marker := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.LastIndex(p, marker); i > 0 {
			return []string{"repository:" + p[:i] + ":pull"}
		}
	}
	return nil
}
