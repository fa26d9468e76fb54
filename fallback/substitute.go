package fallback

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/nora-breaker/nora-breaker/config"
)

// substitute builds the request for candidate cand from the client's request:
// same method and query, the path below the addressed upstream appended to
// the candidate's URL, the candidate's Host, none of the client's credentials
// and the candidate's own Basic credentials when it has some.
// The client's credentials for the upstream it addressed never reach another
// upstream (docs/behaviour.md §5.4, §10): Authorization and Cookie always,
// whatever credential_headers says (the stale key counts them always too,
// stale.credentialDigest), and the credentialHeaders configured besides.
func substitute(client *http.Request, cand *config.Upstream, rel string, credentialHeaders []string) *http.Request {
	u := *cand.URL
	u.User = nil
	u.RawPath = ""
	u.Path = ""
	u.RawQuery = client.URL.RawQuery
	u.Fragment = ""
	// rel is escaped; joining escaped paths and re-parsing keeps encoded
	// slashes and other escapes exactly as the client sent them.
	escaped := strings.TrimSuffix(cand.URL.EscapedPath(), "/") + rel
	if err := setEscapedPath(&u, escaped); err != nil {
		u.Path = strings.TrimSuffix(cand.URL.Path, "/") + rel
	}
	out := client.Clone(client.Context())
	out.URL = &u
	out.Host = u.Host
	out.RequestURI = ""
	out.Body = http.NoBody
	out.ContentLength = 0
	delete(out.Header, "Authorization")
	delete(out.Header, "Cookie")
	for _, h := range credentialHeaders {
		out.Header.Del(h)
	}
	if cand.Auth != "" {
		out.Header.Set("Authorization", basicAuth(cand.Auth))
	}
	return out
}

// basicAuth renders "user:pass" as an HTTP Basic credential, exactly as NORA
// does: the configured string is encoded as given.
func basicAuth(userPass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
}

func setEscapedPath(u *url.URL, escaped string) error {
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return err
	}
	u.Path, u.RawPath = p, escaped
	if u.EscapedPath() != escaped {
		u.RawPath = ""
	}
	return nil
}
