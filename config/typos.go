package config

import (
	"fmt"
	"slices"
	"strings"
)

// typoWarnings names every key, in the NORA tables this proxy reads, that
// neither NORA nor the proxy knows. NORA ignores unknown keys, so a typo
// such as failure_treshold silently leaves the default in force in both
// processes; it is a warning rather than an error because the file is
// NORA's and NORA accepts it. [sidecar] is the proxy's own table and
// refuses unknown keys outright (readSidecar). Load calls this only once
// the file decoded without problems, so every value has the type its
// reader expects.
func typoWarnings(root tbl) []string {
	if !root.present() {
		return nil
	}
	var out []string
	check := func(t tbl, known []string) {
		for _, k := range t.keys() {
			if !slices.Contains(known, k) {
				out = append(out, unknownKeyWarning(t, k, known))
			}
		}
	}
	if cb, ok := subTable(root, "circuit_breaker"); ok {
		check(cb, []string{"enabled", "failure_threshold", "reset_timeout", "reset_timeout_max", "jitter",
			"suspect_after", "overrides"})
		if ov, ok := subTable(cb, "overrides"); ok {
			for _, key := range ov.keys() {
				if o, ok := subTable(ov, key); ok {
					check(o, []string{"failure_threshold", "reset_timeout", "reset_timeout_max", "suspect_after",
						"hedge_after"})
				}
			}
		}
	}
	if reg, ok := subTable(root, "registries"); ok {
		check(reg, []string{"enable"})
	}
	for _, spec := range formatSpecs() {
		t, ok := subTable(root, spec.table)
		if !ok {
			continue
		}
		check(t, formatKeys(spec))
		for _, entry := range upstreamEntries(t, spec) {
			known := []string{"url", "auth"}
			if spec.shape == shapeDocker {
				known = append(known, "prefix", "namespace", "serves")
			}
			check(entry, known)
		}
	}
	return out
}

// FormatTableKeys maps the TOML table of every format ("pub_dart" for pub)
// to the keys known in it, as the typo warnings check them; the Helm
// chart's schema accepts the same keys in its upstreams values.
func FormatTableKeys() map[string][]string {
	out := map[string][]string{}
	for _, spec := range formatSpecs() {
		out[spec.table] = formatKeys(spec)
	}
	return out
}

// formatKeys lists the keys NORA 1.1.0 reads from a format's table: the
// upstream and timeout keys this proxy reads too (docs/behaviour.md §2.1),
// npm's `proxies` and every format's `hedge_after` (this proxy's
// extensions) and NORA's cache settings, which the proxy leaves to NORA.
func formatKeys(spec formatSpec) []string {
	keys := []string{"enabled", "proxy_timeout", "hedge_after", "metadata_ttl"}
	switch spec.shape {
	case shapeDocker:
		keys = append(keys, "upstreams", "default_action", "read_timeout")
	case shapeList, shapeNamed:
		keys = append(keys, "proxies")
	case shapePypi, shapeNpm:
		keys = append(keys, "proxies", "proxy", "proxy_auth")
	case shapeSingle:
		keys = append(keys, "proxy", "proxy_auth")
	}
	switch spec.name {
	case "docker", "npm", "gems", "terraform", "ansible", "nuget", "pub", "conan":
		keys = append(keys, "serve_stale")
	}
	switch spec.name {
	case "npm", "gems", "ansible", "nuget", "pub", "conan":
		keys = append(keys, "revalidate")
	}
	switch spec.name {
	case "go":
		keys = append(keys, "proxy_timeout_zip")
	case "terraform", "conan":
		keys = append(keys, "proxy_timeout_dl")
	case "nuget":
		keys = append(keys, "search_service", "autocomplete", "metadata_proxy_timeout")
	}
	return keys
}

// upstreamEntries returns the {url, auth} tables of a format's upstream
// list ([[docker.upstreams]], proxies = [{…}], [rpm.proxies] name = {…}),
// at the key paths the line index knows them by.
func upstreamEntries(t tbl, spec formatSpec) []tbl {
	var out []tbl
	switch spec.shape {
	case shapeNamed:
		proxies, ok := subTable(t, "proxies")
		if !ok {
			return nil
		}
		for _, name := range proxies.keys() {
			if e, ok := subTable(proxies, name); ok {
				out = append(out, e)
			}
		}
		return out
	case shapeDocker:
		return listTables(t, "upstreams")
	}
	return listTables(t, "proxies")
}

// listTables returns the tables in the list under key; strings and other
// items are skipped (the readers check them).
func listTables(t tbl, key string) []tbl {
	var items []map[string]any
	switch v := t.m[key].(type) {
	case []map[string]any:
		items = v
	case []any:
		for _, it := range v {
			m, _ := it.(map[string]any)
			items = append(items, m)
		}
	}
	var out []tbl
	for i, m := range items {
		if m != nil {
			out = append(out, tbl{d: t.d, path: fmt.Sprintf("%s[%d]", t.keyPath(key), i), m: m})
		}
	}
	return out
}

// subTable is tbl.table without its type complaint, which the readers have
// already made.
func subTable(t tbl, key string) (tbl, bool) {
	m, ok := t.m[key].(map[string]any)
	if !ok {
		return tbl{}, false
	}
	return tbl{d: t.d, path: t.keyPath(key), m: m}, true
}

// unknownKeyWarning renders one unknown key where it was written, with the
// known key it most likely misspells.
func unknownKeyWarning(t tbl, key string, known []string) string {
	hint := "known keys: " + strings.Join(known, ", ")
	if near := nearestKey(key, known); near != "" {
		hint = "did you mean " + near + "?"
	}
	o := t.at(t.keyPath(key))
	return o.errorf("unknown key, ignored by NORA and nora-breaker (%s)", hint).Error()
}

// unknownKeyHint is the suggestion appended to an unknown-key error, or "".
func unknownKeyHint(key string, known []string) string {
	if near := nearestKey(key, known); near != "" {
		return "; did you mean " + near + "?"
	}
	return ""
}

// nearestKey returns the known key closest to key, if it is close enough to
// be a typo of it: at most one edit per four letters, and at least one.
func nearestKey(key string, known []string) string {
	key = strings.ToLower(key)
	best, bestDist := "", 2+len(key)/4
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of two neighbouring letters (auht for
// auth) each cost one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
