package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
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

// identities maps a token's SHA-256 to the credential digest it was
// obtained with. Oldest first out when full.
type identities struct {
	mu    sync.Mutex
	cred  map[[32]byte]string
	order [][32]byte
}

func (id *identities) learn(token, cred string) {
	sum := sha256.Sum256([]byte(token))
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.cred == nil {
		id.cred = map[[32]byte]string{}
	}
	if _, ok := id.cred[sum]; !ok {
		if len(id.order) >= maxIdentities {
			delete(id.cred, id.order[0])
			id.order = id.order[1:]
		}
		id.order = append(id.order, sum)
	}
	id.cred[sum] = cred
}

func (id *identities) of(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	id.mu.Lock()
	defer id.mu.Unlock()
	c, ok := id.cred[sum]
	return c, ok
}

// credential names a docker request's credentials for stale keying: a
// bearer token the proxy saw handed out stands for the credentials it was
// obtained with; anything else falls back to the credential headers.
func (id *identities) credential(req *http.Request) (string, bool) {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || len(req.Header.Values("Authorization")) != 1 {
		return "", false
	}
	return id.of(strings.TrimSpace(token))
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
// token stands for (cred: the token request's credential digest), and
// gives the body back whole.
func (id *identities) learnToken(resp *http.Response, cred string) {
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
			id.learn(t, cred)
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
