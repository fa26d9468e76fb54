package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// normalizeURL turns a configured upstream URL into the canonical form every
// other package compares against: http(s) only, scheme and host lower-cased,
// default port, credentials, query, fragment and trailing slash removed. It
// returns the user:pass that was embedded in the URL, if any.
func normalizeURL(raw string) (*url.URL, string, error) {
	shown := redactURL(raw)
	if strings.TrimSpace(raw) == "" {
		return nil, "", errors.New("empty URL")
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		if shown != raw {
			// The parser's own words quote the part it choked on, which
			// for a password holding "/", "?" or "#" is that password.
			return nil, "", fmt.Errorf("invalid URL %q: it does not parse (percent-encode any /, ?, # or @ in its user name or password)", shown)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, "", fmt.Errorf("invalid URL %q: %v", shown, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, "", fmt.Errorf("invalid URL %q: scheme must be http or https", shown)
	}
	if u.Hostname() == "" {
		return nil, "", fmt.Errorf("invalid URL %q: no host", shown)
	}
	var auth string
	if u.User != nil {
		auth = u.User.Username()
		if p, ok := u.User.Password(); ok {
			auth += ":" + p
		}
	}
	host := hostport.Host(u.Hostname())
	port := u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return &url.URL{
		Scheme:  u.Scheme,
		Host:    host,
		Path:    strings.TrimRight(u.Path, "/"),
		RawPath: strings.TrimRight(u.RawPath, "/"),
	}, auth, nil
}

// builtinAliases are the other hosts a well-known registry sends clients to
// (token realms, CDNs, file hosts), so traffic to them is classified with it.
func builtinAliases(host string) []string {
	switch host {
	case "registry-1.docker.io":
		return []string{"auth.docker.io", "production.cloudflare.docker.com"}
	case "pypi.org":
		return []string{"files.pythonhosted.org"}
	case "crates.io":
		return []string{"index.crates.io", "static.crates.io"}
	case "proxy.golang.org":
		return []string{"sum.golang.org"}
	case "rubygems.org":
		return []string{"index.rubygems.org"}
	case "registry.terraform.io":
		return []string{"releases.hashicorp.com"}
	case "api.nuget.org":
		return []string{"azuresearch-usnc.nuget.org", "azuresearch-ussc.nuget.org"}
	case "ghcr.io":
		return []string{"pkg-containers.githubusercontent.com"}
	}
	return nil
}

// builtinEquivalents are the hosts that are a well-known registry under
// another name, serving the same paths: yarn's name for the npm registry,
// Docker Hub's index name (go-containerregistry's default), Maven
// Central's Apache name, PyPI's old name.
func builtinEquivalents(host string) []string {
	switch host {
	case "registry.npmjs.org":
		return []string{"registry.yarnpkg.com"}
	case "registry-1.docker.io":
		return []string{"index.docker.io"}
	case "repo1.maven.org":
		return []string{"repo.maven.apache.org"}
	case "pypi.org":
		return []string{"pypi.python.org"}
	}
	return nil
}

// chainInput is everything needed to turn one format's entries into
// upstreams.
type chainInput struct {
	spec         formatSpec
	entries      []entry
	proxyTimeout int
	readTimeout  int
	hedgeAfter   time.Duration
	extraHosts   []string            // nuget search/autocomplete hosts
	aliases      map[string][]string // [sidecar.aliases]
	equivalents  map[string][]string // [sidecar.equivalents]
}

// buildChain normalises one format's entries into its upstream chain,
// reporting bad URLs and duplicates at the place they were written.
func buildChain(in chainInput, probs *problems) []*Upstream {
	var chain []*Upstream
	seenKey := map[string]bool{}
	seenPrefix := map[string]bool{}
	for _, en := range in.entries {
		u, userinfo, err := normalizeURL(en.rawURL)
		if err != nil {
			probs.add(en.at.errorf("%v", err))
			continue
		}
		if in.spec.name == "nuget" {
			// NORA builds every nuget path from the proxy's scheme and
			// authority; a configured path is never used.
			u.Path, u.RawPath = "", ""
		}
		up := &Upstream{
			Format: in.spec.name, Name: en.name, URL: u, Auth: en.auth,
			Prefix: strings.Trim(en.prefix, "/"), Namespace: en.namespace,
			Key:          in.spec.name,
			Position:     len(chain),
			ProxyTimeout: time.Duration(in.proxyTimeout) * time.Second,
			ReadTimeout:  time.Duration(in.readTimeout) * time.Second,
			Source:       en.source,

			formatHedgeAfter: in.hedgeAfter,
		}
		if up.Auth == "" {
			up.Auth = userinfo
		}
		// A docker upstream with a prefix serves its own images; an rpm or
		// deb upstream is a named repository, whose paths every other one
		// has too (repodata/repomd.xml, dists/<suite>/InRelease) with
		// other contents: none is another's stand-in.
		up.Bound = (up.Format == "docker" && up.Prefix != "") || up.Format == "rpm" || up.Format == "deb"
		if perUpstreamKey(up.Format) {
			up.Key = up.Format + ":" + u.String()
			if seenKey[up.Key] {
				probs.add(en.at.errorf("duplicate upstream %s", up.Key))
				continue
			}
			seenKey[up.Key] = true
		}
		if up.Prefix != "" {
			if seenPrefix[up.Prefix] {
				probs.add(en.at.errorf("duplicate docker prefix %q", up.Prefix))
				continue
			}
			seenPrefix[up.Prefix] = true
		}
		up.Hosts, up.Equivalents = hostsOf(up, in)
		if up.Format == "docker" {
			up.Serves = servesOf(up, en, probs)
		}
		chain = append(chain, up)
	}
	return chain
}

// hostsOf lists the upstream's own host first, then its equivalent hosts,
// then every alias, once each, and which of them are equivalents. An
// equivalent comes before the aliases so that a host written as an alias
// too (the workaround before yarn's registry was built in) is an
// equivalent: the stronger claim, and the one that fails over.
func hostsOf(up *Upstream, in chainInput) (hosts, equivalents []string) {
	host := up.URL.Hostname()
	hosts = []string{host}
	seen := map[string]bool{host: true}
	add := func(list []string) {
		for _, h := range list {
			if h = CanonicalHostSpec(h); h != "" && !seen[h] {
				seen[h] = true
				hosts = append(hosts, h)
			}
		}
	}
	add(builtinEquivalents(host))
	add(in.equivalents[up.Key])
	if up.Key != up.Format {
		add(in.equivalents[up.Format])
	}
	if len(hosts) > 1 {
		equivalents = slices.Clone(hosts[1:])
	}
	add(builtinAliases(host))
	add(in.extraHosts)
	add(in.aliases[up.Key])
	if up.Key != up.Format {
		add(in.aliases[up.Format])
	}
	return hosts, equivalents
}

// DockerRegistryName is the name a client gives the registry at host (a
// host, or host:port): the name containerd sends a mirror as ?ns=, which is
// the registry part of an image reference. Docker Hub is "docker.io"
// under any of its hosts; any other registry is its canonical host, with
// its port unless it is 443. "" for a name that is no host.
func DockerRegistryName(host string) string {
	h, port, err := hostport.Split(strings.TrimSpace(host), "443")
	if err != nil || h == "" {
		return ""
	}
	switch h {
	case "docker.io", "registry-1.docker.io", "index.docker.io", "registry.hub.docker.com":
		if port == "443" {
			return "docker.io"
		}
	}
	return hostport.Authority("https", h, port)
}

// servesOf lists the registries a docker upstream answers for: its own,
// then each one its `serves` names, once each. An entry that is no host
// is reported where it was written.
func servesOf(up *Upstream, en entry, probs *problems) []string {
	own := DockerRegistryName(up.URL.Host)
	out := []string{own}
	for _, s := range en.serves {
		name := DockerRegistryName(s)
		if name == "" || !validAllowHost(strings.ToLower(strings.TrimSpace(s))) {
			probs.add(en.servesAt.errorf("serves entry %q must be a registry host such as \"ghcr.io\" or \"registry.corp:5000\"", s))
			continue
		}
		if !contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// CanonicalHostSpec is a configured "host" or "host:port" (an alias, an
// equivalent, an allow_hosts entry, a resolve key) in the one canonical
// form requests are matched in (internal/hostport): lower case, no trailing
// dot, so "Registry.Example.:8443" names what a client's
// "registry.example:8443" does.
func CanonicalHostSpec(h string) string {
	h = strings.TrimSpace(h)
	if host, port, err := net.SplitHostPort(h); err == nil {
		return hostport.Join(host, port)
	}
	return hostport.Host(h)
}
