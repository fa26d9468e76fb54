package config

import (
	"slices"
	"strings"
	"testing"
)

func TestDockerRegistryName(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io":                   "docker.io",
		"registry-1.docker.io":        "docker.io",
		"Index.Docker.IO.":            "docker.io",
		"registry.hub.docker.com:443": "docker.io",
		"registry-1.docker.io:5000":   "registry-1.docker.io:5000",
		"ghcr.io":                     "ghcr.io",
		"GHCR.io:443":                 "ghcr.io",
		"localhost:5000":              "localhost:5000",
		"[::1]:5000":                  "[::1]:5000",
		"":                            "",
	} {
		if got := DockerRegistryName(in); got != want {
			t.Errorf("DockerRegistryName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDockerServes: every docker upstream serves its own registry (Docker
// Hub's hosts serve docker.io), and a mirror also serves what its
// `serves` lists, each name in the form a request names it.
func TestDockerServes(t *testing.T) {
	cfg := mustLoad(t, `
[[docker.upstreams]]
url = "https://mirror.gcr.io"
serves = ["docker.io", "GHCR.io", "registry-1.docker.io", "quay.io:443"]
[[docker.upstreams]]
url = "https://registry-1.docker.io"
[[docker.upstreams]]
url = "http://reg.test:5000"
[[docker.upstreams]]
url = "https://ghcr.io"
prefix = "ghcr"
[maven]
proxies = ["https://repo1.maven.org/maven2"]
`, nil, Flags{})
	want := [][]string{
		{"mirror.gcr.io", "docker.io", "ghcr.io", "quay.io"},
		{"docker.io"},
		{"reg.test:5000"},
		{"ghcr.io"},
	}
	chain := cfg.Chain("docker")
	for i, u := range chain {
		if !slices.Equal(u.Serves, want[i]) {
			t.Errorf("%s serves %q, want %q", u.Key, u.Serves, want[i])
		}
	}
	if m := cfg.Chain("maven")[0]; m.Serves != nil {
		t.Errorf("maven upstream serves %q", m.Serves)
	}
	if d := mustLoad(t, "", nil, Flags{}).Chain("docker")[0]; !slices.Equal(d.Serves, []string{"docker.io"}) {
		t.Errorf("the default docker upstream serves %q", d.Serves)
	}
}

func TestDockerServesErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"[[docker.upstreams]]\nurl = \"https://m.test\"\nserves = [\"https://ghcr.io\"]\n",
			`config.toml:3: docker.upstreams[0].serves: serves entry "https://ghcr.io" must be a registry host`},
		{"[[docker.upstreams]]\nurl = \"https://m.test\"\nserves = [\"ghcr.io/team\"]\n",
			`serves entry "ghcr.io/team" must be a registry host`},
		{"[[docker.upstreams]]\nurl = \"https://m.test\"\nserves = \"docker.io\"\n",
			"docker.upstreams[0].serves: must be a list of strings"},
	} {
		if _, err := load(t, tc.file, nil, Flags{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.file, err, tc.want)
		}
	}
}
