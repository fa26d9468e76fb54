package config

import (
	"strings"
	"testing"
)

func TestParentProxy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    string
		env     map[string]string
		key     string // the default parent's key; "" = none
		user    string
		pass    string
		problem string // substring of the error; "" = loads
	}{
		{name: "unset"},
		{name: "http with port", file: "[sidecar]\nparent_proxy = \"http://proxy.corp:3128\"\n",
			key: "parent:http://proxy.corp:3128"},
		{name: "default port by scheme", file: "[sidecar]\nparent_proxy = \"https://Proxy.Corp.\"\n",
			key: "parent:https://proxy.corp:443"},
		{name: "credentials in the URL", file: "[sidecar]\nparent_proxy = \"http://bot:s%40cret@proxy.corp:3128\"\n",
			key: "parent:http://proxy.corp:3128", user: "bot", pass: "s@cret"},
		{name: "password from the environment", file: "[sidecar]\nparent_proxy = \"http://bot@proxy.corp:3128\"\n",
			env: map[string]string{"NORA_SIDECAR_PARENT_PROXY_PASSWORD": "from-secret"},
			key: "parent:http://proxy.corp:3128", user: "bot", pass: "from-secret"},
		{name: "whole URL from the environment", env: map[string]string{"NORA_SIDECAR_PARENT_PROXY": "http://10.0.0.1:8080"},
			key: "parent:http://10.0.0.1:8080"},
		{name: "no scheme", file: "[sidecar]\nparent_proxy = \"proxy.corp:3128\"\n", problem: "must be http://"},
		{name: "socks is not a parent", file: "[sidecar]\nparent_proxy = \"socks5://proxy.corp:1080\"\n", problem: "scheme"},
		{name: "a path", file: "[sidecar]\nparent_proxy = \"http://proxy.corp:3128/x\"\n", problem: "no path"},
		{name: "bad port", file: "[sidecar]\nparent_proxy = \"http://proxy.corp:99999\"\n", problem: "must be http://"},
		{name: "password without parent", env: map[string]string{"NORA_SIDECAR_PARENT_PROXY_PASSWORD": "x"},
			problem: "parent_proxy is not"},
		{name: "password without user", file: "[sidecar]\nparent_proxy = \"http://proxy.corp:3128\"\n",
			env: map[string]string{"NORA_SIDECAR_PARENT_PROXY_PASSWORD": "x"}, problem: "names no user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, tc.file, tc.env, Flags{})
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err = %v, want one saying %q", err, tc.problem)
				}
				if strings.Contains(err.Error(), "s@cret") || strings.Contains(err.Error(), "from-secret") {
					t.Fatalf("the error shows a password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.key == "" {
				if cfg.Parent != nil {
					t.Fatalf("parent = %v, want none", cfg.Parent.Key())
				}
				return
			}
			if cfg.Parent == nil || cfg.Parent.Key() != tc.key || cfg.Parent.User != tc.user || cfg.Parent.Password != tc.pass {
				t.Fatalf("parent = %+v, want %s user %q pass %q", cfg.Parent, tc.key, tc.user, tc.pass)
			}
			for _, u := range cfg.Upstreams {
				if u.Parent != cfg.Parent {
					t.Fatalf("upstream %s has parent %v, want the default", u.Key, u.Parent)
				}
			}
		})
	}
}

// TestParentErrorsHideCredentials: a parent URL written in the environment
// is shown redacted in the problem naming it.
func TestParentErrorsHideCredentials(t *testing.T) {
	_, err := load(t, "", map[string]string{"NORA_SIDECAR_PARENT_PROXY": "ftp://bot:hunter2@proxy.corp:21",
		"NORA_SIDECAR_PARENTS": "npm=ftp://bot:hunter3@other:1"}, Flags{})
	if err == nil {
		t.Fatal("want an error")
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "hunter3") {
		t.Fatalf("the error shows a password: %v", err)
	}
}

func TestPerUpstreamParents(t *testing.T) {
	file := `
[sidecar]
parent_proxy = "http://bot:pw@proxy.corp:3128"

[sidecar.parents]
"npm:https://npm.corp.example" = "direct"
pypi = "https://egress.corp:8443"
"maven" = "http://proxy.corp:3128"

[npm]
proxy = "https://registry.npmjs.org"
proxies = ["https://npm.corp.example"]

[pypi]
proxies = ["https://pypi.org/simple"]

[maven]
proxies = ["https://repo1.maven.org/maven2"]
`
	cfg := mustLoad(t, file, nil, Flags{})
	want := map[string]string{
		"npm:https://registry.npmjs.org":       "parent:http://proxy.corp:3128",
		"npm:https://npm.corp.example":         "direct",
		"pypi:https://pypi.org/simple":         "parent:https://egress.corp:8443",
		"maven:https://repo1.maven.org/maven2": "parent:http://proxy.corp:3128",
		"cargo":                                "parent:http://proxy.corp:3128",
	}
	for _, u := range cfg.Upstreams {
		got := "direct"
		if u.Parent != nil {
			got = u.Parent.Key()
		}
		if w, ok := want[u.Key]; ok && got != w {
			t.Errorf("%s goes through %s, want %s", u.Key, got, w)
		}
	}
	// The maven entry names parent_proxy's address without credentials:
	// it is that parent, with its credentials.
	for _, u := range cfg.Upstreams {
		if u.Format == "maven" && (u.Parent != cfg.Parent || u.Parent.Password != "pw") {
			t.Fatalf("maven's parent = %+v, want parent_proxy itself", u.Parent)
		}
	}
	var keys []string
	for _, p := range cfg.Parents() {
		keys = append(keys, p.Key())
	}
	if strings.Join(keys, " ") != "parent:http://proxy.corp:3128 parent:https://egress.corp:8443" {
		t.Fatalf("Parents() = %v", keys)
	}
}

func TestParentsTableProblems(t *testing.T) {
	for _, tc := range []struct{ name, file, problem, warning string }{
		{name: "not a URL", file: "[sidecar.parents]\nnpm = \"sometimes\"\n", problem: `must be "direct" or a parent proxy URL`},
		{name: "same address, other credentials",
			file:    "[sidecar]\nparent_proxy = \"http://a:1@proxy.corp:3128\"\n[sidecar.parents]\nnpm = \"http://b:2@proxy.corp:3128\"\n",
			problem: "other credentials"},
		{name: "names nothing", file: "[sidecar.parents]\n\"npm:https://nowhere.example\" = \"direct\"\n",
			warning: `sidecar.parents "npm:https://nowhere.example" names no configured upstream key or format`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, tc.file, nil, Flags{})
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err = %v, want %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !hasWarning(cfg, tc.warning) {
				t.Fatalf("warnings %q, want %q", cfg.Warnings, tc.warning)
			}
		})
	}
}

func TestParentsFromEnvironment(t *testing.T) {
	cfg := mustLoad(t, "[sidecar.parents]\ngo = \"direct\"\n", map[string]string{
		"NORA_SIDECAR_PARENT_PROXY": "http://proxy.corp:3128",
		"NORA_SIDECAR_PARENTS":      "npm=direct, pypi=http://u:p@egress.corp:3129",
	}, Flags{})
	for _, u := range cfg.Upstreams {
		switch u.Format {
		case "npm":
			if u.Parent != nil {
				t.Errorf("npm through %s, want direct", u.Parent.Key())
			}
		case "pypi":
			if u.Parent == nil || u.Parent.Key() != "parent:http://egress.corp:3129" || u.Parent.User != "u" {
				t.Errorf("pypi through %+v", u.Parent)
			}
		case "go":
			// The environment's table replaces the file's.
			if u.Parent != cfg.Parent {
				t.Errorf("go through %+v, want parent_proxy", u.Parent)
			}
		}
	}
}

func TestParentThresholds(t *testing.T) {
	cfg := mustLoad(t, `
[sidecar]
parent_proxy = "http://proxy.corp:3128"
[circuit_breaker]
failure_threshold = 7
[circuit_breaker.overrides."parent"]
reset_timeout = 5
[circuit_breaker.overrides."parent:http://proxy.corp:3128"]
failure_threshold = 2
`, nil, Flags{})
	bs := cfg.ParentThresholds(cfg.Parent)
	if bs.FailureThreshold != 2 || bs.ResetTimeout.Seconds() != 5 ||
		bs.FailureThresholdFrom != `override "parent:http://proxy.corp:3128"` || bs.ResetTimeoutFrom != `override "parent"` {
		t.Fatalf("settings %+v", bs)
	}
	for _, w := range cfg.Warnings {
		if strings.Contains(w, "overrides") {
			t.Fatalf("the parent's overrides are warned about: %q", w)
		}
	}
}

func TestParentDisplay(t *testing.T) {
	for raw, want := range map[string]string{
		"":                                 "off",
		"http://proxy.corp:3128":           "http://proxy.corp:3128",
		"http://bot:hunter2@proxy.corp":    "http://bot@proxy.corp:80",
		"http://bot:hunter2@bad host:3128": "http://***@bad host:3128",
	} {
		if got := (Sidecar{ParentProxy: raw}).ParentDisplay(); got != want {
			t.Errorf("ParentDisplay(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestNoProxy(t *testing.T) {
	np, err := ParseNoProxy([]string{"corp.example", ".internal", "*.lab.example", "10.0.0.0/8", "fd00::/8",
		"192.168.1.7", "registry.test:5000", "[fd00::1]:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, port string
		direct     bool
	}{
		{"corp.example", "443", true},
		{"nexus.corp.example", "443", true},
		{"notcorp.example", "443", false},
		{"a.internal", "80", true},
		{"internal", "80", true},
		{"x.lab.example", "443", true},
		{"10.1.2.3", "443", true},
		{"::ffff:10.1.2.3", "443", true},
		{"11.1.2.3", "443", false},
		{"fd12::5", "443", true},
		{"192.168.1.7", "80", true},
		{"192.168.1.8", "80", false},
		{"registry.test", "5000", true},
		{"registry.test", "443", false},
		{"fd00::1", "8443", true},
		{"registry.npmjs.org", "443", false},
	} {
		if got := np.Match(tc.host, tc.port); got != tc.direct {
			t.Errorf("Match(%s, %s) = %v, want %v", tc.host, tc.port, got, tc.direct)
		}
	}
	if _, err := ParseNoProxy([]string{"ok.example", "http://x", "a b", "h:0"}); err == nil ||
		!strings.Contains(err.Error(), `"http://x"`) || !strings.Contains(err.Error(), `"a b"`) || !strings.Contains(err.Error(), `"h:0"`) {
		t.Fatalf("err = %v, want the three bad entries named", err)
	}
	cfg := mustLoad(t, "[sidecar]\nparent_no_proxy = [\"Nexus.Corp.\", \"10.0.0.0/8\"]\n", nil, Flags{})
	if !cfg.NoProxy.Match("nexus.corp", "443") || !cfg.NoProxy.Match("10.9.9.9", "80") {
		t.Fatal("parent_no_proxy from the file does not match")
	}
}
