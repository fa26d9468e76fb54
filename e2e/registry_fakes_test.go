//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The Docker Hub stand-ins: a token realm (auth.docker.io), a registry that
// wants its tokens and redirects blob downloads to signed storage URLs
// (registry-1.docker.io), the storage those URLs point at
// (production.cloudflare.docker.com), and a mirror that redirects to its own
// storage (mirror.gcr.io → storage.googleapis.com). Behind the registry
// fronts run real docker-registry (CNCF distribution) processes.

// hubService is the service name Docker Hub's challenges carry.
const hubService = "registry.docker.io"

// randomHex is n random bytes, hex-encoded: tokens and signatures.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// tokenGrant is what one issued token allows.
type tokenGrant struct {
	user    string // "" for an anonymous token
	scopes  []string
	expires time.Time
}

// pulls reports whether the grant covers pulling repository name.
func (g tokenGrant) pulls(name string) bool {
	for _, s := range g.scopes {
		rest, ok := strings.CutPrefix(s, "repository:"+name+":")
		if !ok {
			continue
		}
		for _, action := range strings.Split(rest, ",") {
			if action == "pull" || action == "*" {
				return true
			}
		}
	}
	return false
}

// tokenRealm answers token requests as auth.docker.io does: GET with the
// service and scopes in the query (anonymous, or Basic credentials), or the
// OAuth2 POST with a password grant (what containerd sends when it has
// credentials). Every token is random and tied to whoever obtained it.
type tokenRealm struct {
	users map[string]string // user → password

	mu     sync.Mutex
	grants map[string]tokenGrant

	anonymous, withCredentials atomic.Int64
}

func newTokenRealm(users map[string]string) *tokenRealm {
	return &tokenRealm{users: users, grants: map[string]tokenGrant{}}
}

// grant looks up a live token.
func (r *tokenRealm) grant(token string) (tokenGrant, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.grants[token]
	return g, ok && time.Now().Before(g.expires)
}

func (r *tokenRealm) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/token" {
		http.NotFound(w, req)
		return
	}
	var user, service string
	var scopes []string
	oauth := req.Method == http.MethodPost
	switch req.Method {
	case http.MethodGet:
		q := req.URL.Query()
		service, scopes = q.Get("service"), q["scope"]
		if u, p, ok := req.BasicAuth(); ok {
			if want, known := r.users[u]; !known || want != p {
				r.refuse(w, http.StatusUnauthorized, "incorrect username or password")
				return
			}
			user = u
		} else if req.Header.Get("Authorization") != "" {
			r.refuse(w, http.StatusUnauthorized, "unsupported authorization")
			return
		}
	case http.MethodPost:
		if err := req.ParseForm(); err != nil || req.PostForm.Get("grant_type") != "password" {
			r.refuse(w, http.StatusBadRequest, "unsupported_grant_type")
			return
		}
		u, p := req.PostForm.Get("username"), req.PostForm.Get("password")
		if want, known := r.users[u]; !known || want != p {
			r.refuse(w, http.StatusUnauthorized, "incorrect username or password")
			return
		}
		user, service, scopes = u, req.PostForm.Get("service"), []string{req.PostForm.Get("scope")}
	default:
		r.refuse(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if service != hubService {
		r.refuse(w, http.StatusBadRequest, "unknown service "+service)
		return
	}
	var split []string
	for _, s := range scopes {
		split = append(split, strings.Fields(s)...)
	}
	token := randomHex(24)
	r.mu.Lock()
	r.grants[token] = tokenGrant{user: user, scopes: split, expires: time.Now().Add(300 * time.Second)}
	r.mu.Unlock()
	if user == "" {
		r.anonymous.Add(1)
	} else {
		r.withCredentials.Add(1)
	}
	answer := map[string]any{"access_token": token, "expires_in": 300, "issued_at": time.Now().UTC().Format(time.RFC3339)}
	if oauth {
		answer["scope"] = strings.Join(split, " ")
	} else {
		answer["token"] = token
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

func (r *tokenRealm) refuse(w http.ResponseWriter, status int, why string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"details": why})
}

// signedBlobs is a storage host that serves registry blobs only at URLs it
// signed itself (a random signature per redirect, with an expiry), never
// with an Authorization header: a client or proxy that sends one the
// registry's token fails the test (Unexpected counts it).
type signedBlobs struct {
	host     string                     // public name, for the URLs it signs
	pathOf   func(digest string) string // URL path of a blob
	registry string                     // docker-registry host:port holding the bytes
	client   *http.Client

	mu   sync.Mutex
	sigs map[string]signedBlob

	served, badSignature atomic.Int64
	// Unexpected counts requests that carried Authorization.
	Unexpected atomic.Int64
}

// signedBlob is what one signature grants.
type signedBlob struct {
	path, name, digest string
	expires            time.Time
}

func newSignedBlobs(host, registry string, pathOf func(string) string) *signedBlobs {
	return &signedBlobs{host: host, pathOf: pathOf, registry: registry, sigs: map[string]signedBlob{},
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}}
}

// sign returns a fresh signed URL for blob digest of repository name.
func (s *signedBlobs) sign(name, digest string) string {
	sig, expires := randomHex(16), time.Now().Add(10*time.Minute)
	path := s.pathOf(digest)
	s.mu.Lock()
	s.sigs[sig] = signedBlob{path: path, name: name, digest: digest, expires: expires}
	s.mu.Unlock()
	return fmt.Sprintf("https://%s%s?sig=%s&expires=%d", s.host, path, sig, expires.Unix())
}

func (s *signedBlobs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		s.Unexpected.Add(1)
		http.Error(w, "storage never takes Authorization", http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	b, ok := s.sigs[q.Get("sig")]
	s.mu.Unlock()
	if !ok || b.path != r.URL.Path || q.Get("expires") != strconv.FormatInt(b.expires.Unix(), 10) || time.Now().After(b.expires) {
		s.badSignature.Add(1)
		http.Error(w, "SignatureDoesNotMatch", http.StatusForbidden)
		return
	}
	resp, err := s.client.Get("http://" + s.registry + "/v2/" + b.name + "/blobs/" + b.digest)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		http.Error(w, "blob "+resp.Status, resp.StatusCode)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", resp.Header.Get("Content-Length"))
	w.Header().Set("ETag", `"`+b.digest+`"`)
	s.served.Add(1)
	if r.Method == http.MethodHead {
		return
	}
	io.Copy(w, resp.Body)
}

// v2Route splits a distribution API path: "" kind for the /v2/ ping, else
// the repository name, "manifests" or "blobs" (or another endpoint), and
// the reference.
func v2Route(path string) (name, kind, ref string) {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok || rest == "" {
		return "", "", ""
	}
	for _, k := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.LastIndex(rest, k); i > 0 {
			return rest[:i], strings.Trim(k, "/"), rest[i+len(k):]
		}
	}
	return rest, "other", ""
}

// registryBackend is a reverse proxy to a docker-registry on host:port.
func registryBackend(addr string) http.Handler {
	return httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
}

// hubRegistry is registry-1.docker.io: every request needs a bearer token
// from the realm that covers the repository (a private repository only its
// owner's), else 401 with the Bearer challenge; blob downloads are 307s to
// signed storage URLs; while Throttled, manifest requests get 429
// TOOMANYREQUESTS with Retry-After: 60.
type hubRegistry struct {
	realm    *tokenRealm
	realmURL string
	private  map[string]string // repository → the only user who may pull it
	backend  http.Handler
	storage  *signedBlobs

	Throttled atomic.Bool
	// throttledAnswers counts the 429s given.
	throttledAnswers atomic.Int64
}

func (h *hubRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
	name, kind, ref := v2Route(r.URL.Path)
	if !h.authorized(r, name) {
		h.challenge(w, name)
		return
	}
	switch {
	case kind == "":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	case kind == "manifests" && h.Throttled.Load():
		h.throttledAnswers.Add(1)
		w.Header().Set("Retry-After", "60")
		dockerError(w, http.StatusTooManyRequests, "TOOMANYREQUESTS",
			"You have reached your unauthenticated pull rate limit. https://www.docker.com/increase-rate-limit")
	case kind == "blobs" && r.Method == http.MethodGet:
		w.Header().Set("Location", h.storage.sign(name, ref))
		w.WriteHeader(http.StatusTemporaryRedirect)
	default:
		h.backend.ServeHTTP(w, r)
	}
}

// authorized checks the bearer token: live, and for a repository covering
// it (and, for a private one, obtained by its owner). The ping takes any
// live token.
func (h *hubRegistry) authorized(r *http.Request, name string) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	g, ok := h.realm.grant(token)
	switch {
	case !ok:
		return false
	case name == "":
		return true
	case h.private[name] != "" && g.user != h.private[name]:
		return false
	}
	return g.pulls(name)
}

// challenge is Docker Hub's 401: the realm, the service and (except on the
// ping) the scope the client should ask for.
func (h *hubRegistry) challenge(w http.ResponseWriter, name string) {
	c := fmt.Sprintf(`Bearer realm=%q,service=%q`, h.realmURL, hubService)
	if name != "" {
		c += fmt.Sprintf(`,scope="repository:%s:pull"`, name)
	}
	w.Header().Set("WWW-Authenticate", c)
	dockerError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
}

// dockerError writes a distribution API error document.
func dockerError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}

// mirrorRegistry is mirror.gcr.io: anonymous, blob downloads are 307s to
// its own signed storage host.
type mirrorRegistry struct {
	backend http.Handler
	storage *signedBlobs
}

func (m *mirrorRegistry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
	if name, kind, ref := v2Route(r.URL.Path); kind == "blobs" && r.Method == http.MethodGet {
		w.Header().Set("Location", m.storage.sign(name, ref))
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	m.backend.ServeHTTP(w, r)
}
