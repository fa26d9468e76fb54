package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// row is the part of an Upstream the shape tests compare.
type row struct {
	Key, URL, Auth, Name, Source string
	Position                     int
	Bound                        bool
}

func rows(cfg *Config, format string) []row {
	var out []row
	for _, u := range cfg.Chain(format) {
		out = append(out, row{u.Key, u.URL.String(), u.Auth, u.Name, u.Source, u.Position, u.Bound})
	}
	return out
}

func TestUpstreamShapes(t *testing.T) {
	const src = "file:config.toml"
	tests := []struct {
		name   string
		file   string
		env    map[string]string
		format string
		want   []row
	}{
		{name: "docker file upstreams", format: "docker", file: `
[[docker.upstreams]]
url = "https://registry-1.docker.io/"
auth = "me:tok"
[[docker.upstreams]]
url = "https://mirror.gcr.io"
[[docker.upstreams]]
url = "https://ghcr.io"
prefix = "ghcr"
namespace = "ghcr.io"
`, want: []row{
			{"docker:https://registry-1.docker.io", "https://registry-1.docker.io", "me:tok", "", src, 0, false},
			{"docker:https://mirror.gcr.io", "https://mirror.gcr.io", "", "", src, 1, false},
			{"docker:https://ghcr.io", "https://ghcr.io", "", "", src, 2, true},
		}},
		{name: "docker table without upstreams gets the default", format: "docker", file: "[docker]\nproxy_timeout = 60\n",
			want: []row{{"docker:https://registry-1.docker.io", "https://registry-1.docker.io", "", "", "default", 0, false}}},
		{name: "docker env beats file", format: "docker",
			file: "[[docker.upstreams]]\nurl = \"https://file.test\"\n",
			env:  map[string]string{"NORA_DOCKER_PROXIES": "https://a.test|u:p, https://ghcr.io||ghcr,"},
			want: []row{
				{"docker:https://a.test", "https://a.test", "u:p", "", "env:NORA_DOCKER_PROXIES", 0, false},
				{"docker:https://ghcr.io", "https://ghcr.io", "", "", "env:NORA_DOCKER_PROXIES", 1, true},
			}},
		{name: "docker deprecated env", format: "docker", env: map[string]string{"NORA_DOCKER_UPSTREAMS": "http://reg.test:5000"},
			want: []row{{"docker:http://reg.test:5000", "http://reg.test:5000", "", "", "env:NORA_DOCKER_UPSTREAMS", 0, false}}},
		{name: "maven file list", format: "maven",
			file: "[maven]\nproxies = [\"https://repo1.maven.org/maven2/\", { url = \"https://nexus.corp/repository/public\", auth = \"u:p\" }]\n",
			want: []row{
				{"maven:https://repo1.maven.org/maven2", "https://repo1.maven.org/maven2", "", "", src, 0, false},
				{"maven:https://nexus.corp/repository/public", "https://nexus.corp/repository/public", "u:p", "", src, 1, false},
			}},
		{name: "maven env", format: "maven", env: map[string]string{"NORA_MAVEN_PROXIES": "https://a.test/m2|u:p:with:colons,https://b.test"},
			want: []row{
				{"maven:https://a.test/m2", "https://a.test/m2", "u:p:with:colons", "", "env:NORA_MAVEN_PROXIES", 0, false},
				{"maven:https://b.test", "https://b.test", "", "", "env:NORA_MAVEN_PROXIES", 1, false},
			}},
		{name: "maven empty env falls back to default", format: "maven", env: map[string]string{"NORA_MAVEN_PROXIES": ""},
			want: []row{{"maven:https://repo1.maven.org/maven2", "https://repo1.maven.org/maven2", "", "", "default", 0, false}}},
		{name: "pypi proxies beat proxy", format: "pypi",
			file: "[pypi]\nproxy = \"https://legacy.test/simple\"\nproxies = [\"https://pypi.org/simple/\", {url = \"https://download.pytorch.org/whl/cu124\", auth = \"t:k\"}]\n",
			want: []row{
				{"pypi:https://pypi.org/simple", "https://pypi.org/simple", "", "", src, 0, false},
				{"pypi:https://download.pytorch.org/whl/cu124", "https://download.pytorch.org/whl/cu124", "t:k", "", src, 1, false},
			}},
		{name: "pypi legacy proxy with auth", format: "pypi", file: "[pypi]\nproxy = \"https://idx.test/simple/\"\nproxy_auth = \"a:b\"\n",
			want: []row{{"pypi:https://idx.test/simple", "https://idx.test/simple", "a:b", "", src, 0, false}}},
		{name: "pypi env proxies beat env proxy", format: "pypi",
			env: map[string]string{"NORA_PYPI_PROXIES": "https://a.test/simple,https://b.test/simple|x:y", "NORA_PYPI_PROXY": "https://c.test/simple"},
			want: []row{
				{"pypi:https://a.test/simple", "https://a.test/simple", "", "", "env:NORA_PYPI_PROXIES", 0, false},
				{"pypi:https://b.test/simple", "https://b.test/simple", "x:y", "", "env:NORA_PYPI_PROXIES", 1, false},
			}},
		{name: "pypi env proxy and auth", format: "pypi", file: "[pypi]\nproxy_auth = \"file:auth\"\n",
			env:  map[string]string{"NORA_PYPI_PROXY": "https://c.test/simple", "NORA_PYPI_PROXY_AUTH": "env:auth"},
			want: []row{{"pypi:https://c.test/simple", "https://c.test/simple", "env:auth", "", "env:NORA_PYPI_PROXY", 0, false}}},
		{name: "pypi empty env proxy = none", format: "pypi", env: map[string]string{"NORA_PYPI_PROXY": ""}},
		{name: "npm empty env = none", format: "npm", file: "[npm]\nproxy = \"https://npm.test\"\n", env: map[string]string{"NORA_NPM_PROXY": ""}},
		{name: "npm proxy + env auth", format: "npm", file: "[npm]\nproxy = \"https://npm.test/\"\nproxy_auth = \"f:a\"\n",
			env:  map[string]string{"NORA_NPM_PROXY_AUTH": "e:a"},
			want: []row{{"npm:https://npm.test", "https://npm.test", "e:a", "", src, 0, false}}},
		{name: "npm proxies extension", format: "npm", file: "[npm]\nproxies = [\"https://registry.npmjs.org\", {url = \"https://npm.corp\", auth = \"u:p\"}]\n",
			want: []row{
				{"npm:https://registry.npmjs.org", "https://registry.npmjs.org", "", "", src, 0, false},
				{"npm:https://npm.corp", "https://npm.corp", "u:p", "", src, 1, false},
			}},
		{name: "npm env proxy beats file proxies", format: "npm", file: "[npm]\nproxies = [\"https://a.test\"]\n",
			env:  map[string]string{"NORA_NPM_PROXY": "https://env.test"},
			want: []row{{"npm:https://env.test", "https://env.test", "", "", "env:NORA_NPM_PROXY", 0, false}}},
		{name: "cargo env", format: "cargo", env: map[string]string{"NORA_CARGO_PROXY": "https://crates.corp/", "NORA_CARGO_PROXY_AUTH": "c:d"},
			want: []row{{"cargo", "https://crates.corp", "c:d", "", "env:NORA_CARGO_PROXY", 0, false}}},
		{name: "go file", format: "go", file: "[go]\nproxy = \"https://goproxy.corp\"\n",
			want: []row{{"go", "https://goproxy.corp", "", "", src, 0, false}}},
		{name: "go empty = none", format: "go", file: "[go]\nproxy = \"\"\n"},
		{name: "gems empty env falls back to default", format: "gems", file: "[gems]\nenabled = true\n", env: map[string]string{"NORA_GEMS_PROXY": ""},
			want: []row{{"gems", "https://rubygems.org", "", "", "default", 0, false}}},
		{name: "terraform env name is TF", format: "terraform", env: map[string]string{"NORA_TF_ENABLED": "true", "NORA_TF_PROXY": "https://tf.corp"},
			want: []row{{"terraform", "https://tf.corp", "", "", "env:NORA_TF_PROXY", 0, false}}},
		{name: "ansible default", format: "ansible", env: map[string]string{"NORA_REGISTRIES_ENABLE": "ansible"},
			want: []row{{"ansible", "https://galaxy.ansible.com", "", "", "default", 0, false}}},
		{name: "conan default with auth", format: "conan", file: "[conan]\nenabled = true\nproxy_auth = \"c:x\"\n",
			want: []row{{"conan", "https://center2.conan.io", "c:x", "", "default", 0, false}}},
		{name: "pub table is pub_dart", format: "pub", file: "[pub_dart]\nenabled = true\nproxy = \"https://pub.corp\"\n",
			env:  map[string]string{"NORA_PUB_PROXY_AUTH": "p:q"},
			want: []row{{"pub", "https://pub.corp", "p:q", "", src, 0, false}}},
		{name: "nuget keeps scheme and authority only", format: "nuget", file: "[nuget]\nenabled = true\nproxy = \"https://nuget.corp:8443/v3/index.json\"\n",
			want: []row{{"nuget", "https://nuget.corp:8443", "", "", src, 0, false}}},
		{name: "rpm file repos in file order", format: "rpm", file: `
[rpm]
enabled = true
[rpm.proxies]
zeta = "https://mirror.test/zeta/"
alpha = { url = "https://vault.test/alpha", auth = "r:s" }
`, want: []row{
			{"rpm", "https://mirror.test/zeta", "", "zeta", src, 0, true},     // a named repository: bound
			{"rpm", "https://vault.test/alpha", "r:s", "alpha", src, 1, true}, // a named repository: bound
		}},
		{name: "deb env repos", format: "deb", env: map[string]string{"NORA_REGISTRIES_ENABLE": "deb", "NORA_DEB_PROXIES": "debian=https://deb.test/debian|u:p,security=https://sec.test"},
			want: []row{
				{"deb", "https://deb.test/debian", "u:p", "debian", "env:NORA_DEB_PROXIES", 0, true}, // a named repository: bound
				{"deb", "https://sec.test", "", "security", "env:NORA_DEB_PROXIES", 1, true},         // a named repository: bound
			}},
		{name: "disabled format has no upstreams", format: "maven", file: "[maven]\nenabled = false\nproxies = [\"https://a.test\"]\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustLoad(t, tc.file, tc.env, Flags{})
			if got := rows(cfg, tc.format); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("chain %s\n got %+v\nwant %+v", tc.format, got, tc.want)
			}
		})
	}
}

func TestNormalizeURL(t *testing.T) {
	tests := []struct {
		in, want, auth string
	}{
		{"HTTPS://User:Pw@Repo.Example.COM:443/maven2/?x=1#frag", "https://repo.example.com/maven2", "User:Pw"},
		{"http://reg.test:80/", "http://reg.test", ""},
		{"http://reg.test:443/", "http://reg.test:443", ""},
		{"https://reg.test:8443//", "https://reg.test:8443", ""},
		{"https://token@reg.test/a/b/", "https://reg.test/a/b", "token"},
		{"https://[::1]:5000/v2", "https://[::1]:5000/v2", ""},
		{"https://reg.test/a%2Fb/", "https://reg.test/a%2Fb", ""},
	}
	for _, tc := range tests {
		u, auth, err := normalizeURL(tc.in)
		if err != nil || u.String() != tc.want || auth != tc.auth {
			t.Errorf("normalizeURL(%q) = %v, %q, %v; want %s, %q", tc.in, u, auth, err, tc.want, tc.auth)
		}
	}
	for _, bad := range []string{"", "ftp://x", "https://", "reg.test/v2", "https:opaque", "https://x:port"} {
		if _, _, err := normalizeURL(bad); err == nil {
			t.Errorf("normalizeURL(%q) accepted", bad)
		}
	}
}

func TestCredentialsFromURL(t *testing.T) {
	file := "[maven]\nproxies = [\"https://u:p@a.test/m2\", {url = \"https://x:y@b.test\", auth = \"given:wins\"}]\n"
	cfg := mustLoad(t, file, nil, Flags{})
	want := []row{
		{"maven:https://a.test/m2", "https://a.test/m2", "u:p", "", "file:config.toml", 0, false},
		{"maven:https://b.test", "https://b.test", "given:wins", "", "file:config.toml", 1, false},
	}
	if got := rows(cfg, "maven"); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v", got)
	}
	for _, u := range cfg.Upstreams {
		if strings.Contains(u.URL.String(), "@") || strings.Contains(u.Key, "@") {
			t.Errorf("credentials left in %s / %s", u.URL, u.Key)
		}
	}
}

func TestHostsAndAliases(t *testing.T) {
	file := `
[[docker.upstreams]]
url = "https://registry-1.docker.io"
[[docker.upstreams]]
url = "https://ghcr.io"
prefix = "ghcr"
[pypi]
proxies = ["https://pypi.org/simple", "https://Mirror.Test./simple"]
[nuget]
enabled = true
search_service = "https://search.corp/query"
[gems]
enabled = true
[terraform]
enabled = true
[sidecar.aliases]
"pypi:https://mirror.test/simple" = ["Files.Mirror.test."]
pypi = ["cdn.pypi.test"]
cargo = ["crates-cdn.test"]
`
	cfg := mustLoad(t, file, nil, Flags{})
	want := map[string][]string{
		"docker:https://registry-1.docker.io":  {"registry-1.docker.io", "index.docker.io", "auth.docker.io", "production.cloudflare.docker.com"},
		"docker:https://ghcr.io":               {"ghcr.io", "pkg-containers.githubusercontent.com"},
		"pypi:https://pypi.org/simple":         {"pypi.org", "pypi.python.org", "files.pythonhosted.org", "cdn.pypi.test"},
		"pypi:https://mirror.test/simple":      {"mirror.test", "files.mirror.test", "cdn.pypi.test"},
		"cargo":                                {"crates.io", "index.crates.io", "static.crates.io", "crates-cdn.test"},
		"go":                                   {"proxy.golang.org", "sum.golang.org"},
		"gems":                                 {"rubygems.org", "index.rubygems.org"},
		"terraform":                            {"registry.terraform.io", "releases.hashicorp.com"},
		"nuget":                                {"api.nuget.org", "azuresearch-usnc.nuget.org", "azuresearch-ussc.nuget.org", "search.corp"},
		"maven:https://repo1.maven.org/maven2": {"repo1.maven.org", "repo.maven.apache.org"},
	}
	seen := map[string]bool{}
	for _, u := range cfg.Upstreams {
		seen[u.Key] = true
		if w, ok := want[u.Key]; ok && !reflect.DeepEqual(u.Hosts, w) {
			t.Errorf("%s hosts = %q, want %q", u.Key, u.Hosts, w)
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("no upstream %s (keys are in one canonical form: case, trailing dot)", key)
		}
	}
	chain := cfg.Chain("pypi")
	if len(chain) != 2 || chain[0].Position != 0 || chain[1].Position != 1 {
		t.Fatalf("pypi chain = %+v", chain)
	}
	if d := cfg.Chain("docker"); !d[1].Bound || d[1].Prefix != "ghcr" || d[0].Bound {
		t.Errorf("docker bound flags: %+v %+v", d[0], d[1])
	}
	// Config.Upstreams is formats in canonical order, config order inside.
	var formats []string
	for _, u := range cfg.Upstreams {
		if len(formats) == 0 || formats[len(formats)-1] != u.Format {
			formats = append(formats, u.Format)
		}
	}
	if !reflect.DeepEqual(formats, cfg.Formats()) {
		t.Errorf("upstream order %q != Formats() %q", formats, cfg.Formats())
	}
}

func TestTimeouts(t *testing.T) {
	file := "[docker]\nproxy_timeout = 60\nread_timeout = 20\n[maven]\nproxy_timeout = 10\n"
	cfg := mustLoad(t, file, map[string]string{"NORA_MAVEN_PROXY_TIMEOUT": "15", "NORA_DOCKER_READ_TIMEOUT": "25", "NORA_GO_PROXY_TIMEOUT": "45"}, Flags{})
	tests := []struct {
		format      string
		proxy, read time.Duration
	}{
		{"docker", 60 * time.Second, 25 * time.Second},
		{"maven", 15 * time.Second, 15 * time.Second},
		{"go", 45 * time.Second, 45 * time.Second},
		{"npm", 30 * time.Second, 30 * time.Second},
	}
	for _, tc := range tests {
		u := cfg.Chain(tc.format)[0]
		if u.ProxyTimeout != tc.proxy || u.ReadTimeout != tc.read {
			t.Errorf("%s: proxy %v read %v; want %v %v", tc.format, u.ProxyTimeout, u.ReadTimeout, tc.proxy, tc.read)
		}
	}
}

func TestLineNumbersInArrays(t *testing.T) {
	file := "[maven]\nproxies = [\n  \"https://ok.test\",\n  { url = \"https://ok2.test\" },\n  { url = \"nope://x\", auth = \"a:b\" },\n]\n"
	_, err := load(t, file, nil, Flags{})
	if err == nil || !strings.Contains(err.Error(), "config.toml:5: maven.proxies[2].url: invalid URL") {
		t.Fatalf("err = %v", err)
	}
}

func TestRedactURLPasswordWithDelimiters(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@h.test/x":         "https://***@h.test/x",
		"https://u:se/cret@h.test/x":   "https://***@h.test/x",
		"https://u:se?cret@h.test":     "https://***@h.test",
		"https://u:se#cret@h.test/a?b": "https://***@h.test/a?b",
		"u:se/cret@h.test":             "***@h.test",
		"https://h.test/no/credential": "https://h.test/no/credential",
		"https://***@h.test":           "https://***@h.test",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
