package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// ParentFormat is the format name the parent proxies' breakers are shown
// under (/health, /breakers, the status page) and the override name their
// settings are looked up by after their own key.
const ParentFormat = "parent"

// directParent is the [sidecar.parents] value that sends an upstream's
// traffic straight to it, whatever parent_proxy says.
const directParent = "direct"

// Parent is a parent proxy: the proxy the upstream traffic of the
// upstreams routed through it goes to (docs/behaviour.md §5.8).
type Parent struct {
	// URL is the parent's scheme (http or https) and host:port, the port
	// always written; never any user info.
	URL *url.URL
	// User and Password are the Basic credentials sent to the parent, and
	// only to it, in Proxy-Authorization. Never log them.
	User, Password string
}

// Key is the parent's breaker key, "parent:<scheme>://<host>:<port>". It
// carries no credential, so it may appear in logs, metrics and answers.
func (p *Parent) Key() string { return ParentFormat + ":" + p.URL.String() }

// sameCredentials reports whether p and q send the same credentials.
func (p *Parent) sameCredentials(q *Parent) bool { return p.User == q.User && p.Password == q.Password }

// Parents lists every parent proxy the configuration routes traffic
// through, each once, in order: parent_proxy first (hosts no upstream owns
// go through it), then the parents of the upstreams in configuration order.
func (c *Config) Parents() []*Parent {
	var out []*Parent
	seen := map[string]bool{}
	add := func(p *Parent) {
		if p != nil && !seen[p.Key()] {
			seen[p.Key()] = true
			out = append(out, p)
		}
	}
	add(c.Parent)
	for _, u := range c.Upstreams {
		add(u.Parent)
	}
	return out
}

// ParentThresholds are a parent's breaker settings: the override of its
// key, then the "parent" override, then the global values.
func (c *Config) ParentThresholds(p *Parent) BreakerSettings {
	return c.lookUp(0, p.Key(), ParentFormat) // a parent is never hedged
}

// parseParent reads a parent proxy URL: http:// or https://, a host, an
// optional port (the scheme's default otherwise), optional user:pass, and
// nothing else. Problems never quote the URL: it may carry a password.
func parseParent(raw string) (*Parent, error) {
	const usage = "must be http://[user:pass@]host:port or https://[user:pass@]host:port"
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, errors.New(usage)
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return nil, fmt.Errorf("%s (scheme %q)", usage, u.Scheme)
	case u.Hostname() == "":
		return nil, fmt.Errorf("%s (no host)", usage)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return nil, fmt.Errorf("%s (no path, query or fragment)", usage)
	}
	port := u.Port()
	if port == "" {
		port = hostport.DefaultPort(scheme)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, fmt.Errorf("%s (bad port %q)", usage, port)
	}
	if !validHostname(hostport.Host(u.Hostname())) {
		return nil, fmt.Errorf("%s (bad host)", usage)
	}
	p := &Parent{URL: &url.URL{Scheme: scheme, Host: hostport.Join(u.Hostname(), port)}}
	if u.User != nil {
		p.User = u.User.Username()
		p.Password, _ = u.User.Password()
	}
	return p, nil
}

// parentTable is the parsed parent settings of [sidecar]: the default
// parent and the [sidecar.parents] entries by upstream key or format (a nil
// entry: direct).
type parentTable struct {
	def    *Parent
	byName map[string]*Parent
}

// of is the parent of upstream u: its key's entry, else its format's, else
// parent_proxy; nil for direct.
func (t parentTable) of(u *Upstream) *Parent {
	for _, name := range []string{u.Key, u.Format} {
		if p, ok := t.byName[name]; ok {
			return p
		}
	}
	return t.def
}

// validateParents parses parent_proxy (with parent_proxy_password),
// parent_no_proxy and [sidecar.parents]. Two entries naming one parent's
// address must send it the same credentials; an entry at parent_proxy's
// address that names none takes parent_proxy's.
func validateParents(s *Sidecar, at func(string) origin, probs *problems) (parentTable, NoProxy) {
	t := parentTable{byName: map[string]*Parent{}}
	if s.ParentProxy != "" {
		p, err := parseParent(s.ParentProxy)
		if err != nil {
			probs.add(at("parent_proxy").errorf("%v", err))
		} else {
			t.def = p
		}
	}
	if s.ParentProxyPassword != "" {
		switch {
		case s.ParentProxy == "":
			probs.add(at("parent_proxy_password").errorf("is set but parent_proxy is not"))
		case t.def != nil && t.def.User == "":
			probs.add(at("parent_proxy_password").errorf("is set but parent_proxy names no user (http://user@host:port)"))
		case t.def != nil:
			t.def.Password = s.ParentProxyPassword
		}
	}
	byKey := map[string]*Parent{}
	if t.def != nil {
		byKey[t.def.Key()] = t.def
	}
	for _, name := range sortedKeys(s.Parents) {
		raw := s.Parents[name]
		if strings.EqualFold(strings.TrimSpace(raw), directParent) {
			t.byName[name] = nil
			continue
		}
		p, err := parseParent(raw)
		if err != nil {
			probs.add(at("parents."+name).errorf("must be %q or a parent proxy URL: %v", directParent, err))
			continue
		}
		if known, ok := byKey[p.Key()]; ok {
			inherits := p.User == "" && p.Password == "" && known == t.def
			if !inherits && !p.sameCredentials(known) {
				probs.add(at("parents."+name).errorf("names parent %s with other credentials than another entry does", p.Key()))
				continue
			}
			p = known
		}
		byKey[p.Key()] = p
		t.byName[name] = p
	}
	np, err := ParseNoProxy(s.ParentNoProxy)
	if err != nil {
		probs.add(at("parent_no_proxy").errorf("%v", err))
	}
	return t, np
}

// ParentDisplay is parent_proxy without its credentials (the user is
// shown, the password never), for check-config and the start-up log;
// "off" when unset.
func (s Sidecar) ParentDisplay() string {
	if s.ParentProxy == "" {
		return "off"
	}
	p, err := parseParent(s.ParentProxy)
	if err != nil {
		return redactURL(s.ParentProxy)
	}
	if p.User != "" {
		return p.URL.Scheme + "://" + p.User + "@" + p.URL.Host
	}
	return p.URL.String()
}

// NoProxy is parent_no_proxy: the hosts reached directly although a parent
// is configured. An entry is a host name, matching that host and every
// host below it ("corp.example" and ".corp.example" both match
// "nexus.corp.example"); an IP address; a CIDR ("10.0.0.0/8"), matching
// hosts written as an address in it; each of the first two optionally with
// ":port", matching that port only. Names are not resolved to be matched:
// through a parent, the parent resolves them.
type NoProxy struct {
	entries []noProxyEntry
}

type noProxyEntry struct {
	domain string       // canonical host name, or "" for an address entry
	prefix netip.Prefix // a single address or a CIDR, when domain is ""
	port   string       // "" for any port
}

// ParseNoProxy compiles parent_no_proxy entries (already trimmed or not).
func ParseNoProxy(entries []string) (NoProxy, error) {
	var np NoProxy
	var bad []string
	for _, raw := range entries {
		e, ok := parseNoProxyEntry(strings.TrimSpace(raw))
		if !ok {
			bad = append(bad, strconv.Quote(raw))
			continue
		}
		np.entries = append(np.entries, e)
	}
	if len(bad) > 0 {
		return np, fmt.Errorf("entries %s must be a host name, .domain, IP address or CIDR, with an optional :port",
			strings.Join(bad, ", "))
	}
	return np, nil
}

func parseNoProxyEntry(s string) (noProxyEntry, bool) {
	if s == "" {
		return noProxyEntry{}, false
	}
	if pfx, err := netip.ParsePrefix(s); err == nil {
		return noProxyEntry{prefix: pfx.Masked()}, true
	}
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return noProxyEntry{}, false
		}
		host, port = h, p
	}
	host = hostport.Host(host)
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return noProxyEntry{prefix: netip.PrefixFrom(ip, ip.BitLen()), port: port}, true
	}
	host = strings.TrimPrefix(strings.TrimPrefix(host, "*"), ".")
	if host == "" || !validHostname(host) {
		return noProxyEntry{}, false
	}
	return noProxyEntry{domain: host, port: port}, true
}

// Match reports whether host (in its canonical form, internal/hostport) on
// port is to be reached directly.
func (np NoProxy) Match(host, port string) bool {
	if len(np.entries) == 0 {
		return false
	}
	ip, ipErr := netip.ParseAddr(host)
	ip = ip.Unmap()
	for _, e := range np.entries {
		if e.port != "" && e.port != port {
			continue
		}
		if e.domain == "" {
			if ipErr == nil && e.prefix.Contains(ip) {
				return true
			}
			continue
		}
		if host == e.domain || strings.HasSuffix(host, "."+e.domain) {
			return true
		}
	}
	return false
}

// Empty reports whether np names nothing.
func (np NoProxy) Empty() bool { return len(np.entries) == 0 }
