package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestEquivalentHosts: the well-known registries have their other names
// built in; [sidecar.equivalents] adds more by breaker key or format (the
// environment's list replacing the file's); an equivalent is one of the
// upstream's hosts, before its aliases, with a breaker of its own; a host
// written as an alias too is an equivalent.
func TestEquivalentHosts(t *testing.T) {
	file := `
[registries]
enable = "docker,maven,npm,pypi"
[[docker.upstreams]]
url = "https://registry-1.docker.io"
[maven]
proxies = ["https://repo1.maven.org/maven2", "https://nexus.corp/maven"]
[npm]
proxies = ["https://registry.npmjs.org", "https://npm.corp"]
[pypi]
proxies = ["https://pypi.org/simple"]
[sidecar.equivalents]
"npm:https://npm.corp" = ["NPM-Old.corp", "npm.corp.test:8443"]
maven = ["maven-cdn.corp"]
[sidecar.aliases]
npm = ["registry.yarnpkg.com"]
`
	cfg := mustLoad(t, file, nil, Flags{})
	want := map[string]struct{ hosts, equivalents []string }{
		"docker:https://registry-1.docker.io": {
			[]string{"registry-1.docker.io", "index.docker.io", "auth.docker.io", "production.cloudflare.docker.com"},
			[]string{"index.docker.io"}},
		"maven:https://repo1.maven.org/maven2": {
			[]string{"repo1.maven.org", "repo.maven.apache.org", "maven-cdn.corp"},
			[]string{"repo.maven.apache.org", "maven-cdn.corp"}},
		"maven:https://nexus.corp/maven": {[]string{"nexus.corp", "maven-cdn.corp"}, []string{"maven-cdn.corp"}},
		"npm:https://registry.npmjs.org": {[]string{"registry.npmjs.org", "registry.yarnpkg.com"},
			[]string{"registry.yarnpkg.com"}},
		"npm:https://npm.corp": {[]string{"npm.corp", "npm-old.corp", "npm.corp.test:8443", "registry.yarnpkg.com"},
			[]string{"npm-old.corp", "npm.corp.test:8443"}},
		"pypi:https://pypi.org/simple": {[]string{"pypi.org", "pypi.python.org", "files.pythonhosted.org"},
			[]string{"pypi.python.org"}},
	}
	for _, u := range cfg.Upstreams {
		w := want[u.Key]
		if !reflect.DeepEqual(u.Hosts, w.hosts) || !reflect.DeepEqual(u.Equivalents, w.equivalents) {
			t.Errorf("%s: hosts %q, equivalents %q; want %q, %q", u.Key, u.Hosts, u.Equivalents, w.hosts, w.equivalents)
		}
	}
	keys := map[string]bool{}
	for _, b := range cfg.HostBreakers() {
		keys[b.Key] = true
	}
	for _, k := range []string{"npm:https://registry.npmjs.org@registry.yarnpkg.com", "npm:https://npm.corp@npm.corp.test:8443",
		"docker:https://registry-1.docker.io@index.docker.io"} {
		if !keys[k] {
			t.Errorf("no breaker %s among %v", k, keys)
		}
	}

	env := mustLoad(t, file, map[string]string{"NORA_SIDECAR_EQUIVALENTS": "npm=npm-env.test|Other.test"}, Flags{})
	if got := env.Chain("npm")[1].Equivalents; !reflect.DeepEqual(got, []string{"npm-env.test", "other.test"}) {
		t.Errorf("env equivalents of the second npm upstream = %q", got)
	}
	if got := env.Chain("maven")[1].Equivalents; got != nil {
		t.Errorf("the environment's list left maven's file equivalents: %q", got)
	}
}

func TestEquivalentHostsProblems(t *testing.T) {
	if _, err := load(t, "[sidecar.equivalents]\nnpm = [\"https://registry.yarnpkg.com/\"]\n", nil, Flags{}); err == nil ||
		!strings.Contains(err.Error(), `config.toml:2: sidecar.equivalents.npm: equivalent host "https://registry.yarnpkg.com/" must be a host name`) {
		t.Errorf("err = %v", err)
	}
	if _, err := load(t, "", map[string]string{"NORA_SIDECAR_EQUIVALENTS": "registry.yarnpkg.com"}, Flags{}); err == nil ||
		!strings.Contains(err.Error(), "NORA_SIDECAR_EQUIVALENTS") {
		t.Errorf("env without key=: err = %v", err)
	}
	cfg := mustLoad(t, "[sidecar.equivalents]\n\"npm:https://typo.test\" = [\"x.test\"]\n", nil, Flags{})
	if !hasWarning(cfg, `sidecar.equivalents "npm:https://typo.test" names no configured upstream key or format`) {
		t.Errorf("warnings = %q", cfg.Warnings)
	}
}
