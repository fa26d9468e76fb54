package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadTOML feeds arbitrary bytes as the config file: Load must return a
// Config or an error, never panic, and a Config must be internally sound.
func FuzzLoadTOML(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("..", "config.example.toml")); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"", "[circuit_breaker]\nfailure_threshold = 0\n", "[[docker.upstreams]]\nurl = 1\n",
		"[maven]\nproxies = [\"https://a\", {url = \"https://b\"}, [1]]\n",
		"[rpm]\nenabled = true\n[rpm.proxies]\na = \"https://x\"\nb = {url = \"http://y:80/\"}\n",
		"[sidecar.resolve]\n\"a:1\" = \"1.2.3.4:5\"\n[sidecar.aliases]\npypi = [\"x\"]\n",
		"[registries]\nenable = \"all,-docker\"\n", "a.b.c = [[{x = 1}]]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(Options{ReadFile: func(string) ([]byte, error) { return data, nil }})
		if err != nil {
			return
		}
		checkSound(t, cfg)
	})
}

// FuzzEnv feeds arbitrary values to the list-shaped environment variables.
func FuzzEnv(f *testing.F) {
	f.Add("https://a.test|u:p|pfx,https://b.test", "https://m.test|u:p,ht tp://x", "https://p.test/simple|a:b",
		"base=https://r.test|u:p", "a.test:80=127.0.0.1:8080", "pypi=x.test|y.test", "all,-maven")
	f.Add("", "", "", "", "", "", "")
	f.Add(",,|||,", "|", "=|", "==", "=", "=|=", "-")
	f.Fuzz(func(t *testing.T, docker, maven, pypi, rpm, resolve, aliases, enable string) {
		env := map[string]string{
			"NORA_DOCKER_PROXIES":      docker,
			"NORA_MAVEN_PROXIES":       maven,
			"NORA_PYPI_PROXIES":        pypi,
			"NORA_RPM_PROXIES":         rpm,
			"NORA_DEB_PROXIES":         rpm,
			"NORA_SIDECAR_RESOLVE":     resolve,
			"NORA_SIDECAR_ALIASES":     aliases,
			"NORA_SIDECAR_ALLOW_HOSTS": aliases,
			"NORA_REGISTRIES_ENABLE":   enable,
		}
		cfg, err := load(t, "", env, Flags{})
		if err != nil {
			checkRedacted(t, err)
			return
		}
		checkSound(t, cfg)
	})
}

// checkRedacted asserts that no problem about a list variable shows the
// credential part of an entry or the user:pass of its URL.
func checkRedacted(t *testing.T, err error) {
	t.Helper()
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Load error is not joined: %v", err)
	}
	for _, one := range joined.Unwrap() {
		var e *Error
		if !errors.As(one, &e) {
			t.Fatalf("problem %v is not an *Error", one)
		}
		if e.Source != "env" || !strings.Contains(e.Key, "PROXIES[") {
			continue
		}
		parts := strings.SplitN(e.Value, "|", 3)
		if len(parts) > 1 && parts[1] != "" && parts[1] != "***" {
			t.Fatalf("credential shown: %v", e)
		}
		if redactURL(parts[0]) != parts[0] {
			t.Fatalf("URL credential shown: %v", e)
		}
	}
}

// checkSound asserts what every package downstream relies on.
func checkSound(t *testing.T, cfg *Config) {
	t.Helper()
	keys := map[string]bool{}
	for _, u := range cfg.Upstreams {
		if u.URL == nil || (u.URL.Scheme != "http" && u.URL.Scheme != "https") || u.URL.Host == "" || u.URL.User != nil {
			t.Fatalf("bad upstream URL %v", u.URL)
		}
		if len(u.Hosts) == 0 || u.Hosts[0] != u.URL.Hostname() {
			t.Fatalf("%s hosts %q", u.Key, u.Hosts)
		}
		if perUpstreamKey(u.Format) {
			if keys[u.Key] {
				t.Fatalf("duplicate key %s", u.Key)
			}
			keys[u.Key] = true
		}
	}
	if cfg.CircuitBreaker.FailureThreshold < 1 || cfg.CircuitBreaker.ResetTimeout < 0 {
		t.Fatalf("breaker %+v", cfg.CircuitBreaker)
	}
}
