package route

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

const equivalentTOML = `
[registries]
enable = ["docker", "maven", "npm", "pypi"]
[[docker.upstreams]]
url = "https://registry-1.docker.io"
[[docker.upstreams]]
url = "https://mirror.gcr.io"
[maven]
proxies = ["https://repo1.maven.org/maven2", "https://nexus.corp/maven"]
[npm]
proxies = ["https://registry.npmjs.org", "https://npm-mirror.test"]
[pypi]
proxies = ["https://pypi.org/simple", "https://pypi.python.org/simple", "https://mirror.test/simple"]
[sidecar.equivalents]
"npm:https://npm-mirror.test" = ["npm-old.test:8443"]
`

// TestClassifyEquivalents: a request to an equivalent host is the
// upstream's own, under its base path and with its own breaker key; it
// fails over to the upstream at its URL first, then the upstream's
// candidates. Outside the base path it is the host's alias request, and a
// path that climbs out is refused. A configured upstream's own URL is
// never taken by an equivalent of another.
func TestClassifyEquivalents(t *testing.T) {
	cfg := testkit.LoadConfig(t, equivalentTOML, nil)
	tab := NewTable(cfg.Upstreams)
	const (
		npmjs  = "npm:https://registry.npmjs.org"
		npmMir = "npm:https://npm-mirror.test"
		hub    = "docker:https://registry-1.docker.io"
		mirror = "docker:https://mirror.gcr.io"
		m2     = "maven:https://repo1.maven.org/maven2"
		nexus  = "maven:https://nexus.corp/maven"
	)
	tests := []struct {
		name, url, upstream, key, rel string
		equivalent, alias, climbs     bool
		candidates                    []string
	}{
		{name: "yarn's registry is npm's", url: "https://registry.yarnpkg.com/left-pad",
			upstream: npmjs, key: npmjs + "@registry.yarnpkg.com", rel: "/left-pad", equivalent: true,
			candidates: []string{npmjs, npmMir}},
		{name: "any spelling of it", url: "https://Registry.YarnPkg.com./@scope%2fpkg",
			upstream: npmjs, key: npmjs + "@registry.yarnpkg.com", rel: "/@scope%2fpkg", equivalent: true,
			candidates: []string{npmjs, npmMir}},
		{name: "the URL host keeps its own route", url: "https://registry.npmjs.org/left-pad",
			upstream: npmjs, key: npmjs, rel: "/left-pad", candidates: []string{npmMir}},
		{name: "Docker Hub's index name", url: "https://index.docker.io/v2/library/alpine/manifests/3",
			upstream: hub, key: hub + "@index.docker.io", rel: "/v2/library/alpine/manifests/3", equivalent: true,
			candidates: []string{hub, mirror}},
		{name: "under the base path of Maven Central", url: "https://repo.maven.apache.org/maven2/org/x/1/x-1.jar",
			upstream: m2, key: m2 + "@repo.maven.apache.org", rel: "/org/x/1/x-1.jar", equivalent: true,
			candidates: []string{m2, nexus}},
		{name: "outside the base path: the host's alias request", url: "https://repo.maven.apache.org/other/x",
			upstream: m2, key: m2 + "@repo.maven.apache.org", alias: true},
		{name: "climbing out of the base path", url: "https://repo.maven.apache.org/maven2/../../etc/passwd",
			upstream: m2, key: m2 + "@repo.maven.apache.org", equivalent: true, climbs: true},
		{name: "a configured upstream's URL is its own", url: "https://pypi.python.org/simple/x/",
			upstream: "pypi:https://pypi.python.org/simple", key: "pypi:https://pypi.python.org/simple", rel: "/x/",
			candidates: []string{"pypi:https://mirror.test/simple"}},
		{name: "configured equivalent with a port", url: "https://npm-old.test:8443/left-pad",
			upstream: npmMir, key: npmMir + "@npm-old.test:8443", rel: "/left-pad", equivalent: true,
			candidates: []string{npmMir}},
		{name: "its host on another port is nobody's", url: "https://npm-old.test/left-pad"},
		{name: "nor over another scheme", url: "http://registry.yarnpkg.com:443/left-pad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			m := tab.Classify(u)
			if keyOf(m.Upstream) != tc.upstream && !(tc.upstream == "" && m.Upstream == nil) {
				t.Fatalf("upstream %s, want %q", keyOf(m.Upstream), tc.upstream)
			}
			if tc.upstream == "" {
				return
			}
			var cands []string
			for _, c := range m.Candidates {
				cands = append(cands, c.Key)
			}
			if m.Key != tc.key || m.Equivalent != tc.equivalent || m.Alias != tc.alias || m.ClimbsOut != tc.climbs ||
				(!tc.alias && !tc.climbs && m.Rel != tc.rel) || !slices.Equal(cands, tc.candidates) {
				t.Fatalf("got key %s equivalent %v alias %v climbs %v rel %q candidates %q; want %s %v %v %v %q %q",
					m.Key, m.Equivalent, m.Alias, m.ClimbsOut, m.Rel, cands,
					tc.key, tc.equivalent, tc.alias, tc.climbs, tc.rel, tc.candidates)
			}
		})
	}
}

// TestEquivalentHostsAreTheUpstreams: a CONNECT to an equivalent host is
// the upstream's (so it is intercepted, under the host's own breaker), and
// the host is one the table names (so deny_unlisted lets it through).
func TestEquivalentHostsAreTheUpstreams(t *testing.T) {
	tab := NewTable(testkit.LoadConfig(t, equivalentTOML, nil).Upstreams)
	for host, key := range map[string]string{
		"registry.yarnpkg.com":  "npm:https://registry.npmjs.org@registry.yarnpkg.com",
		"index.docker.io":       "docker:https://registry-1.docker.io@index.docker.io",
		"repo.maven.apache.org": "maven:https://repo1.maven.org/maven2@repo.maven.apache.org",
	} {
		if rt := tab.HostUpstream(host, "443"); !rt.Classified() || rt.Key != key {
			t.Errorf("CONNECT %s:443: %+v, want key %s", host, rt, key)
		}
		if !slices.Contains(tab.HostPorts(), host+":443") {
			t.Errorf("HostPorts lacks %s:443: %s", host, strings.Join(tab.HostPorts(), " "))
		}
	}
}

// TestURLHostBeatsAnotherUpstreamsEquivalent: pypi.python.org is pypi.org's
// built-in equivalent, but configured as an index of its own it is that
// index's, by URL and by host.
func TestURLHostBeatsAnotherUpstreamsEquivalent(t *testing.T) {
	tab := NewTable(testkit.LoadConfig(t, equivalentTOML, nil).Upstreams)
	if rt := tab.HostUpstream("pypi.python.org", "443"); rt.Key != "pypi:https://pypi.python.org/simple" {
		t.Errorf("CONNECT pypi.python.org: key %q, want its own upstream's", rt.Key)
	}
	u, _ := url.Parse("https://pypi.python.org/elsewhere")
	if rt := tab.Classify(u); rt.Key != "pypi:https://pypi.python.org/simple" || !rt.Alias {
		t.Errorf("outside its base path: %+v, want its own upstream's alias request", rt)
	}
}
