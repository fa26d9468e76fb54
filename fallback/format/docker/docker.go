// Package docker is what the docker registry format adds to the fallback
// loop: bearer tokens for substituted registries, the token realm's breaker
// standing for its registry, and stale copies kept by who obtained a token
// and by blob digest.
package docker

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Options configures a Format. Zero values: Now is time.Now; Breakers nil
// means token fetches are never admitted or judged by a breaker.
type Options struct {
	// Now is the clock of cached tokens' expiry and of blob redirects' age.
	Now func() time.Time
	// Breakers admit and judge each token fetch from a realm whose host
	// has a breaker, so a dead realm is skipped once its breaker opens.
	Breakers *breakerstate.Set
}

// Format is the docker registry format. It is safe for concurrent use.
type Format struct {
	now    func() time.Time
	tokens *TokenSource
	realms realms
	ids    identities
	blobs  blobRedirects
	// challenges holds each candidate's last Bearer challenge, to find its
	// cached token before it asks again.
	challenges sync.Map // candidate key → Challenge
}

var _ format.Format = (*Format)(nil)

// New returns the docker Format. Its token source has no client of its own:
// every fetch goes through the transport of the request that needs it.
func New(o Options) *Format {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Format{now: o.Now, tokens: NewTokenSource(TokenOptions{Now: o.Now, Breakers: o.Breakers})}
}

// Send sends the substituted request with the cached token for its scope,
// when there is one. A candidate that answers 401 with a Bearer challenge
// gets a token negotiated once, and a retry with it.
func (f *Format) Send(c format.Candidate) (*http.Response, error) {
	cand := c.Upstream
	out := c.Call.Request()
	sentCached := f.withCachedToken(out, cand, c.Rel)
	resp, err := c.Call.Send(out)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	ch, ok := bearerChallenge(resp.Header)
	if !ok {
		return resp, nil
	}
	f.realms.learn(cand, ch.Realm, c.Env.Routes)
	f.challenges.Store(cand.Key, Challenge{Scheme: ch.Scheme, Realm: ch.Realm, Service: ch.Service})
	if len(ch.Scopes) == 0 {
		ch.Scopes = scope(c.Rel)
	}
	if sentCached {
		// The registry refused a token we still thought fresh (revoked, or
		// its clock disagrees): forget it and fetch anew.
		f.tokens.Invalidate(cand.Key, ch)
	}
	token, terr := f.tokens.Token(c.Client.Context(), c.Env.Transport, cand.Key, cand.Auth, ch, f.realms.of(cand))
	if terr != nil {
		return resp, nil // the 401 stands; the loop moves on
	}
	format.DrainClose(resp.Body)
	retry := c.Call.Request()
	retry.Header.Set("Authorization", "Bearer "+token)
	resp, err = c.Call.Send(retry)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		f.tokens.Invalidate(cand.Key, ch)
	}
	return resp, err
}

// withCachedToken puts the cached token for out's scope on out, when the
// candidate's realm is known and a fresh token is cached; it reports
// whether it did.
func (f *Format) withCachedToken(out *http.Request, cand *config.Upstream, rel string) bool {
	v, ok := f.challenges.Load(cand.Key)
	if !ok {
		return false
	}
	ch := v.(Challenge)
	ch.Scopes = scope(rel)
	if len(ch.Scopes) == 0 {
		return false
	}
	token, ok := f.tokens.cached(cand.Key, cand.Auth, ch)
	if ok {
		out.Header.Set("Authorization", "Bearer "+token)
	}
	return ok
}

// MayAnswer: a request that names the registry its image comes from
// (containerd adds ?ns=<registry> to what it asks a mirror) is only
// answered by a candidate that serves that registry, by its own name or
// its `serves` list (docs/behaviour.md §5.4). Any other registry's image
// of the same name is somebody else's: anybody may register
// team/app on Docker Hub. A request that names none may go anywhere.
func (*Format) MayAnswer(req *http.Request, cand *config.Upstream) bool {
	names, ok := req.URL.Query()["ns"]
	if !ok {
		return true
	}
	for _, n := range names {
		if !slices.Contains(cand.Serves, config.DockerRegistryName(n)) {
			return false
		}
	}
	return true
}

// Substitutable: a GET or HEAD, except a HEAD of a blob. That one is a
// pusher's question to the registry it pushes to — docker push, crane,
// skopeo, oras and helm ask it before each blob's upload and skip the
// upload on a 200 — and no puller asks it: another registry's 200, or a
// stale copy, says nothing about the addressed registry, and the pusher
// would skip an upload the registry then misses, refusing the manifest
// (docs/behaviour.md §5.4). A blob's bytes (its GET) are the same
// wherever they come from. Nor is anything about an upload session
// (/blobs/uploads/…: its status, asked by a pusher resuming it), which
// only the registry that opened it knows. Nor is a manifest asked for
// with a token the proxy saw obtained to push to its repository: crane and
// skopeo HEAD the tag they push and skip the push when it names their
// digest already, and another registry's tag says nothing of the
// addressed one's.
func (f *Format) Substitutable(req *http.Request) bool {
	if req.Method == http.MethodHead && stale.BlobDigest(req.URL.Path) != "" {
		return false
	}
	if strings.Contains(req.URL.Path, "/blobs/uploads/") {
		return false
	}
	if repo, ok := manifestRepository(req.URL.Path); ok && f.ids.pushes(req, repo) {
		return false
	}
	return format.SafeMethod(req.Method)
}

// Hedgeable: anything but the /v2/ ping. The ping is how a client learns
// whether the registry it addressed wants a token, and from which realm;
// a slow registry that wants one, hedged, would have the client take
// another registry's 200 for "no token needed", and every request it then
// sends without one would get the addressed registry's 401. A ping costs
// the client one slow round trip; it still fails over once the registry
// fails (docs/behaviour.md §5.10).
func (*Format) Hedgeable(req *http.Request) bool {
	return req.URL.Path != "/v2/" && req.URL.Path != "/v2"
}

// manifestRepository is the repository of a manifest path,
// /v2/<name>/manifests/<reference>.
func manifestRepository(path string) (string, bool) {
	p, ok := strings.CutPrefix(path, "/v2/")
	i := strings.LastIndex(p, "/manifests/")
	if !ok || i <= 0 || strings.Contains(p[i+len("/manifests/"):], "/") {
		return "", false
	}
	return p[:i], true
}

// Realm is the breaker key of u's token realm's host, once a challenge of
// u has named one that is an upstream's: its clients cannot get a token
// while it refuses (docs/behaviour.md §3.1).
func (f *Format) Realm(u *config.Upstream) string { return f.realms.of(u) }

// Observe learns where an upstream's token realm is (its 401), who a token
// stands for (a realm's token answer), and where a blob's bytes live (a
// registry's redirect of a blob download).
func (f *Format) Observe(a format.Answer) {
	switch {
	case a.Response.StatusCode == http.StatusUnauthorized:
		if ch, ok := bearerChallenge(a.Response.Header); ok {
			f.realms.learn(a.Upstream, ch.Realm, a.Env.Routes)
		}
	case isTokenRequest(a.Request):
		f.ids.learnToken(a.Response, identity{cred: f.policy(a.Env.Stale).CredentialOf(a.Request), push: pushScopes(a.Request)})
	default:
		f.noteBlobRedirect(f.policy(a.Env.Stale), a.Request, a.Response)
	}
}

// Present changes nothing: a registry's answers mean the same whichever
// registry the client addressed, and may be kept.
func (*Format) Present(*http.Request, *http.Response, string) bool { return true }

// Stale keys a blob by its digest and credentials by who obtained the
// request's token; a manifest's HEAD keeps its own answer.
func (f *Format) Stale(_ *config.Upstream, req *http.Request, p stale.Policy) (format.StaleKey, bool) {
	ref, ok := f.ref(f.policy(p), req)
	return format.StaleKey{Ref: ref, OwnHead: stale.DockerManifest(req.URL.Path)}, ok
}

// NotFoundIsFinal: registries of one chain mirror the same images, so
// another registry's 404 is the truth.
func (*Format) NotFoundIsFinal() bool { return true }

// policy is p with a bearer token standing for the credentials it was
// obtained with.
func (f *Format) policy(p stale.Policy) stale.Policy {
	p.Credential = f.ids.credential
	return p
}

// scope derives the pull scope from a registry path when the challenge
// named none: /v2/<name>/manifests/<ref> or /v2/<name>/blobs/<d>.
func scope(rel string) []string {
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
