// Package route maps a request URL or a CONNECT target to the upstream it
// belongs to and the breaker key of the host it goes to (docs/behaviour.md §3).
package route

import (
	"net/url"
	"sort"
	"strings"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/internal/urlnorm"
)

// Route is the result of classifying one request URL.
type Route struct {
	// Upstream is the upstream the request belongs to; nil when unclassified.
	Upstream *config.Upstream
	// Alias is true when the request matched only by host (an alias host such
	// as files.pythonhosted.org, or the upstream's host outside its URL path).
	// Alias requests are never substituted by another upstream.
	Alias bool
	// Equivalent is true when the request went to one of the upstream's
	// equivalent hosts under its base path (registry.yarnpkg.com for
	// registry.npmjs.org): the upstream's own request under another name,
	// whose first candidate is the upstream at its URL.
	Equivalent bool
	// Rel is the escaped path below the upstream's URL path ("/x/y" for
	// https://repo/maven2/x/y addressed to https://repo/maven2). It is only
	// meaningful when Alias is false.
	Rel string
	// Key is the breaker key of the host the request goes to: the
	// upstream's key for its URL host, "<key>@<host>" for an alias or
	// equivalent host (docs/behaviour.md §3.1).
	Key string
	// Candidates are the upstreams that may be asked instead, in order
	// (docs/behaviour.md §5.4): worked out once per table, never for an
	// alias request or a bound upstream.
	Candidates []*config.Upstream
	// ClimbsOut marks a path addressed below an upstream's base path whose
	// dot segments (plain or encoded) climb above it: refused with 400.
	ClimbsOut bool
}

// Classified reports whether the request belongs to a configured upstream.
func (r Route) Classified() bool { return r.Upstream != nil }

// hostRoute is one host:port an upstream owns, with its breaker key and
// the scheme it is reached with: the upstream's own.
type hostRoute struct {
	upstream *config.Upstream
	key      string
	scheme   string
}

// prefixed is an upstream reached by URL prefix (its URL's origin, or an
// equivalent host's), with its escaped base path, the breaker key of the
// host and the candidates of a request there, worked out once.
type prefixed struct {
	upstream   *config.Upstream
	base       string
	key        string
	equivalent bool
	candidates []*config.Upstream
}

// Table classifies request URLs against one configuration's upstreams. It
// is built once per configuration and is read-only afterwards, so any
// number of goroutines may use it.
type Table struct {
	// byAuthority maps "scheme://host:port" to the upstreams whose URL has
	// that origin, longest path first, so the first boundary match is the
	// longest configured prefix.
	byAuthority map[string][]prefixed
	// byHost maps "host:port" (lower-cased; the URL's port, or for an alias
	// the port it names, else its upstream scheme's default) to the
	// upstream whose URL host it is, else the first upstream in config
	// order that claims it.
	byHost map[string]hostRoute
	// candidates holds, per upstream, the upstreams that may be asked
	// instead of it.
	candidates map[*config.Upstream][]*config.Upstream
	// byKey maps an upstream key to its (first) upstream.
	byKey map[string]*config.Upstream
}

// NewTable builds the lookup structures for ups, which must be in config
// order.
func NewTable(ups []*config.Upstream) *Table {
	t := &Table{
		byAuthority: make(map[string][]prefixed),
		byHost:      make(map[string]hostRoute),
		candidates:  make(map[*config.Upstream][]*config.Upstream),
		byKey:       make(map[string]*config.Upstream),
	}
	chains := make(map[string][]*config.Upstream)
	for _, u := range ups {
		if _, ok := t.byKey[u.Key]; !ok {
			t.byKey[u.Key] = u
		}
		host, port := hostport.Of(u.URL)
		o := hostport.Origin(u.URL.Scheme, host, port)
		t.byAuthority[o] = append(t.byAuthority[o], prefixed{upstream: u, base: urlnorm.Path(u.URL.EscapedPath()), key: u.Key})
		t.claimHost(u, u.Hosts[0])
		chains[u.Format] = append(chains[u.Format], u)
	}
	// Every URL host is claimed before any other host, so a configured
	// registry is never taken for another upstream's alias or equivalent.
	for _, u := range ups {
		for _, h := range u.Hosts[1:] {
			t.claimHost(u, h)
		}
	}
	for _, u := range ups {
		t.candidates[u] = candidatesOf(u, chains[u.Format])
	}
	t.addEquivalents(ups)
	for _, list := range t.byAuthority {
		// Stable keeps config order among equal lengths: a duplicate URL is
		// rejected by config, so ties only happen across formats and
		// between equivalents.
		sort.SliceStable(list, func(i, j int) bool { return len(list[i].base) > len(list[j].base) })
		for i := range list {
			if !list[i].equivalent {
				list[i].candidates = t.candidates[list[i].upstream]
			}
		}
	}
	return t
}

// addEquivalents puts each upstream's equivalent hosts in the prefix table:
// the upstream's URL with the host replaced, so a request there is
// classified under the same base path. An origin that is some upstream's
// own URL origin stays that upstream's alone: a configured registry is
// never another's equivalent. A request to an equivalent host is asked of
// the upstream at its URL first (the same registry under its own name),
// then of the upstream's candidates.
func (t *Table) addEquivalents(ups []*config.Upstream) {
	own := make(map[string]bool, len(t.byAuthority))
	for o := range t.byAuthority {
		own[o] = true
	}
	for _, u := range ups {
		for _, h := range u.Equivalents {
			host, port, _ := hostport.Split(HostPortOf(u, h), "")
			o := hostport.Origin(u.URL.Scheme, host, port)
			if own[o] {
				continue
			}
			cands := append([]*config.Upstream{u}, t.candidates[u]...)
			t.byAuthority[o] = append(t.byAuthority[o], prefixed{upstream: u, base: urlnorm.Path(u.URL.EscapedPath()),
				key: u.HostKey(h), equivalent: true, candidates: cands})
		}
	}
}

// claimHost gives host h of u to u, unless an upstream earlier in config
// order (or one's URL host) already has it.
func (t *Table) claimHost(u *config.Upstream, h string) {
	hp := HostPortOf(u, h)
	if _, taken := t.byHost[hp]; !taken {
		t.byHost[hp] = hostRoute{upstream: u, key: u.HostKey(h), scheme: u.URL.Scheme}
	}
}

// candidatesOf returns the upstreams that may be asked instead of u: same
// format, later in config order, never a bound docker upstream, and none at
// all for a bound upstream.
func candidatesOf(u *config.Upstream, chain []*config.Upstream) []*config.Upstream {
	if u.Bound {
		return nil
	}
	var out []*config.Upstream
	for _, c := range chain {
		if c.Position > u.Position && !c.Bound {
			out = append(out, c)
		}
	}
	return out
}

// Classify maps a request URL to its route (docs/behaviour.md §3): the
// longest configured URL of the same scheme, host and port that is a prefix
// of it at a "/" boundary (an equivalent host standing for its upstream's
// host), else the first upstream claiming its host and
// port with the same scheme, else nothing. A request whose scheme is not
// the upstream's is not the upstream's: http:// to an https upstream's
// port would only ever fail, and must not count against it.
func (t *Table) Classify(u *url.URL) Route {
	host, port := hostport.Of(u)
	scheme := strings.ToLower(u.Scheme)
	ups := t.byAuthority[hostport.Origin(scheme, host, port)]
	if len(ups) == 0 {
		return t.hostUpstream(scheme, host, port)
	}
	raw := u.EscapedPath()
	path, climbed := resolveDots(raw, false)
	loose, climbedLoose := resolveDots(raw, true)
	// Base paths are compared in one spelling per byte (%2f and %2F are one
	// path); Rel keeps the client's, since the case of an escape changes no
	// byte and the length of none.
	normPath, normLoose, normRaw := urlnorm.Path(path), urlnorm.Path(loose), urlnorm.Path(raw)
	if !climbed && !climbedLoose {
		for _, p := range ups {
			_, under := underPath(normPath, p.base)
			_, looseUnder := underPath(normLoose, p.base)
			if under && looseUnder {
				return Route{Upstream: p.upstream, Rel: relBelow(path, p.base), Key: p.key, Equivalent: p.equivalent,
					Candidates: p.candidates}
			}
		}
	}
	for _, p := range ups {
		if _, rawUnder := underPath(normRaw, p.base); rawUnder {
			// Addressed below a base path, resolved above every one.
			return Route{Upstream: p.upstream, Key: p.key, Equivalent: p.equivalent, ClimbsOut: true}
		}
	}
	return t.hostUpstream(scheme, host, port)
}

// HostUpstream returns the route of the first upstream (config order) that
// claims host:port, or the zero route: the route of a CONNECT, where only
// the host is visible and the scheme is whatever the client starts inside.
func (t *Table) HostUpstream(host, port string) Route { return t.hostUpstream("", host, port) }

// hostUpstream is HostUpstream for a request of scheme ("" for any): the
// alias route of a request whose URL matches no upstream's prefix.
func (t *Table) hostUpstream(scheme, host, port string) Route {
	hr, ok := t.byHost[hostport.Join(host, port)]
	if !ok || (scheme != "" && scheme != hr.scheme) {
		return Route{}
	}
	return Route{Upstream: hr.upstream, Alias: true, Key: hr.key}
}

// ByKey returns the (first) upstream whose key is key, or nil.
func (t *Table) ByKey(key string) *config.Upstream { return t.byKey[key] }

// HostPorts lists every "host:port" the table classifies by host: the
// upstreams' URL hosts and their alias hosts.
func (t *Table) HostPorts() []string {
	out := make([]string, 0, len(t.byHost))
	for hp := range t.byHost {
		out = append(out, hp)
	}
	sort.Strings(out)
	return out
}

// HostPortOf is "host:port" of one of u's hosts: its URL's port for the URL
// host, the port an alias names, else the default port of u's scheme.
func HostPortOf(u *config.Upstream, h string) string {
	if strings.EqualFold(h, u.Hosts[0]) {
		host, port := hostport.Of(u.URL)
		return hostport.Join(host, port)
	}
	host, port, err := hostport.Split(h, hostport.DefaultPort(u.URL.Scheme))
	if err != nil {
		return hostport.Join(h, hostport.DefaultPort(u.URL.Scheme))
	}
	return hostport.Join(host, port)
}

// relBelow is what remains of path below base, once underPath has said it
// lies there (base "" or "/" keeps all of it).
func relBelow(path, base string) string {
	if base == "" || base == "/" {
		return path
	}
	return path[len(base):]
}

// underPath reports whether path lies under base at a "/" boundary and
// returns the remainder (empty or starting with "/").
func underPath(path, base string) (string, bool) {
	if base == "" || base == "/" {
		return path, true
	}
	if !strings.HasPrefix(path, base) {
		return "", false
	}
	rest := path[len(base):]
	if rest == "" || rest[0] == '/' {
		return rest, true
	}
	return "", false
}
