package testkit

import (
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/config"
)

// LoadConfig writes tomlText to a temporary config.toml and loads it the way
// the binary does, with env as the only environment.
func LoadConfig(t testing.TB, tomlText string, env map[string]string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(tomlText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Options{
		Flags: config.Flags{ConfigPath: path},
		LookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
	})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// ConfigUpstream is a configured upstream of format at rawURL, keyed
// "<format>:<rawURL>" as config keys an upstream of a chain, with 5 s for
// both its header wait and its body's idle time.
func ConfigUpstream(t testing.TB, format, rawURL string) *config.Upstream {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return &config.Upstream{Format: format, URL: u, Key: format + ":" + rawURL, Hosts: []string{u.Hostname()},
		ProxyTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second}
}
