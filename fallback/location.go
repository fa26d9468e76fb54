package fallback

import (
	"net/http"
	"net/url"

	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// absoluteLocation makes relative Location headers in h absolute against
// base, the URL the candidate upstream was asked. The client addressed a
// different upstream, so a relative redirect would otherwise send it back
// to the wrong host. Absolute and unparsable values are left alone.
func absoluteLocation(h http.Header, base *url.URL) {
	if base == nil {
		return
	}
	vals := h["Location"]
	if len(vals) == 0 {
		return
	}
	b := format.WithoutUserinfo(base)
	for i, v := range vals {
		ref, err := url.Parse(v)
		if err != nil || ref.Scheme != "" {
			continue
		}
		vals[i] = b.ResolveReference(ref).String()
	}
}
