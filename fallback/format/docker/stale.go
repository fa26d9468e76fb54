package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Docker pulls from stale copies (docs/behaviour.md §6.1). A registry's
// bearer token is new on every pull, so it is no key to keep copies by; what
// it stands for is who obtained it. The proxy sees the token requests, so it
// remembers, per token, the digest of the credentials the token request
// carried ("" for an anonymous token), and keys docker copies by that. Blob
// bytes are kept by digest wherever they came from: the registry itself, or
// the storage host its 307 pointed at.

const (
	// maxIdentities bounds the tokens remembered; each is a few bytes.
	maxIdentities = 16384
	// maxBlobRedirects bounds the blob redirects awaiting their download.
	maxBlobRedirects = 4096
	// blobRedirectTTL is how long a redirect's download is waited for.
	blobRedirectTTL = 10 * time.Minute
	// maxTokenAnswer bounds a token answer read to learn its token.
	maxTokenAnswer = 64 << 10
)

// identities maps a token's SHA-256 to what it was obtained for: the
// credential digest its request carried and the repositories it may push
// to. Oldest first out when full.
type identities struct {
	mu    sync.Mutex
	cred  map[[32]byte]identity
	order [][32]byte
}

// identity is what one token stands for.
type identity struct {
	cred string
	// push are the repositories the token request asked to push to (a
	// scope's actions naming push or *).
	push []string
}

func (id *identities) learn(token string, who identity) {
	sum := sha256.Sum256([]byte(token))
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.cred == nil {
		id.cred = map[[32]byte]identity{}
	}
	if _, ok := id.cred[sum]; !ok {
		if len(id.order) >= maxIdentities {
			delete(id.cred, id.order[0])
			id.order = id.order[1:]
		}
		id.order = append(id.order, sum)
	}
	id.cred[sum] = who
}

func (id *identities) of(token string) (identity, bool) {
	sum := sha256.Sum256([]byte(token))
	id.mu.Lock()
	defer id.mu.Unlock()
	c, ok := id.cred[sum]
	return c, ok
}

// bearer is the one bearer token req carries, "" for none.
func bearer(req *http.Request) string {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || len(req.Header.Values("Authorization")) != 1 {
		return ""
	}
	return strings.TrimSpace(token)
}

// pushes reports whether req carries a token the proxy saw obtained to push
// to repository repo.
func (id *identities) pushes(req *http.Request, repo string) bool {
	token := bearer(req)
	if token == "" {
		return false
	}
	who, ok := id.of(token)
	return ok && slices.Contains(who.push, repo)
}

// pushScopes are the repositories a token request's scopes ask to push to:
// "repository:<name>:<actions>" whose actions name push or *, each scope a
// query value of its own or several in one, apart by spaces.
func pushScopes(req *http.Request) []string {
	var repos []string
	for _, v := range req.URL.Query()["scope"] {
		for _, sc := range strings.Fields(v) {
			rest, ok := strings.CutPrefix(sc, "repository:")
			i := strings.LastIndex(rest, ":")
			if !ok || i <= 0 {
				continue
			}
			for _, a := range strings.Split(rest[i+1:], ",") {
				if a == "push" || a == "*" {
					repos = append(repos, rest[:i])
					break
				}
			}
		}
	}
	return repos
}

// credential names a docker request's credentials for stale keying: a
// bearer token the proxy saw handed out stands for the credentials it was
// obtained with; anything else falls back to the credential headers.
func (id *identities) credential(req *http.Request) (string, bool) {
	token := bearer(req)
	if token == "" {
		return "", false
	}
	who, ok := id.of(token)
	return who.cred, ok
}

// blobRedirect is a blob the registry redirected to storage.
type blobRedirect struct {
	digest, cred string
	at           time.Time
}

// blobRedirects remembers, by the exact Location URL, which blob a
// registry's redirect points at, so the storage host's answer can be kept
// under the blob's digest.
type blobRedirects struct {
	mu    sync.Mutex
	m     map[string]blobRedirect
	order []string
}

func (br *blobRedirects) note(location, digest, cred string, now time.Time) {
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.m == nil {
		br.m = map[string]blobRedirect{}
	}
	if _, ok := br.m[location]; !ok {
		if len(br.order) >= maxBlobRedirects {
			delete(br.m, br.order[0])
			br.order = br.order[1:]
		}
		br.order = append(br.order, location)
	}
	br.m[location] = blobRedirect{digest: digest, cred: cred, at: now}
}

func (br *blobRedirects) find(location string, now time.Time) (blobRedirect, bool) {
	br.mu.Lock()
	defer br.mu.Unlock()
	b, ok := br.m[location]
	if !ok || now.Sub(b.at) > blobRedirectTTL {
		return blobRedirect{}, false
	}
	return b, true
}

// isTokenRequest reports a request to a docker token realm: a GET naming
// the service or scope it wants a token for.
func isTokenRequest(req *http.Request) bool {
	q := req.URL.Query()
	return req.Method == http.MethodGet && (q.Has("service") || q.Has("scope"))
}

// learnToken reads a realm's token answer (up to 64 KiB), remembers who the
// token stands for (who: the token request's credential digest and the
// repositories it asked to push to), and gives the body back whole.
func (id *identities) learnToken(resp *http.Response, who identity) {
	if resp.StatusCode != http.StatusOK || resp.Body == nil || resp.ContentLength > maxTokenAnswer {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenAnswer+1))
	if err != nil || len(body) > maxTokenAnswer {
		resp.Body = format.NewPrefixedBody(body, resp.Body)
		return
	}
	resp.Body.Close()
	resp.Body = format.NewBytesBody(body)
	var ans struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if json.NewDecoder(bytes.NewReader(body)).Decode(&ans) != nil {
		return
	}
	for _, t := range []string{ans.Token, ans.AccessToken} {
		if t != "" {
			id.learn(t, who)
		}
	}
}

// ref is the Ref a docker request's copy is kept and looked up under: a
// blob by its digest, a blob's storage download by the digest its redirect
// named, anything else as any request is.
func (f *Format) ref(p stale.Policy, req *http.Request) (stale.Ref, bool) {
	if d := stale.BlobDigest(req.URL.Path); d != "" {
		return p.BlobRef(d, p.CredentialOf(req), req.Header)
	}
	if br, ok := f.blobs.find(stale.NormalURL(req.URL), f.now()); ok {
		return p.BlobRef(br.digest, br.cred, req.Header)
	}
	return p.For(req, "docker")
}

// noteBlobRedirect remembers where a registry sent a blob download.
func (f *Format) noteBlobRedirect(p stale.Policy, req *http.Request, resp *http.Response) {
	d := stale.BlobDigest(req.URL.Path)
	if d == "" || resp.StatusCode < 300 || resp.StatusCode > 399 {
		return
	}
	loc, err := resp.Location()
	if err != nil {
		return
	}
	f.blobs.note(stale.NormalURL(loc), d, p.CredentialOf(req), f.now())
}
