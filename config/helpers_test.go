package config

import (
	"io/fs"
	"strings"
	"testing"
)

// load runs Load over in-memory inputs: file is the text of ./config.toml
// ("" = no file), env the whole environment.
func load(t testing.TB, file string, env map[string]string, flags Flags) (*Config, error) {
	t.Helper()
	return Load(Options{
		Flags: flags,
		LookupEnv: func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		},
		ReadFile: func(path string) ([]byte, error) {
			if file == "" {
				return nil, fs.ErrNotExist
			}
			return []byte(file), nil
		},
	})
}

func mustLoad(t *testing.T, file string, env map[string]string, flags Flags) *Config {
	t.Helper()
	cfg, err := load(t, file, env, flags)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return cfg
}

// summary renders the upstream table compactly for comparisons.
func summary(cfg *Config) []string {
	var out []string
	for _, u := range cfg.Upstreams {
		out = append(out, u.Key+" "+u.URL.String())
	}
	return out
}

func hasWarning(cfg *Config, sub string) bool {
	for _, w := range cfg.Warnings {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func errNotExist() error { return fs.ErrNotExist }

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}
