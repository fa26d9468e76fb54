package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/internal/urlnorm"
)

// Credential modes of the stale_authenticated setting.
const (
	// modeOff keeps requests that carry credentials out of the cache.
	modeOff = "off"
	// modeIsolate keys entries by a digest of the credentials, so one
	// tenant's private answer is never served to another.
	modeIsolate = "isolate"
	// modeShare ignores credentials: for single-tenant deployments.
	modeShare = "share"
)

// DefaultCredentialHeaders are the request headers that carry credentials
// besides Authorization and Cookie, which always do (credentialDigest),
// when the configuration names none (credential_headers): never sent to
// another upstream, and what the credential rule of a mode looks at.
// Proxy-Authorization is not among them: like every Proxy-* header it
// speaks to the proxy and is removed before a request goes anywhere.
func DefaultCredentialHeaders() []string {
	return []string{"Private-Token", "Job-Token", "Deploy-Token", "X-Api-Key", "X-Jfrog-Art-Api",
		"X-Nuget-Apikey", "X-Auth-Token"}
}

// Ref names the copies of one request: the key they are stored under, and
// who asked. Cred is a digest of the request's credentials ("" when it
// carries none); it is stored with every copy, so that a copy is only ever
// served to a request the current mode allows it for, whatever mode it was
// stored under (see servable).
type Ref struct {
	Key  string
	Cred string
	Mode string
	// Digest, when set ("sha256:<hex>"), is what the body must hash to:
	// a copy whose bytes differ is never committed (docker blobs).
	Digest string
	// AnyStatus marks a request whose every answer is worth keeping (the
	// docker /v2/ ping, whose healthy answer is a 401 with a challenge).
	AnyStatus bool
	// Head marks the copy of a HEAD's answer: headers only, kept apart
	// from the GET's (see HeadRef).
	Head bool
	// docker marks a docker request's ref: when its own key misses, a
	// manifest or ping is looked up by meaning (dockercopies.go).
	docker bool
	// manifest marks a docker manifest GET's ref: the SHA-256 of its body
	// is recorded with the copy, since a digest names the bytes and a copy
	// is only found by a digest its bytes hash to (docs/behaviour.md §6.1).
	manifest bool
	// named is the digest a manifest request by digest names ("" by tag):
	// only a copy whose bytes hash to it is kept or served for it.
	named string
	// header is the request's, to record and match the headers a stored
	// answer varies by.
	header http.Header
}

// servable reports whether a copy stored by a request whose credentials had
// digest storedCred may be served to ref: under "share" always, under
// "isolate" only to the same credentials (or to no credentials if it was
// stored without any), under "off" only a copy stored without credentials to
// a request without credentials.
func (ref Ref) servable(storedCred string) bool {
	switch ref.Mode {
	case modeShare:
		return true
	case modeOff:
		return storedCred == "" && ref.Cred == ""
	}
	return storedCred == ref.Cred
}

// HeadRef is the Ref under which the answer to a HEAD of the same request
// is kept: docker clients such as containerd only ever HEAD a tag (to learn
// its digest), so during an outage only a kept HEAD answer can tell them.
func (ref Ref) HeadRef() Ref {
	ref.Key += "\nhead"
	ref.Head = true
	// A HEAD's copy has no body to hash: its headers are served, and its
	// Docker-Content-Digest only leads to a GET's copy that was checked.
	ref.manifest, ref.named = false, ""
	return ref
}

// DockerManifest reports whether path is a docker manifest's, by tag or
// digest.
func DockerManifest(path string) bool { return isDockerManifest(path) }

// Policy is how requests are keyed and who may be served which copy.
type Policy struct {
	// Mode is stale_authenticated: off, isolate (also "") or share. Any
	// other value refuses every request, so a typo never leaks a private
	// answer to another client.
	Mode string
	// CredentialHeaders are the headers that carry credentials besides
	// Authorization and Cookie, which always do; nil means
	// DefaultCredentialHeaders.
	CredentialHeaders []string
	// Credential, when set, may name a request's credentials itself: it
	// returns their digest ("" for none) and true, or false to fall back to
	// hashing the credential headers. Docker uses it for bearer tokens,
	// which are new on every pull but stand for who obtained them.
	Credential func(*http.Request) (digest string, ok bool)
}

// For builds the Ref of req, or reports ok=false when the request must not
// be stored or served from the cache.
//
// The key is the URL as the client addressed it (scheme, lower-cased host,
// port only when not the scheme's default, escaped path, the query's names
// with a digest of each value; never the userinfo), then the Accept header for requests whose answer depends on it
// (docker manifests, npm packuments, PyPI simple pages), then the credential
// rule of the mode: "off" refuses requests with credentials, "isolate"
// appends a digest of them, "share" ignores them. A request carrying
// headers that shape the URLs an upstream writes into its answer
// (urlShaping) is keyed by them too, so a copy made for one value is never
// served to a request without it.
func (p Policy) For(req *http.Request, format string) (ref Ref, ok bool) {
	if req == nil || req.URL == nil {
		return Ref{}, false
	}
	cred := p.CredentialOf(req)
	mode, ok := p.modeFor(cred)
	if !ok {
		return Ref{}, false
	}
	var b strings.Builder
	b.Grow(128)
	if !writeURL(&b, req) {
		return Ref{}, false
	}
	if variantByAccept(format, req.URL.Path) {
		accept := strings.Join(req.Header.Values("Accept"), ", ")
		if strings.ContainsAny(accept, "\r\n") {
			return Ref{}, false
		}
		b.WriteString("\naccept=")
		b.WriteString(accept)
	}
	if shape := urlShaping(req.Header); shape != "" {
		b.WriteString("\nshape=")
		b.WriteString(shape)
	}
	ref = Ref{Mode: mode, Cred: cred, header: req.Header}
	b.WriteString(credSuffix(mode, cred))
	if format == "docker" {
		if isDockerManifest(req.URL.Path) {
			named, checkable := manifestDigestRef(req.URL.Path)
			if !checkable {
				return Ref{}, false
			}
			ref.manifest, ref.named = true, named
		}
		ref.AnyStatus = dockerChallenged(req, cred, &b)
		ref.docker = true
	}
	ref.Key = b.String()
	return ref, true
}

// CredentialOf is the digest of req's credentials as the policy sees them
// ("" for none).
func (p Policy) CredentialOf(req *http.Request) string {
	if p.Credential != nil {
		if d, ok := p.Credential(req); ok {
			return d
		}
	}
	names := p.CredentialHeaders
	if names == nil {
		names = DefaultCredentialHeaders()
	}
	return credentialDigest(req.Header, names)
}

// modeFor is the policy's mode ("" is isolate) for a request whose
// credentials have digest cred; ok is false for an unknown mode, and for a
// request with credentials under "off".
func (p Policy) modeFor(cred string) (mode string, ok bool) {
	mode = p.Mode
	if mode == "" {
		mode = modeIsolate
	}
	switch mode {
	case modeIsolate, modeShare:
		return mode, true
	case modeOff:
		return mode, cred == ""
	}
	return "", false
}

// credSuffix is what a key gets for the credentials cred under mode: their
// digest, except under share (and for a request without any).
func credSuffix(mode, cred string) string {
	if cred == "" || mode == modeShare {
		return ""
	}
	return "\ncred=" + cred
}

// BlobRef is the Ref a docker blob's bytes are kept under, whichever host
// served them: its digest and whose credentials fetched it (cred, "" when
// public). ok is false for a digest that is not "sha256:<64 hex>".
func (p Policy) BlobRef(digest, cred string, header http.Header) (Ref, bool) {
	algo, hexSum, _ := strings.Cut(digest, ":")
	if algo != "sha256" || !validHash(hexSum) {
		return Ref{}, false
	}
	mode, ok := p.modeFor(cred)
	if !ok {
		return Ref{}, false
	}
	key := "docker-blob:" + digest + credSuffix(mode, cred)
	return Ref{Key: key, Cred: cred, Mode: mode, Digest: digest, header: header}, true
}

// writeURL writes the URL the client addressed, without userinfo or
// fragment. It reports false when the URL has no host or holds a raw newline:
// newlines separate the key's parts, and a URL that smuggled one could forge
// another client's key, so such requests are simply not cached.
func writeURL(b *strings.Builder, req *http.Request) bool {
	scheme := strings.ToLower(req.URL.Scheme)
	if scheme == "" {
		// A request in origin form carries only a path; the connection says
		// which scheme the client used.
		scheme = "http"
		if req.TLS != nil {
			scheme = "https"
		}
	}
	host := req.URL.Host
	if host == "" {
		host = req.Host
	}
	if host == "" {
		return false
	}
	writeNormalURL(b, scheme, host, req.URL)
	return !strings.ContainsAny(b.String(), "\r\n")
}

// NormalURL is u as cache keys spell a URL: lower-case scheme and host, no
// default port, escaped path ("/" when empty) and the query with its values
// digested (writeQueryDigests), no userinfo or fragment. Two spellings of one URL (a redirect's Location and the request
// it causes) give the same string.
func NormalURL(u *url.URL) string {
	var b strings.Builder
	scheme := strings.ToLower(u.Scheme)
	writeNormalURL(&b, scheme, u.Host, u)
	return b.String()
}

// writeNormalURL writes scheme://host, host normalised, then u's escaped
// path and its query, values digested.
func writeNormalURL(b *strings.Builder, scheme, host string, u *url.URL) {
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(normalHost(scheme, host))
	path := urlnorm.Path(u.EscapedPath())
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if q := u.RawQuery; q != "" {
		b.WriteByte('?')
		writeQueryDigests(b, q)
	}
}

// writeQueryDigests writes a raw query with each value replaced by "~" and
// its SHA-256: tokens travel in query strings (GitLab's private_token, a
// job_token, a signed URL's signature) and the key is written to stale_dir,
// which must never hold a credential in clear (docs/behaviour.md §10).
// Names stay, and so do the order and the separators, so two queries give
// one key exactly when they were the same; a part without "=" is digested
// whole.
func writeQueryDigests(b *strings.Builder, raw string) {
	for i, part := range strings.Split(raw, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, value, hasValue := strings.Cut(part, "=")
		if !hasValue {
			value = part
		} else {
			b.WriteString(name)
			b.WriteByte('=')
		}
		sum := sha256.Sum256([]byte(value))
		b.WriteByte('~')
		b.WriteString(hex.EncodeToString(sum[:]))
	}
}

// normalHost lower-cases host and drops the port when it is the scheme's
// default, so http://Example.com:80/x and http://example.com/x share a key.
func normalHost(scheme, host string) string {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		// No port (or a bare IPv6 literal in brackets).
		return hostport.Authority(scheme, host, "")
	}
	return hostport.Authority(scheme, h, port)
}

// credentialDigest hashes the credential headers present in h ("" when
// there are none), so that the key (which is written to disk) separates
// tenants without containing their secrets. Authorization and Cookie come
// first, in the layout keys have always had; other credential headers follow
// by name.
func credentialDigest(h http.Header, names []string) string {
	// Indexed by canonical names, as Values would after canonicalising
	// them: this runs for every request.
	authz, cookie := h["Authorization"], h["Cookie"]
	var others []string
	for _, n := range names {
		n = http.CanonicalHeaderKey(n)
		if n != "Authorization" && n != "Cookie" && len(h[n]) > 0 {
			others = append(others, n)
		}
	}
	if len(authz) == 0 && len(cookie) == 0 && len(others) == 0 {
		return ""
	}
	sum := sha256.New()
	for _, v := range authz {
		sum.Write([]byte(v))
		sum.Write([]byte{0})
	}
	sum.Write([]byte{1})
	for _, v := range cookie {
		sum.Write([]byte(v))
		sum.Write([]byte{0})
	}
	slices.Sort(others)
	for _, n := range others {
		sum.Write([]byte{2})
		sum.Write([]byte(n))
		sum.Write([]byte{0})
		for _, v := range h[n] {
			sum.Write([]byte(v))
			sum.Write([]byte{0})
		}
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// variantByAccept reports whether the registry answers path with different
// documents depending on Accept (see reference/protocols.md): docker
// manifests (OCI index vs docker list), npm packuments (abbreviated vs full),
// PyPI simple pages (PEP 691 JSON vs PEP 503 HTML). Blobs, tarballs and files
// are the same bytes whatever the client accepts.
func variantByAccept(format, path string) bool {
	switch format {
	case "docker":
		return isDockerManifest(path)
	case "npm":
		return !strings.Contains(path, "/-/") && !strings.HasSuffix(path, "/-")
	case "pypi":
		return strings.HasSuffix(path, "/") || strings.Contains(path, "/simple/")
	}
	return false
}

// dockerChallenged keeps apart, in b, a docker request sent with an
// anonymous token (the answer itself) from one sent without any token (the
// registry's challenge, a 401): neither has credentials. It reports whether
// the request's 401 is worth keeping: the ping's always, and a manifest's
// asked for without a token — containerd asks for a tag with HEAD and no
// token first, and during an outage only the kept challenge sends it on to
// its (stale) token.
func dockerChallenged(req *http.Request, cred string, b *strings.Builder) bool {
	if len(req.Header.Values("Authorization")) == 0 {
		return isDockerPing(req.URL.Path) || isDockerManifest(req.URL.Path)
	}
	if cred == "" {
		b.WriteString("\nanonymous-token")
	}
	return isDockerPing(req.URL.Path)
}

// isDockerPing matches the registry API's version check, /v2/, under any
// path prefix of the upstream.
func isDockerPing(path string) bool { return strings.HasSuffix(path, "/v2/") || path == "/v2" }

// BlobDigest returns the digest of a docker blob URL path
// (/v2/<name>/blobs/<digest>), or "" when the path is no blob's.
func BlobDigest(path string) string {
	i := strings.LastIndex(path, "/blobs/")
	if i < 0 || !strings.Contains(path[:i], "/v2/") {
		return ""
	}
	d := path[i+len("/blobs/"):]
	if strings.Contains(d, "/") {
		return ""
	}
	return d
}

// manifestDigestRef is the digest a docker manifest path names, "" for a
// tag. checkable is false for a digest the cache cannot check the bytes
// against (an algorithm other than sha256, or not 64 lower-case hex
// digits): a tag never holds ':', so such a path names a digest, and the
// cache neither keeps nor serves a copy it cannot verify (§6.1).
func manifestDigestRef(path string) (digest string, checkable bool) {
	ref := path[strings.LastIndex(path, "/manifests/")+len("/manifests/"):]
	if !strings.Contains(ref, ":") {
		return "", true
	}
	algo, hexSum, _ := strings.Cut(ref, ":")
	return ref, algo == "sha256" && validHash(hexSum)
}

// bytesNamed reports whether the stored copy m may answer ref as far as a
// digest goes; see holdsNamed.
func (ref Ref) bytesNamed(m *meta) bool { return holdsNamed(ref.named, m.Status, m.BodySHA256) }

// holdsNamed reports whether an answer with status whose body hashes to
// bodySHA256 is one for a manifest request by the digest named ("" by tag):
// a success must be those bytes, an error answer has none to check.
func holdsNamed(named string, status int, bodySHA256 string) bool {
	return named == "" || status < 200 || status > 299 || bodySHA256 == named
}

// isDockerManifest matches /v2/<name>/manifests/<ref> with a non-empty name
// and a single-segment reference, under any path prefix of the upstream.
func isDockerManifest(path string) bool {
	v2 := strings.Index(path, "/v2/")
	m := strings.LastIndex(path, "/manifests/")
	if v2 < 0 || m <= v2+len("/v2/")-1 {
		return false
	}
	name := path[v2+len("/v2/") : m]
	ref := path[m+len("/manifests/"):]
	return name != "" && ref != "" && !strings.Contains(ref, "/")
}

// urlShaping digests the headers of h that servers behind load balancers
// (Nexus, Artifactory, verdaccio) build the links of their answers from:
// X-Forwarded-*, Forwarded, X-Original-URL, X-Rewrite-URL, X-Host ("" when
// there are none). They are part of the key, not a reason to store nothing
// (docs/behaviour.md §6): a client that always sends them is still served
// from stale, while a copy an attacker obtained with
// X-Forwarded-Host: evil.example can only ever answer a request that asks
// the same.
func urlShaping(h http.Header) string {
	var names []string
	for k := range h {
		if strings.HasPrefix(k, "X-Forwarded-") || k == "Forwarded" || k == "X-Original-Url" ||
			k == "X-Rewrite-Url" || k == "X-Host" {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	sum := sha256.New()
	for _, n := range names {
		sum.Write([]byte(n))
		sum.Write([]byte{0})
		for _, v := range h[n] {
			sum.Write([]byte(v))
			sum.Write([]byte{0})
		}
	}
	return hex.EncodeToString(sum.Sum(nil))
}
