package route

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// classifyTOML exercises every rule of docs/behaviour.md §3: nested paths on one host,
// default and explicit ports, built-in and configured aliases, an alias host
// claimed by two upstreams, and a bound docker upstream.
const classifyTOML = `
[registries]
enable = ["docker","maven","pypi","npm","cargo"]
[[docker.upstreams]]
url = "https://registry-1.docker.io"
[[docker.upstreams]]
url = "https://mirror.gcr.io"
[[docker.upstreams]]
url = "https://ghcr.io"
prefix = "ghcr"
[maven]
proxies = ["https://Repo.Example.com/maven2/", "https://repo.example.com:443/maven2/sub", "http://other.example:8080/m2"]
[pypi]
proxies = ["https://pypi.org/simple/", "https://download.pytorch.org/whl/cu124"]
[npm]
proxy = "https://registry.npmjs.org"
[cargo]
proxy = "https://crates.io"
[sidecar.aliases]
"pypi:https://download.pytorch.org/whl/cu124" = ["mirror.example.org"]
maven = ["Mirror.Example.org"]
`

func classifyTable(t testing.TB) (*Table, *config.Config) {
	t.Helper()
	cfg := testkit.LoadConfig(t, classifyTOML, nil)
	return NewTable(cfg.Upstreams), cfg
}

func TestClassify(t *testing.T) {
	tab, _ := classifyTable(t)
	const (
		m2    = "maven:https://repo.example.com/maven2"
		m2sub = "maven:https://repo.example.com/maven2/sub"
		m2oth = "maven:http://other.example:8080/m2"
		pypi  = "pypi:https://pypi.org/simple"
		torch = "pypi:https://download.pytorch.org/whl/cu124"
		hub   = "docker:https://registry-1.docker.io"
	)
	tests := []struct {
		name, url string
		key       string // "" = unclassified
		alias     bool
		rel       string
	}{
		{"longest prefix wins", "https://repo.example.com/maven2/sub/g/a/1/a.jar", m2sub, false, "/g/a/1/a.jar"},
		{"shorter prefix for siblings", "https://repo.example.com/maven2/subx/a.jar", m2, false, "/subx/a.jar"},
		{"exact URL", "https://repo.example.com/maven2", m2, false, ""},
		{"exact URL with slash", "https://repo.example.com/maven2/sub/", m2sub, false, "/"},
		{"no match inside a segment", "https://repo.example.com/maven2x/a.jar", m2, true, ""},
		{"host case-insensitive", "https://REPO.example.COM/maven2/a.jar", m2, false, "/a.jar"},
		{"default https port normalised", "https://repo.example.com:443/maven2/a.jar", m2, false, "/a.jar"},
		{"default http port normalised", "http://other.example:8080/m2/", m2oth, false, "/"},
		// Another port of an upstream's host is not that upstream's: http://
		// is port 80, the upstream's https:// port 443.
		{"another port of the host", "http://registry-1.docker.io:80/v2/", "", false, ""},
		{"scheme (so port) must match", "http://repo.example.com/maven2/a.jar", "", false, ""},
		{"explicit port must match", "http://other.example:8080/m2/x.pom", m2oth, false, "/x.pom"},
		{"the host on its default port is not the upstream on 8080", "http://other.example/m2/x.pom", "", false, ""},
		{"same host and port outside the path", "http://other.example:8080/elsewhere", m2oth, true, ""},
		{"root upstream", "https://registry-1.docker.io/v2/library/alpine/manifests/3", hub, false,
			"/v2/library/alpine/manifests/3"},
		{"built-in alias", "https://files.pythonhosted.org/packages/a/b/c.whl", pypi, true, ""},
		{"built-in docker alias", "https://auth.docker.io/token?scope=x", hub, true, ""},
		{"configured alias, first in config order wins", "https://mirror.example.org/x", m2, true, ""},
		{"path-prefixed pypi", "https://download.pytorch.org/whl/cu124/torch/", torch, false, "/torch/"},
		{"escaped path kept", "https://pypi.org/simple/a%2Fb/", pypi, false, "/a%2Fb/"},
		{"dot segments resolved inside the base", "https://repo.example.com/maven2/sub/../g/./a.jar", m2, false, "/g/a.jar"},
		{"encoded dot segments resolved", "https://repo.example.com/maven2/x/%2e%2E/a.jar", m2, false, "/a.jar"},
		{"unclassified", "https://example.net/x", "", false, ""},
		// Host spellings (docs/behaviour.md §3): a trailing dot and any case
		// name the same host.
		{"trailing dot", "https://registry-1.docker.io./v2/x/manifests/1", hub, false, "/v2/x/manifests/1"},
		{"trailing dot and case on an alias host", "https://FILES.pythonhosted.org./p/x.whl", pypi, true, ""},
		// A request whose scheme is not the upstream's is not the
		// upstream's, though host and port match: http:// to port 443.
		{"http to an https upstream's port", "http://registry-1.docker.io:443/v2/", "", false, ""},
		{"http to an https alias host's port", "http://files.pythonhosted.org:443/p/x.whl", "", false, ""},
		{"https to an http upstream's port", "https://other.example:8080/m2/x.pom", "", false, ""},
		{"unclassified IP", "http://127.0.0.1:9/x", "", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			m := tab.Classify(u)
			if tc.key == "" {
				if m.Classified() {
					t.Fatalf("want unclassified, got %s", m.Upstream.Key)
				}
				return
			}
			if !m.Classified() || m.Upstream.Key != tc.key || m.Alias != tc.alias {
				t.Fatalf("got %+v (key %v), want key %s alias %v", m, keyOf(m.Upstream), tc.key, tc.alias)
			}
			if !tc.alias && m.Rel != tc.rel {
				t.Fatalf("Rel = %q, want %q", m.Rel, tc.rel)
			}
		})
	}
}

func keyOf(u *config.Upstream) string {
	if u == nil {
		return "<nil>"
	}
	return u.Key
}

func TestHostUpstream(t *testing.T) {
	tab, _ := classifyTable(t)
	tests := []struct{ host, key string }{
		{"repo.example.com", "maven:https://repo.example.com/maven2"},
		{"REPO.EXAMPLE.COM", "maven:https://repo.example.com/maven2"},
		{"files.pythonhosted.org", "pypi:https://pypi.org/simple"},
		{"index.crates.io", "cargo"},
		{"mirror.example.org", "maven:https://repo.example.com/maven2"},
		{"pkg-containers.githubusercontent.com", "docker:https://ghcr.io"},
		{"example.net", ""},
		{"Registry.NPMjs.org.", "npm:https://registry.npmjs.org"},
	}
	for _, tc := range tests {
		if got := keyOf(tab.HostUpstream(tc.host, "443").Upstream); (tc.key == "" && got != "<nil>") || (tc.key != "" && got != tc.key) {
			t.Errorf("HostUpstream(%q) = %s, want %q", tc.host, got, tc.key)
		}
	}
}

func TestCandidates(t *testing.T) {
	tab, _ := classifyTable(t)
	tests := []struct {
		url  string
		want []string
	}{
		{"https://registry-1.docker.io/v2/x/manifests/1", []string{"docker:https://mirror.gcr.io"}},
		{"https://mirror.gcr.io/v2/x/manifests/1", nil}, // ghcr is bound: never a candidate
		{"https://ghcr.io/v2/x/manifests/1", nil},       // bound: no candidates
		{"https://auth.docker.io/token", nil},           // alias request
		{"https://repo.example.com/maven2/a.jar", []string{"maven:https://repo.example.com/maven2/sub", "maven:http://other.example:8080/m2"}},
		{"https://repo.example.com/maven2/sub/a.jar", []string{"maven:http://other.example:8080/m2"}},
		{"https://pypi.org/simple/x/", []string{"pypi:https://download.pytorch.org/whl/cu124"}},
		{"https://registry.npmjs.org/left-pad", nil}, // single upstream
		{"https://example.net/", nil},
	}
	for _, tc := range tests {
		u, _ := url.Parse(tc.url)
		var got []string
		for _, c := range tab.Classify(u).Candidates {
			got = append(got, c.Key)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("Candidates(%s) = %v, want %v", tc.url, got, tc.want)
		}
	}
}

// FuzzClassify feeds arbitrary request URLs to the classifier: it must never
// panic, and a prefix match's Rel appended to the upstream's path must give
// back the request's path.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"https://repo.example.com/maven2/sub/g/a.jar", "https://repo.example.com:443/maven2",
		"http://other.example:8080/m2/", "https://pypi.org/simple/a%2Fb/", "https://[::1]:443/x",
		"https://files.pythonhosted.org/p", "https://REGISTRY-1.docker.io/v2/", "//x", "http://a:b@c/d?e#f",
		"https://repo.example.com/maven2%2F/x", "https://repo.example.com:0443/maven2/x",
		"https://repo.example.com/maven2/../../admin", "https://repo.example.com/maven2/%2e%2e/%2E%2e/x",
		"https://repo.example.com/maven2/..%2f..%2fadmin", "https://repo.example.com/maven2/a/./b/../c",
		"https://index.docker.io/v2/x/manifests/1", "https://Registry.Yarnpkg.com./left-pad", "https://pypi.python.org/simple/../x",
	} {
		f.Add(s)
	}
	tab, _ := classifyTable(f)
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		m := tab.Classify(u)
		_ = tab.HostUpstream(u.Hostname(), u.Port())
		if !m.Classified() || m.Alias || m.ClimbsOut {
			return
		}
		base := strings.TrimSuffix(m.Upstream.URL.EscapedPath(), "/")
		resolved, _ := resolveDots(u.EscapedPath(), false)
		if got := base + m.Rel; got != resolved {
			t.Fatalf("%q: upstream path %q + Rel %q = %q, want %q", raw, base, m.Rel, got, resolved)
		}
		if strict, _ := resolveDots(m.Rel, false); strict != m.Rel {
			t.Fatalf("%q: Rel %q still holds dot segments", raw, m.Rel)
		}
		if loose, climbed := resolveDots(base+m.Rel, true); climbed || !strings.HasPrefix(loose+"/", base+"/") {
			t.Fatalf("%q: Rel %q climbs out of %q when encoded slashes are decoded", raw, m.Rel, base)
		}
		if h := hostport.Host(u.Hostname()); h != m.Upstream.URL.Hostname() && !(m.Equivalent && slices.Contains(m.Upstream.Equivalents, h)) {
			t.Fatalf("%q matched by prefix on another host %s, which is no equivalent of it", raw, m.Upstream.URL.Host)
		}
	})
}

// TestClassifyPathsThatClimbOut: a path addressed below an upstream's base
// whose dot segments, plain or percent-encoded, climb above it.
func TestClassifyPathsThatClimbOut(t *testing.T) {
	tab, _ := classifyTable(t)
	for _, raw := range []string{
		"https://repo.example.com/maven2/../../admin/secret",
		"https://repo.example.com/maven2/%2e%2e/%2e%2e/admin/secret",
		"https://repo.example.com/maven2/%2E%2e/admin",
		"https://repo.example.com/maven2/..%2f..%2fadmin",
		"https://repo.example.com/maven2/..%2F..%2Fadmin",
		"https://repo.example.com/maven2/..%5c..%5cadmin",
		"https://repo.example.com/maven2/sub/../../x",
		"https://registry-1.docker.io/../etc",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if m := tab.Classify(u); !m.ClimbsOut {
			t.Errorf("%s: %+v, want refused as climbing out", raw, m)
		}
	}
}

func TestResolveDots(t *testing.T) {
	tests := []struct {
		in, want string
		loose    bool
		climbed  bool
	}{
		{"/a/b/c", "/a/b/c", false, false},
		{"/a/./b", "/a/b", false, false},
		{"/a/b/..", "/a/", false, false},
		{"/a/b/../c", "/a/c", false, false},
		{"/a/%2e%2e/c", "/c", false, false},
		{"/a/.%2E/c", "/c", false, false},
		{"/a..b/c", "/a..b/c", false, false},
		{"/...", "/...", false, false},
		{"/../a", "/a", false, true},
		{"/a/..%2fb", "/a/..%2fb", false, false},
		{"/a/..%2fb", "/b", true, false},
		{"/a/..%2f..%2fb", "/b", true, true},
		{"/a\\..\\b", "/b", true, false},
	}
	for _, tc := range tests {
		got, climbed := resolveDots(tc.in, tc.loose)
		if got != tc.want || climbed != tc.climbed {
			t.Errorf("resolveDots(%q, loose=%v) = %q, %v; want %q, %v", tc.in, tc.loose, got, climbed, tc.want, tc.climbed)
		}
	}
}

// FuzzResolveDotsShortcut: the shortcut resolveDots takes for a path with
// nothing to resolve gives what the full resolution gives, in both modes.
func FuzzResolveDotsShortcut(f *testing.F) {
	for _, s := range []string{"/maven2/org/a.jar", "/a/./b", "/a/../b", "/a/%2e%2E/b", "/a%2fb", `/a\b`, "..", ".x/y", "/a/.b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		for _, loose := range []bool{false, true} {
			got, climbed := resolveDots(path, loose)
			want, wantClimbed := resolveSegments(path, loose)
			if got != want || climbed != wantClimbed {
				t.Fatalf("resolveDots(%q, %v) = %q, %v; full resolution %q, %v", path, loose, got, climbed, want, wantClimbed)
			}
		}
	})
}

func BenchmarkClassify(b *testing.B) {
	tab, _ := classifyTable(b)
	var urls []*url.URL
	for _, s := range []string{
		"https://repo.example.com/maven2/sub/org/example/lib/1.0/lib-1.0.jar",
		"https://registry-1.docker.io/v2/library/alpine/manifests/3.20",
		"https://files.pythonhosted.org/packages/ab/cd/pkg-1.0-py3-none-any.whl",
		"https://example.net/unlisted",
	} {
		u, _ := url.Parse(s)
		urls = append(urls, u)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = tab.Classify(urls[i%len(urls)])
	}
}
