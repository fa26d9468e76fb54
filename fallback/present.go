package fallback

import (
	"net/http"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// present turns a candidate's successful answer into the client's answer:
// it names the key that served, drops cookies (a session the candidate
// opened for the proxy's configured credentials is not the client's, who
// could otherwise replay it to the candidate), makes a relative Location
// absolute against the candidate, and lets the format add its part (PyPI's
// file links) and say whether the result may be kept.
func (s *search) present(cand *config.Upstream, resp *http.Response) (*http.Response, format.Presented) {
	resp.Header.Set("X-Nora-Upstream", cand.Key)
	resp.Header.Del("Set-Cookie")
	resp.Header.Del("Set-Cookie2")
	absoluteLocation(resp.Header, resp.Request.URL)
	return resp, s.fm.Present(s.r.Client, resp)
}
