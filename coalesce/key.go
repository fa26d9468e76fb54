package coalesce

import (
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// keyedHeaders are the request headers, beyond those the stale key holds,
// that an answer depends on without naming them in Vary: the coding the
// client can read (an upstream that compresses often forgets Vary), and the
// conditions that turn a 200 into a 304 or 412 only the asking client can
// use.
var keyedHeaders = [...]string{"Accept-Encoding", "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since"}

// Key is the identity of req among the requests that may share one fetch,
// or ok=false for a request that must have a fetch of its own. base is the
// key its stale copies are kept under (the caller's: the normalised URL,
// its variant headers and credential rule); cred the digest of its
// credentials, "" for none. Two requests share a fetch only when their keys
// are equal: the same base, and also the same URL as sent and Host, the
// same credentials whatever the stale mode (a public answer under
// stale_authenticated = share is still never fetched with one client's
// credentials for another), and the same keyedHeaders.
//
// Refused: every method but GET (HEAD included: its answer has no body to
// share, and docker clients send it to learn what changed), a request with
// a body or asking to switch protocols, Range and If-Range (each client
// asks for other bytes). A request with Cache-Control or Pragma no-cache
// is keyed like any other, but may only join a fetch whose answer has not
// come yet (Fresh).
func Key(base string, req *http.Request, cred string) (key string, ok bool) {
	if !Eligible(req) {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(base) + 256)
	// Every part is written with its length first, so no value, however
	// odd, can make two different requests spell one key.
	field(&b, base)
	field(&b, req.URL.String())
	field(&b, req.Host)
	field(&b, cred)
	for _, h := range keyedHeaders {
		vv := req.Header[h] // canonical already: no Values, which would canonicalise it again
		field(&b, strconv.Itoa(len(vv)))
		for _, v := range vv {
			field(&b, v)
		}
	}
	return b.String(), true
}

// field writes s to b as its length, a colon and itself.
func field(b *strings.Builder, s string) {
	b.WriteString(strconv.Itoa(len(s)))
	b.WriteByte(':')
	b.WriteString(s)
}

// Eligible reports whether req may share a fetch at all: false for every
// request Key refuses whatever its base.
func Eligible(req *http.Request) bool {
	if req == nil || req.URL == nil || req.Method != http.MethodGet {
		return false
	}
	if req.ContentLength != 0 || (req.Body != nil && req.Body != http.NoBody) || len(req.TransferEncoding) > 0 {
		return false
	}
	h := req.Header // indexed by canonical names, as Values would after canonicalising them
	if len(h["Range"]) > 0 || len(h["If-Range"]) > 0 || len(h["Upgrade"]) > 0 {
		return false
	}
	return true
}

// Fresh reports a request asking, with Cache-Control or Pragma no-cache,
// for an answer no earlier than itself. It may join a fetch whose answer
// has not come yet: that answer is made after the request was sent, as
// fresh as one fetched for it alone. Maven's resolver asks no-cache on
// every request, so without this no Maven pull would ever be shared.
func Fresh(req *http.Request) bool {
	h := req.Header
	return httpguts.HeaderValuesContainsToken(h["Cache-Control"], "no-cache") ||
		httpguts.HeaderValuesContainsToken(h["Pragma"], "no-cache")
}
