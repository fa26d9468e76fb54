package stale

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// Docker clients ask for the same image in their own ways (docs/behaviour.md
// §6.1): skopeo pings /v2/ and GETs a manifest by tag; containerd never
// pings, HEADs the tag (first without a token) and GETs the manifest by
// digest; each sends its own Accept list. A copy is kept under the exact
// request that stored it, so when that key misses, a docker manifest or
// ping is looked up by what the answer means rather than how it was asked:
//
//   - the same URL asked with another Accept list: a stored manifest whose
//     media type the request's Accept admits is a right answer for it;
//   - a manifest by digest: any stored manifest of the repository whose
//     Docker-Content-Digest is that digest (content-addressed: the same
//     bytes), also one fetched by tag. The registry's header is only a
//     claim: a copy is filed under a digest only when its body hashes to
//     it, and never under one the cache cannot check;
//   - a manifest by tag that only a HEAD stored: the HEAD's
//     Docker-Content-Digest names the manifest, whose copy by digest holds
//     the bytes the tag stood for when the HEAD was answered;
//   - a request without any token or credential: the registry's challenge,
//     as a stored tokenless answer of the same registry gave it. A ping
//     gets the challenge without a scope (or a 200 when the registry
//     answered tokenless requests itself); a manifest gets the challenge
//     with its repository's pull scope.
//
// Every lookup stays within whose request stored the copy: the index keys
// carry the credential lines of the cache key, and every candidate must
// pass Ref.servable, so a private copy is never another client's answer.

// dockerName is a docker manifest's or ping's cache key split into what the
// lookups compare.
type dockerName struct {
	url string // the URL as the client addressed it
	// who is the key's credential lines ("\ncred=…", "\nanonymous-token"):
	// "" for a request that carried no token and no credential.
	who  string
	head bool
	// root is the registry's /v2/ URL; ping marks the ping itself.
	root string
	ping bool
	// repo is the manifest URL up to and including "/manifests/", ref the
	// tag or digest after it and query its query ("?…" or "").
	repo, ref, query string
}

// parseDockerName splits key; ok is false for a key that is no docker
// manifest's or ping's.
func parseDockerName(key string) (n dockerName, ok bool) {
	lines := strings.Split(key, "\n")
	n.url = lines[0]
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "accept="):
		case l == "head":
			n.head = true
		default:
			n.who += "\n" + l
		}
	}
	scheme, rest, found := strings.Cut(n.url, "://")
	slash := strings.IndexByte(rest, '/')
	if !found || slash < 0 {
		return dockerName{}, false
	}
	origin := scheme + "://" + rest[:slash]
	path, query := rest[slash:], ""
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query = path[:i], path[i:]
	}
	v2 := strings.Index(path, "/v2/")
	if v2 < 0 {
		return dockerName{}, false
	}
	n.root = origin + path[:v2+len("/v2/")]
	switch {
	case isDockerPing(path):
		n.ping = true
	case isDockerManifest(path):
		m := strings.LastIndex(path, "/manifests/") + len("/manifests/")
		n.repo, n.ref, n.query = origin+path[:m], path[m:], query
	default:
		return dockerName{}, false
	}
	return n, true
}

// family names the copies of the same URL and the same requester, whatever
// Accept list asked.
func (n dockerName) family() string {
	if n.head {
		return n.url + n.who + "\nhead"
	}
	return n.url + n.who
}

// digestName names the manifest copies of one repository and requester
// whose body is digest.
func (n dockerName) digestName(digest string) string { return n.repo + "@" + digest + n.query + n.who }

// repository is the name of the manifest's repository ("team/app").
func (n dockerName) repository() string {
	_, after, _ := strings.Cut(strings.TrimSuffix(n.repo, "/manifests/"), "/v2/")
	return after
}

// byDigest reports whether the reference is a digest rather than a tag.
func (n dockerName) byDigest() bool { return strings.HasPrefix(n.ref, "sha256:") }

// itemSet is a set of index entries.
type itemSet map[*item]struct{}

// dockerIndex finds docker copies by meaning. Guarded by Cache.mu.
type dockerIndex struct {
	families map[string]itemSet // dockerName.family → copies
	digests  map[string]itemSet // dockerName.digestName → GET copies answered 200, by the digest of their bytes
	roots    map[string]itemSet // registry root → copies of tokenless requests
}

func newDockerIndex() dockerIndex {
	return dockerIndex{families: map[string]itemSet{}, digests: map[string]itemSet{}, roots: map[string]itemSet{}}
}

// names lists the index names it is filed under, each with its map.
func (d *dockerIndex) names(it *item) []struct {
	m    map[string]itemSet
	name string
} {
	n, ok := parseDockerName(it.key)
	if !ok {
		return nil
	}
	type entry = struct {
		m    map[string]itemSet
		name string
	}
	out := []entry{{d.families, n.family()}}
	if dg := filedDigest(it.meta); dg != "" && n.repo != "" && !n.head && it.meta.Status == http.StatusOK {
		out = append(out, entry{d.digests, n.digestName(dg)})
	}
	if n.who == "" {
		out = append(out, entry{d.roots, n.root})
	}
	return out
}

func (d *dockerIndex) add(it *item) {
	for _, e := range d.names(it) {
		s := e.m[e.name]
		if s == nil {
			s = itemSet{}
			e.m[e.name] = s
		}
		s[it] = struct{}{}
	}
}

func (d *dockerIndex) remove(it *item) {
	for _, e := range d.names(it) {
		if s := e.m[e.name]; s != nil {
			delete(s, it)
			if len(s) == 0 {
				delete(e.m, e.name)
			}
		}
	}
}

// claimedDigest is the stored answer's Docker-Content-Digest when it is a
// sha256 digest, else "": what the registry says the manifest's bytes hash
// to (a HEAD's copy has no bytes to check it against).
func claimedDigest(m *meta) string {
	if d := m.Header.Get("Docker-Content-Digest"); validDigest(d) {
		return d
	}
	return ""
}

// filedDigest is the digest a manifest copy is found by: its
// Docker-Content-Digest, when its body hashes to it; else "" (a digest
// names the bytes, docs/behaviour.md §6.1).
func filedDigest(m *meta) string {
	if d := claimedDigest(m); d != "" && d == m.BodySHA256 {
		return d
	}
	return ""
}

// manifestCopy reports whether m is a docker manifest GET's successful
// copy, whose body's digest it records.
func manifestCopy(m *meta) bool {
	n, ok := parseDockerName(m.Key)
	return ok && n.repo != "" && !n.head && m.Status >= 200 && m.Status <= 299
}

// match is the copy Find serves: the copy whose status, headers and body
// are served, and when the answer's claim was made (the copy's own time,
// or that of the HEAD that named its digest); or an answer made from the
// registry's stored challenge.
type match struct {
	it       *item
	storedAt time.Time
	made     *Entry
}

// dockerMatchLocked finds a docker copy for ref, whose own key missed.
// c.mu must be held.
func (c *Cache) dockerMatchLocked(ref Ref) (match, bool) {
	if !ref.docker {
		return match{}, false
	}
	n, ok := parseDockerName(ref.Key)
	if !ok {
		return match{}, false
	}
	fits := func(it *item) bool { return c.answers(ref, it) }
	if it := newest(c.dock.families[n.family()], fits); it != nil {
		return match{it: it, storedAt: it.meta.StoredAt}, true
	}
	if n.head {
		// The caller looks at the GET's copies next.
		return match{}, false
	}
	if n.repo != "" && n.byDigest() {
		if it := newest(c.dock.digests[n.digestName(n.ref)], fits); it != nil {
			return match{it: it, storedAt: it.meta.StoredAt}, true
		}
	}
	if n.repo != "" && !n.byDigest() {
		headOf := n
		headOf.head = true
		named := func(it *item) bool {
			return it.meta.Status == http.StatusOK && claimedDigest(it.meta) != "" && ref.servable(it.meta.Cred)
		}
		if h := newest(c.dock.families[headOf.family()], named); h != nil {
			if it := newest(c.dock.digests[n.digestName(claimedDigest(h.meta))], fits); it != nil {
				return match{it: it, storedAt: h.meta.StoredAt}, true
			}
		}
	}
	if n.who == "" && ref.Cred == "" {
		return c.challengeLocked(n, ref)
	}
	return match{}, false
}

// answers reports whether the stored copy it may answer ref: whoever
// stored it may be served to ref's requester, its variant matches, its
// bytes are those a digest ref names, and a manifest's media type is one
// ref's Accept admits (an error or a 404 says the same whatever was
// accepted).
func (c *Cache) answers(ref Ref, it *item) bool {
	if !ref.servable(it.meta.Cred) || !variantMatches(it.meta, ref.header) || !ref.bytesNamed(it.meta) {
		return false
	}
	if it.meta.Status < 200 || it.meta.Status > 299 {
		return true
	}
	return acceptsMedia(ref.header, it.meta.Header.Get("Content-Type"))
}

// newest is the most recently stored item of s that ok accepts, or nil.
func newest(s itemSet, ok func(*item) bool) *item {
	var best *item
	for it := range s {
		if ok(it) && (best == nil || it.meta.StoredAt.After(best.meta.StoredAt)) {
			best = it
		}
	}
	return best
}

// challengeLocked answers a tokenless ping or manifest request from the
// registry's stored tokenless answers: its newest challenge, with the
// scope this request would have been given (none for the ping); for a
// ping, a registry that answered tokenless requests with a success gets a
// 200. c.mu must be held.
func (c *Cache) challengeLocked(n dockerName, ref Ref) (match, bool) {
	set := c.dock.roots[n.root]
	tokenless := func(it *item) bool { return it.meta.Cred == "" && ref.servable(it.meta.Cred) }
	challenged := func(it *item) bool {
		return tokenless(it) && it.meta.Status == http.StatusUnauthorized && it.meta.Header.Get("Www-Authenticate") != ""
	}
	if src := newest(set, challenged); src != nil {
		scope := ""
		if !n.ping {
			scope = "repository:" + n.repository() + ":pull"
		}
		h := http.Header{"Content-Type": {"application/json"},
			"Www-Authenticate": {withScope(src.meta.Header.Get("Www-Authenticate"), scope)}}
		copyHeader(h, src.meta.Header, "Docker-Distribution-Api-Version")
		return match{made: madeEntry(http.StatusUnauthorized, h,
			`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}`+"\n", src.meta.StoredAt)}, true
	}
	if !n.ping {
		return match{}, false
	}
	succeeded := func(it *item) bool { return tokenless(it) && it.meta.Status == http.StatusOK }
	if src := newest(set, succeeded); src != nil {
		h := http.Header{"Content-Type": {"application/json"}}
		copyHeader(h, src.meta.Header, "Docker-Distribution-Api-Version")
		return match{made: madeEntry(http.StatusOK, h, "{}", src.meta.StoredAt)}, true
	}
	return match{}, false
}

// copyHeader copies header name from src to dst when src has it.
func copyHeader(dst, src http.Header, name string) {
	if v := src.Values(name); len(v) > 0 {
		dst[http.CanonicalHeaderKey(name)] = append([]string(nil), v...)
	}
}

// madeEntry is an answer built from a stored one rather than read from a
// body file.
func madeEntry(status int, h http.Header, body string, storedAt time.Time) *Entry {
	return &Entry{Status: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Size: int64(len(body)),
		StoredAt: storedAt}
}
