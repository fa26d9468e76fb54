package config

import (
	"strings"
	"time"
)

// proxy resolves a single `proxy` value: NORA_<FMT>_PROXY beats the file.
// set is false when neither names one, so the caller applies the default.
func (r reader) proxy() (en entry, set bool) {
	name := r.envName("PROXY")
	if v, ok := r.e.get(name); ok {
		return entry{rawURL: strings.TrimSpace(v), at: origin{source: "env", key: name, value: redactURL(v)}, source: "env:" + name}, true
	}
	if v, ok := r.t.str("proxy"); ok {
		return entry{rawURL: v, at: r.t.at(r.t.keyPath("proxy")), source: r.fileSource()}, true
	}
	return entry{}, false
}

// proxyAuth resolves `proxy_auth`: NORA_<FMT>_PROXY_AUTH (empty = none)
// beats the file.
func (r reader) proxyAuth() string {
	if v, ok := r.e.get(r.envName("PROXY_AUTH")); ok {
		return v
	}
	v, _ := r.t.str("proxy_auth")
	return v
}

// single is the proxy + proxy_auth shape shared by most formats. An empty
// proxy means "no upstream", except where NORA's handler falls back to its
// hard-coded default (gems, terraform, ansible, nuget, conan).
func (r reader) single() []entry {
	en, set := r.proxy()
	auth := r.proxyAuth()
	if !set || (en.rawURL == "" && r.spec.emptyIsDefault) {
		list := r.defaults()
		for i := range list {
			list[i].auth = auth
		}
		return list
	}
	if en.rawURL == "" {
		return nil
	}
	en.auth = auth
	return []entry{en}
}

// pypi: a non-empty `proxies` list (NORA_PYPI_PROXIES beating the file)
// wins; otherwise the legacy single proxy applies.
func (r reader) pypi() []entry {
	if list := r.list(r.envName("PROXIES")); len(list) > 0 {
		return list
	}
	return r.single()
}

// npm: NORA_NPM_PROXY beats the file; in the file our `proxies` list
// extension beats the single `proxy`.
func (r reader) npm() []entry {
	if _, ok := r.e.get(r.envName("PROXY")); !ok {
		if list := r.fileList("proxies"); len(list) > 0 {
			return list
		}
	}
	return r.single()
}

// named reads rpm/deb repositories: NORA_<FMT>_PROXIES=`name=url|auth,…`,
// else `[<fmt>.proxies] name = "url" | {url, auth}`. There is no default.
func (r reader) named() []entry {
	name := r.envName("PROXIES")
	if v, ok := r.e.get(name); ok {
		var out []entry
		for i, s := range splitList(v) {
			repo, rest, found := strings.Cut(s, "=")
			parts := strings.SplitN(rest, "|", 2)
			en := r.envEntry(name, i, s, parts[0], parts)
			en.name = strings.TrimSpace(repo)
			if !found || en.name == "" {
				r.e.probs.add(en.at.errorf("want name=url|auth"))
				continue
			}
			out = append(out, en)
		}
		return out
	}
	proxies := r.t.table("proxies")
	var out []entry
	for _, repo := range proxies.keys() {
		path := proxies.keyPath(repo)
		switch v := proxies.m[repo].(type) {
		case string:
			out = append(out, entry{rawURL: v, name: repo, at: proxies.at(path), source: r.fileSource()})
		case map[string]any:
			if en, ok := r.tableEntry(tbl{d: proxies.d, path: path, m: v}, path); ok {
				en.name = repo
				out = append(out, en)
			}
		default:
			proxies.errorf(path, "must be a URL or a {url, auth} table, not %s", typeName(v))
		}
	}
	return out
}

// nugetHosts returns the hosts of nuget's search and autocomplete services:
// NORA calls them for the nuget format, so they belong to its upstream.
func (r reader) nugetHosts() []string {
	var hosts []string
	for _, f := range []struct{ key, env, def string }{
		{"search_service", "NORA_NUGET_SEARCH_SERVICE", "https://azuresearch-usnc.nuget.org/query"},
		{"autocomplete", "NORA_NUGET_AUTOCOMPLETE", "https://azuresearch-usnc.nuget.org/autocomplete"},
	} {
		en := entry{rawURL: f.def, at: origin{source: "default", key: f.key}}
		if v, ok := r.t.str(f.key); ok {
			en = entry{rawURL: v, at: r.t.at(r.t.keyPath(f.key))}
		}
		if v, ok := r.e.nonEmpty(f.env); ok {
			en = entry{rawURL: v, at: origin{source: "env", key: f.env, value: redactURL(v)}}
		}
		u, _, err := normalizeURL(en.rawURL)
		if err != nil {
			r.e.probs.add(en.at.errorf("%v", err))
			continue
		}
		hosts = append(hosts, u.Hostname())
	}
	return hosts
}

// hedgeAfter resolves the format's hedge_after: seconds, fractions allowed,
// 0 for never; env NORA_<FMT>_HEDGE_AFTER beats the file.
func (r reader) hedgeAfter() time.Duration {
	d := r.spec.hedgeAfter
	if v, ok := seconds(r.t, "hedge_after"); ok {
		d = v
	}
	if v, ok := r.e.seconds(r.envName("HEDGE_AFTER")); ok {
		d = v
	}
	return d
}

// timeouts resolves proxy_timeout (and docker's read_timeout) in seconds.
func (r reader) timeouts() (proxy, read int) {
	proxy = r.spec.proxyTimeout
	if v, ok := r.t.integer("proxy_timeout", 1); ok {
		proxy = v
	}
	if v, ok := r.e.integer(r.envName("PROXY_TIMEOUT"), 1); ok {
		proxy = v
	}
	read = proxy
	if r.spec.name == "docker" {
		read = 60
		if v, ok := r.t.integer("read_timeout", 1); ok {
			read = v
		}
		if v, ok := r.e.integer("NORA_DOCKER_READ_TIMEOUT", 1); ok {
			read = v
		}
	}
	return proxy, read
}
