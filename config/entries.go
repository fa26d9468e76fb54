package config

import (
	"strconv"
	"strings"
)

// entry is one upstream as the operator wrote it, before normalisation.
type entry struct {
	rawURL, auth      string
	prefix, namespace string   // docker only
	serves            []string // docker only: the registries it serves
	servesAt          origin   // where serves was written
	name              string   // rpm/deb repository name
	at                origin   // where the URL was written, for problems
	source            string   // Upstream.Source
}

// reader gathers one format's entries from env (which wins) or the file.
type reader struct {
	spec     formatSpec
	t        tbl // the format's table; zero when absent
	e        env
	filePath string
	warn     func(string)
}

func (r reader) fileSource() string { return "file:" + r.filePath }

func (r reader) envName(suffix string) string { return "NORA_" + r.spec.env + "_" + suffix }

// defaults is the format's default upstream, or none (rpm/deb).
func (r reader) defaults() []entry {
	if r.spec.defaultURL == "" {
		return nil
	}
	return []entry{{rawURL: r.spec.defaultURL, at: origin{source: "default", key: r.spec.name}, source: "default"}}
}

// entries returns the format's upstreams in config order.
func (r reader) entries() []entry {
	var list []entry
	switch r.spec.shape {
	case shapeDocker:
		list = r.docker()
	case shapeList:
		list = r.list(r.envName("PROXIES"))
	case shapePypi:
		return r.pypi()
	case shapeNpm:
		return r.npm()
	case shapeSingle:
		return r.single()
	case shapeNamed:
		return r.named()
	}
	if len(list) == 0 {
		return r.defaults()
	}
	return list
}

func (r reader) docker() []entry {
	name := "NORA_DOCKER_PROXIES"
	v, ok := r.e.get(name)
	if !ok {
		if v, ok = r.e.get("NORA_DOCKER_UPSTREAMS"); ok {
			name = "NORA_DOCKER_UPSTREAMS"
			r.warn("NORA_DOCKER_UPSTREAMS is deprecated; use NORA_DOCKER_PROXIES")
		}
	}
	if ok {
		var out []entry
		for i, s := range splitList(v) {
			parts := strings.SplitN(s, "|", 3)
			en := r.envEntry(name, i, s, parts[0], parts)
			if len(parts) > 2 {
				en.prefix = strings.TrimSpace(parts[2])
			}
			out = append(out, en)
		}
		return out
	}
	var out []entry
	for i, el := range r.tables("upstreams") {
		en, ok := r.tableEntry(el, r.t.keyPath("upstreams")+"["+strconv.Itoa(i)+"]")
		if !ok {
			continue
		}
		en.prefix, _ = el.str("prefix")
		en.namespace, _ = el.str("namespace")
		if serves, ok := el.strList("serves"); ok {
			en.serves, en.servesAt = serves, el.at(el.keyPath("serves"))
		}
		out = append(out, en)
	}
	return out
}

// envEntry builds an entry from one `url|auth…` item of a list variable.
func (r reader) envEntry(name string, i int, item, rawURL string, parts []string) entry {
	en := entry{
		rawURL: strings.TrimSpace(rawURL),
		at:     origin{source: "env", key: name + "[" + strconv.Itoa(i) + "]", value: redactEntry(item)},
		source: "env:" + name,
	}
	if len(parts) > 1 {
		en.auth = strings.TrimSpace(parts[1])
	}
	return en
}

// list reads a maven-shaped list: env `url|auth,url2`, else file
// `proxies = ["url", {url, auth}]`.
func (r reader) list(envName string) []entry {
	if v, ok := r.e.get(envName); ok {
		var out []entry
		for i, s := range splitList(v) {
			parts := strings.SplitN(s, "|", 2)
			out = append(out, r.envEntry(envName, i, s, parts[0], parts))
		}
		return out
	}
	return r.fileList("proxies")
}

// fileList reads key as a list whose items are URL strings or {url, auth}.
func (r reader) fileList(key string) []entry {
	v, ok := r.t.m[key]
	if !ok {
		return nil
	}
	items, ok := v.([]any)
	if !ok {
		r.t.errorf(r.t.keyPath(key), "must be a list of URLs or {url, auth} tables, not %s", typeName(v))
		return nil
	}
	var out []entry
	for i, item := range items {
		path := r.t.keyPath(key) + "[" + strconv.Itoa(i) + "]"
		switch item := item.(type) {
		case string:
			out = append(out, entry{rawURL: item, at: r.t.at(path), source: r.fileSource()})
		case map[string]any:
			if en, ok := r.tableEntry(tbl{d: r.t.d, path: path, m: item}, path); ok {
				out = append(out, en)
			}
		default:
			r.t.errorf(path, "must be a URL or a {url, auth} table, not %s", typeName(item))
		}
	}
	return out
}

// tables reads key as an array of tables ([[docker.upstreams]]).
func (r reader) tables(key string) []tbl {
	v, ok := r.t.m[key]
	if !ok {
		return nil
	}
	var items []any
	switch v := v.(type) {
	case []any:
		items = v
	case []map[string]any:
		for _, m := range v {
			items = append(items, m)
		}
	default:
		r.t.errorf(r.t.keyPath(key), "must be an array of tables, not %s", typeName(v))
		return nil
	}
	out := make([]tbl, 0, len(items))
	for i, item := range items {
		path := r.t.keyPath(key) + "[" + strconv.Itoa(i) + "]"
		m, ok := item.(map[string]any)
		if !ok {
			r.t.errorf(path, "must be a table, not %s", typeName(item))
			continue
		}
		out = append(out, tbl{d: r.t.d, path: path, m: m})
	}
	return out
}

// tableEntry reads {url, auth} from a table; url is required.
func (r reader) tableEntry(t tbl, path string) (entry, bool) {
	u, ok := t.str("url")
	if !ok {
		if _, present := t.m["url"]; !present {
			t.errorf(path, "missing url")
		}
		return entry{}, false
	}
	auth, _ := t.str("auth")
	return entry{rawURL: u, auth: auth, at: t.at(t.keyPath("url")), source: r.fileSource()}, true
}
