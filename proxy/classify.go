package proxy

import (
	"net"
	"net/url"
	"sort"
	"strings"

	"github.com/nora-breaker/nora-breaker/config"
)

// route is the result of classifying one request URL against the upstream
// table (docs/behaviour.md §3).
type route struct {
	// Upstream is the upstream the request belongs to; nil when unclassified.
	Upstream *config.Upstream
	// Alias is true when the request matched only by host (an alias host such
	// as files.pythonhosted.org, or the upstream's host outside its URL path).
	// Alias requests are never substituted by another upstream.
	Alias bool
	// Rel is the escaped path below the upstream's URL path ("/x/y" for
	// https://repo/maven2/x/y addressed to https://repo/maven2). It is only
	// meaningful when Alias is false.
	Rel string
	// Key is the breaker key of the host the request goes to: the
	// upstream's key for its URL host, "<key>@<host>" for an alias host
	// (docs/behaviour.md §3.1).
	Key string
	// ClimbsOut marks a path addressed below an upstream's base path whose
	// dot segments (plain or encoded) climb above it: refused with 400.
	ClimbsOut bool
}

// hostRoute is one host:port an upstream owns, with its breaker key.
type hostRoute struct {
	upstream *config.Upstream
	key      string
}

// Classified reports whether the request belongs to a configured upstream.
func (m route) Classified() bool { return m.Upstream != nil }

// upstreamTable classifies request URLs. It is built once per configuration and is
// read-only afterwards, so any number of goroutines may use it.
type upstreamTable struct {
	// byAuthority maps "scheme://host:port" to the upstreams whose URL has
	// that origin, longest path first, so the first boundary match is the
	// longest configured prefix.
	byAuthority map[string][]*config.Upstream
	// byHost maps "host:port" (lower-cased; the URL's port, or for an alias
	// the port it names, else its upstream scheme's default) to the first
	// upstream in config order that claims it.
	byHost map[string]hostRoute
	// chains holds each format's upstreams in config order.
	chains map[string][]*config.Upstream
	// byKey maps an upstream key to its (first) upstream.
	byKey map[string]*config.Upstream
}

// newTable builds the lookup structures for the given upstreams, which must be
// in config order.
func newTable(ups []*config.Upstream) *upstreamTable {
	t := &upstreamTable{
		byAuthority: make(map[string][]*config.Upstream),
		byHost:      make(map[string]hostRoute),
		chains:      make(map[string][]*config.Upstream),
		byKey:       make(map[string]*config.Upstream),
	}
	for _, u := range ups {
		if _, ok := t.byKey[u.Key]; !ok {
			t.byKey[u.Key] = u
		}
		o := origin(u.URL.Scheme, u.URL.Hostname(), u.URL.Port())
		t.byAuthority[o] = append(t.byAuthority[o], u)
		for _, h := range u.Hosts {
			hp := hostPortOf(u, h)
			if _, taken := t.byHost[hp]; !taken {
				t.byHost[hp] = hostRoute{upstream: u, key: u.HostKey(h)}
			}
		}
		t.chains[u.Format] = append(t.chains[u.Format], u)
	}
	for _, list := range t.byAuthority {
		// Stable keeps config order among equal lengths: a duplicate URL is
		// rejected by config, so ties only happen across formats.
		sort.SliceStable(list, func(i, j int) bool {
			return len(list[i].URL.EscapedPath()) > len(list[j].URL.EscapedPath())
		})
	}
	return t
}

// Classify maps a request URL to its upstream (docs/behaviour.md §3): the longest
// configured URL that is a prefix of it at a "/" boundary, else the first
// upstream claiming its host, else nothing.
func (t *upstreamTable) Classify(u *url.URL) route {
	host := strings.ToLower(u.Hostname())
	scheme := strings.ToLower(u.Scheme)
	ups := t.byAuthority[origin(scheme, host, u.Port())]
	if len(ups) == 0 {
		_, port := hostPort(u)
		return t.HostUpstream(host, port)
	}
	raw := u.EscapedPath()
	path, climbed := resolveDots(raw, false)
	loose, climbedLoose := resolveDots(raw, true)
	if !climbed && !climbedLoose {
		for _, up := range ups {
			base := up.URL.EscapedPath()
			rel, under := underPath(path, base)
			_, looseUnder := underPath(loose, base)
			if under && looseUnder {
				return route{Upstream: up, Rel: rel, Key: up.Key}
			}
		}
	}
	for _, up := range ups {
		if _, rawUnder := underPath(raw, up.URL.EscapedPath()); rawUnder {
			// Addressed below a base path, resolved above every one.
			return route{Upstream: up, Key: up.Key, ClimbsOut: true}
		}
	}
	_, port := hostPort(u)
	return t.HostUpstream(host, port)
}

// HostUpstream returns the route of the first upstream (config order) that
// claims host:port, or the zero route: the alias route of a request whose
// URL matches no upstream, and the route of a CONNECT, where only the host
// is visible.
func (t *upstreamTable) HostUpstream(host, port string) route {
	if hr, ok := t.byHost[net.JoinHostPort(strings.ToLower(host), port)]; ok {
		return route{Upstream: hr.upstream, Alias: true, Key: hr.key}
	}
	return route{}
}

// hostPortOf is "host:port" of one of u's hosts: its URL's port for the URL
// host, the port an alias names, else the default port of u's scheme.
func hostPortOf(u *config.Upstream, h string) string {
	h = strings.ToLower(h)
	if h == u.Hosts[0] {
		_, port := hostPort(u.URL)
		return net.JoinHostPort(h, port)
	}
	if host, port, err := net.SplitHostPort(h); err == nil {
		return net.JoinHostPort(host, port)
	}
	_, port := hostPort(&url.URL{Scheme: u.URL.Scheme, Host: h})
	return net.JoinHostPort(strings.Trim(h, "[]"), port)
}

// Candidates returns the upstreams that may be asked instead of the one m
// addressed (docs/behaviour.md §5.4): same format, later in config order, never a bound
// docker upstream, and none at all for alias requests or bound upstreams.
func (t *upstreamTable) Candidates(m route) []*config.Upstream {
	if m.Upstream == nil || m.Alias || m.Upstream.Bound {
		return nil
	}
	var out []*config.Upstream
	for _, c := range t.chains[m.Upstream.Format] {
		if c.Position > m.Upstream.Position && !c.Bound {
			out = append(out, c)
		}
	}
	return out
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

// origin normalises scheme, host and port so that default ports compare equal
// to an absent port.
func origin(scheme, host, port string) string {
	scheme = strings.ToLower(scheme)
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		return scheme + "://" + strings.ToLower(host)
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(host), port)
}
