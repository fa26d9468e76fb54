package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
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

// Ref names the copies of one request: the key they are stored under, and
// who asked. Cred is a digest of the request's credentials ("" when it
// carries none); it is stored with every copy, so that a copy is only ever
// served to a request the current mode allows it for, whatever mode it was
// stored under (see Servable).
type Ref struct {
	Key  string
	Cred string
	Mode string
}

// Servable reports whether a copy stored by a request whose credentials had
// digest storedCred may be served to ref: under "share" always, under
// "isolate" only to the same credentials (or to no credentials if it was
// stored without any), under "off" only a copy stored without credentials to
// a request without credentials.
func (ref Ref) Servable(storedCred string) bool {
	switch ref.Mode {
	case modeShare:
		return true
	case modeOff:
		return storedCred == "" && ref.Cred == ""
	}
	return storedCred == ref.Cred
}

// For builds the Ref of req, or reports ok=false when the request must not
// be stored or served from the cache.
//
// The key is the URL as the client addressed it (scheme, lower-cased host,
// port only when not the scheme's default, escaped path, raw query; never the
// userinfo), then the Accept header for requests whose answer depends on it
// (docker manifests, npm packuments, PyPI simple pages), then the credential
// rule of mode: "off" refuses requests with Authorization or Cookie,
// "isolate" (also the meaning of "") appends a SHA-256 of those headers,
// "share" ignores them. An unknown mode refuses, so a typo never leaks a
// private answer to another client.
func For(req *http.Request, format, mode string) (ref Ref, ok bool) {
	if req == nil || req.URL == nil {
		return Ref{}, false
	}
	authz, cookie := req.Header.Values("Authorization"), req.Header.Values("Cookie")
	hasCreds := len(authz) > 0 || len(cookie) > 0
	switch mode {
	case "":
		mode = modeIsolate
	case modeOff:
		if hasCreds {
			return Ref{}, false
		}
	case modeIsolate, modeShare:
	default:
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
	ref = Ref{Mode: mode}
	if hasCreds {
		ref.Cred = credentialDigest(authz, cookie)
		if mode != modeShare {
			b.WriteString("\ncred=")
			b.WriteString(ref.Cred)
		}
	}
	ref.Key = b.String()
	return ref, true
}

// keyFor is For's key alone.
func keyFor(req *http.Request, format, mode string) (key string, ok bool) {
	ref, ok := For(req, format, mode)
	return ref.Key, ok
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
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(normalHost(scheme, host))
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	b.WriteString(path)
	if q := req.URL.RawQuery; q != "" {
		b.WriteByte('?')
		b.WriteString(q)
	}
	return !strings.ContainsAny(b.String(), "\r\n")
}

// normalHost lower-cases host and drops the port when it is the scheme's
// default, so http://Example.com:80/x and http://example.com/x share a key.
func normalHost(scheme, host string) string {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		// No port (or a bare IPv6 literal in brackets): keep it whole.
		return strings.ToLower(host)
	}
	h = strings.ToLower(h)
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return net.JoinHostPort(h, port)
}

// credentialDigest hashes the credential headers so that the key (which is
// written to disk) separates tenants without containing their secrets.
func credentialDigest(authz, cookie []string) string {
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
