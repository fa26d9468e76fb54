// Package format is the seam between the fallback loop and what one package
// format adds to it: the Format interface, Plain for formats that add
// nothing, and the small types and helpers both sides share.
package format

import (
	"net/http"
	"net/url"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Format is what a package format may add to the fallback loop. The loop
// calls each method at one step (docs/behaviour.md, "When the addressed
// upstream cannot serve"); Plain answers every one the way a format with
// nothing special needs, so an implementation embeds Plain and overrides
// what it changes. One Format serves every upstream of its format, from
// many requests at once: it must be safe for concurrent use.
type Format interface {
	// Send makes the attempts at candidate c and returns the answer the
	// loop judges (nil and an error when there is none). It sends through
	// c.Call, at least once; docker sends again with a bearer token when
	// the first answer is a 401 challenge.
	Send(c Candidate) (*http.Response, error)
	// MayAnswer reports whether candidate cand may answer the client's
	// request req at all, before any breaker is asked: a candidate whose
	// answer would be another artifact under the same name must not
	// (docker: a request that names its registry with ?ns= is only
	// answered by an upstream that serves that registry). A candidate it
	// refuses is skipped and listed, and counts for nothing.
	MayAnswer(req *http.Request, cand *config.Upstream) bool
	// Substitutable reports whether req may be answered by anyone but the
	// addressed upstream — a candidate, a stale copy — when the addressed
	// upstream cannot answer it, or go on to them when it fails: whether
	// it asks for an artifact that any upstream of the chain holds alike,
	// rather than about the addressed upstream itself. Plain: GET and
	// HEAD, which are safe to repeat; a format may narrow it (docker: a
	// HEAD of a blob is a pusher asking the registry it pushes to).
	Substitutable(req *http.Request) bool
	// Hedgeable reports whether a substitutable req may also be sent to a
	// candidate while the addressed upstream is merely slow (a hedge,
	// docs/behaviour.md §5.10), rather than only once it has failed. Plain:
	// always; docker: not the /v2/ ping, whose answer tells the client
	// whether the addressed registry wants a token.
	Hedgeable(req *http.Request) bool
	// Realm is the breaker key of another host u's clients cannot do
	// without ("" for none): docker's token realm. While that breaker
	// refuses, the loop counts u as refused too.
	Realm(u *config.Upstream) string
	// Observe learns what an answer teaches about later requests: from the
	// addressed upstream, a candidate that served, or a stale copy.
	Observe(a Answer)
	// Present adjusts a candidate's successful answer for a client who
	// addressed another upstream (PyPI: relative file links made absolute
	// against resp.Request.URL; npm: tarball URLs below the candidate's URL
	// moved below the URL the client addressed). rel is the escaped path
	// below both: the client's URL and the candidate's (resp.Request.URL)
	// are each their upstream's URL with rel appended. The loop has
	// already named the candidate and made Location absolute. It reports
	// whether the answer, as presented, may be kept as a stale copy of req:
	// false when the format could not make it right for the URL the client
	// addressed (a page too large to rewrite, or in an encoding it cannot
	// read). Such
	// an answer is still the client's, but must never replace a good copy
	// kept earlier (docs/behaviour.md §5.4).
	Present(req *http.Request, resp *http.Response, rel string) (storable bool)
	// Stale is the key req's copies are kept and found under, when the
	// addressed upstream u is of this format; p is the request's keying
	// policy. ok is false for a request that must not be cached.
	Stale(u *config.Upstream, req *http.Request, p stale.Policy) (key StaleKey, ok bool)
	// NotFoundIsFinal reports whether another upstream's 404 (or 410)
	// proves the artifact is absent, so the client gets a 404 instead of
	// the 503 that says "ask again later". It does for formats whose
	// upstreams hold the same artifacts (maven, docker); for PyPI a
	// skipped index might have had it.
	NotFoundIsFinal() bool
}

// Routes names the breaker key of the host a URL goes to, or "" when it is
// no upstream's. The proxy's configuration snapshot answers it.
type Routes interface{ KeyOf(*url.URL) string }

// Env is the part of the request's settings a format may use.
type Env struct {
	// Transport carries the request's attempts, and any request a format
	// makes of its own (docker's token fetches).
	Transport http.RoundTripper
	// Routes names breaker keys by URL (nil: no host is an upstream's).
	Routes Routes
	// Stale is how the request's copies are keyed.
	Stale stale.Policy
}

// Candidate is one candidate upstream as the loop hands it to Send.
type Candidate struct {
	Upstream *config.Upstream
	// Client is the client's request as it went to the addressed upstream;
	// its context is the client's.
	Client *http.Request
	// Rel is the escaped path below the addressed upstream's URL.
	Rel  string
	Env  Env
	Call Call
}

// Call is the loop's side of a candidate's attempts.
type Call interface {
	// Request builds the candidate's request afresh: the client's request
	// substituted for the candidate (its URL, Host and the path below),
	// without the client's credentials and with the candidate's own.
	Request() *http.Request
	// Send makes one attempt with out and returns what it got; the caller
	// closes the body. The first attempt is the one the loop's breaker
	// admission is for; each later one is made only if the candidate's
	// breaker admits it again. Every one is listed in the loop's Result.
	Send(out *http.Request) (*http.Response, error)
}

// Answer is one answer a format may learn from.
type Answer struct {
	// Upstream answered (for a stale copy: the addressed upstream).
	Upstream *config.Upstream
	// Request is the client's request.
	Request *http.Request
	// Response is the answer; a format that reads its body must put back a
	// body that gives the client the same bytes.
	Response *http.Response
	Env      Env
}

// StaleKey is how a request's stale copies are kept and found.
type StaleKey struct {
	Ref stale.Ref
	// OwnHead marks a request whose HEAD keeps an answer of its own, under
	// Ref.HeadRef(), found before the GET's copy: a docker manifest's,
	// which containerd only ever asks for with HEAD.
	OwnHead bool
}
