package fallback

import (
	"net/http"

	"github.com/nora-breaker/nora-breaker/config"
)

// present turns a candidate's successful answer into the client's answer:
// it names the key that served, drops cookies (a session the candidate
// opened for the proxy's configured credentials is not the client's, who
// could otherwise replay it to the candidate), makes a relative Location
// absolute against the candidate, and lets the format add its part (PyPI's
// file links, npm's tarball URLs). storable is the format's word on whether the answer may be
// kept as a stale copy of the client's request.
func (s *search) present(cand *config.Upstream, resp *http.Response) (_ *http.Response, storable bool) {
	resp.Header.Set("X-Nora-Upstream", cand.Key)
	resp.Header.Del("Set-Cookie")
	resp.Header.Del("Set-Cookie2")
	absoluteLocation(resp.Header, resp.Request.URL)
	storable = s.fm.Present(s.r.Client, resp, s.r.Rel)
	return resp, storable
}
