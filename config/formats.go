package config

import (
	"strings"
	"time"
)

// shape is how a format writes its upstreams in NORA's config.
type shape int

const (
	shapeDocker shape = iota // [[docker.upstreams]] url/auth/prefix/namespace
	shapeList                // proxies = ["url", {url, auth}]
	shapePypi                // proxies list, else proxy + proxy_auth
	shapeNpm                 // proxy + proxy_auth, or proxies (our extension)
	shapeSingle              // proxy + proxy_auth
	shapeNamed               // [rpm.proxies] name = "url" | {url, auth}
)

// formatSpec is what NORA hard-codes about one format.
type formatSpec struct {
	name       string // format name and single breaker key
	table      string // TOML table ("pub_dart" for pub)
	env        string // env prefix: NORA_<env>_PROXY, NORA_<env>_ENABLED…
	defaultOn  bool
	defaultURL string // "" = no default upstream (rpm, deb)
	shape      shape
	// emptyIsDefault: an empty proxy falls back to the default URL instead of
	// meaning "no upstream", because those NORA handlers hard-code it.
	emptyIsDefault bool
	proxyTimeout   int // default seconds
	// hedgeAfter is the default hedge_after: on for the formats whose
	// chains are mirrors of one another (another upstream's 404 is final
	// there), off for the rest, where a candidate may be another index
	// whose package of the same name is somebody else's and hedging would
	// ask it whenever the addressed index is merely slow.
	hedgeAfter time.Duration
}

// formatSpecs returns NORA's facts per format, in formatOrder. It is a
// function rather than a package variable so nothing can mutate it.
func formatSpecs() []formatSpec {
	return []formatSpec{
		{"docker", "docker", "DOCKER", true, "https://registry-1.docker.io", shapeDocker, false, 300, time.Second},
		{"maven", "maven", "MAVEN", true, "https://repo1.maven.org/maven2", shapeList, false, 30, time.Second},
		{"npm", "npm", "NPM", true, "https://registry.npmjs.org", shapeNpm, false, 30, 0},
		{"pypi", "pypi", "PYPI", true, "https://pypi.org/simple/", shapePypi, false, 30, 0},
		{"cargo", "cargo", "CARGO", true, "https://crates.io", shapeSingle, false, 30, 0},
		{"go", "go", "GO", true, "https://proxy.golang.org", shapeSingle, false, 30, 0},
		{"gems", "gems", "GEMS", false, "https://rubygems.org", shapeSingle, true, 30, 0},
		{"terraform", "terraform", "TF", false, "https://registry.terraform.io", shapeSingle, true, 30, 0},
		{"ansible", "ansible", "ANSIBLE", false, "https://galaxy.ansible.com", shapeSingle, true, 30, 0},
		{"nuget", "nuget", "NUGET", false, "https://api.nuget.org", shapeSingle, true, 30, 0},
		{"pub", "pub_dart", "PUB", false, "https://pub.dev", shapeSingle, false, 30, 0},
		{"conan", "conan", "CONAN", false, "https://center2.conan.io", shapeSingle, true, 30, 0},
		{"rpm", "rpm", "RPM", false, "", shapeNamed, false, 30, 0},
		{"deb", "deb", "DEB", false, "", shapeNamed, false, 30, 0},
	}
}

// enabledFormats decides which formats are on, in NORA's order of tiers:
// NORA_REGISTRIES_ENABLE, then [registries] enable, then each format's own
// `enabled` (NORA_<FMT>_ENABLED beating the file).
func enabledFormats(root tbl, e env) map[string]bool {
	if v, ok := e.nonEmpty("NORA_REGISTRIES_ENABLE"); ok {
		set, bad := parseEnable(strings.Split(v, ","))
		if bad != "" {
			e.probs.envf("NORA_REGISTRIES_ENABLE", v, "unknown format %q", bad)
		}
		return set
	}
	reg := root.table("registries")
	if tokens, ok := enableTokens(reg); ok {
		set, bad := parseEnable(tokens)
		if bad != "" {
			reg.errorf(reg.keyPath("enable"), "unknown format %q", bad)
		}
		return set
	}
	set := map[string]bool{}
	for _, spec := range formatSpecs() {
		on := spec.defaultOn
		if v, ok := root.table(spec.table).boolean("enabled"); ok {
			on = v
		}
		if v, ok := e.boolean("NORA_" + spec.env + "_ENABLED"); ok {
			on = v
		}
		set[spec.name] = on
	}
	return set
}

// enableTokens reads [registries] enable, which NORA accepts both as one
// comma-separated string ("all,-maven") and as a list of names.
func enableTokens(reg tbl) ([]string, bool) {
	v, ok := reg.m["enable"]
	if !ok {
		return nil, false
	}
	if s, ok := v.(string); ok {
		return strings.Split(s, ","), true
	}
	return reg.strList("enable")
}

// parseEnable turns tokens such as ["all", "-maven"] into a set. "all" adds
// every format and "-x" removes one; a list made only of removals starts from
// all. "raw" is accepted and ignored: it has no upstream. The first unknown
// name is returned so the caller can report it.
func parseEnable(tokens []string) (map[string]bool, string) {
	set := map[string]bool{}
	var cleaned []string
	onlyRemovals := true
	for _, tok := range tokens {
		tok = strings.ToLower(strings.TrimSpace(tok))
		if tok == "" {
			continue
		}
		cleaned = append(cleaned, tok)
		if !strings.HasPrefix(tok, "-") {
			onlyRemovals = false
		}
	}
	if onlyRemovals && len(cleaned) > 0 {
		cleaned = append([]string{"all"}, cleaned...)
	}
	bad := ""
	for _, tok := range cleaned {
		name, remove := strings.CutPrefix(tok, "-")
		switch {
		case name == "all":
			for _, f := range formatOrder {
				set[f] = !remove
			}
		case name == "raw":
		case name == "pub_dart":
			set["pub"] = !remove
		case isFormat(name):
			set[name] = !remove
		case bad == "":
			bad = name
		}
	}
	return set, bad
}

func isFormat(name string) bool {
	for _, f := range formatOrder {
		if f == name {
			return true
		}
	}
	return false
}
