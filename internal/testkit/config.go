package testkit

import (
	"os"
	"path/filepath"
	"testing"

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
