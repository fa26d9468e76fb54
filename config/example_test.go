package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestExampleConfig keeps config.example.toml loadable and meaningful.
func TestExampleConfig(t *testing.T) {
	path := filepath.Join("..", "config.example.toml")
	cfg, err := Load(Options{Flags: Flags{ConfigPath: path}, LookupEnv: lookup(nil), ReadFile: os.ReadFile})
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	if !cfg.CircuitBreaker.Enabled || cfg.Path != path {
		t.Errorf("breaker enabled=%v path=%q", cfg.CircuitBreaker.Enabled, cfg.Path)
	}
	if got := cfg.Formats(); !reflect.DeepEqual(got, []string{"docker", "maven", "npm", "pypi", "cargo", "go"}) {
		t.Errorf("Formats() = %q", got)
	}
	docker := cfg.Chain("docker")
	if len(docker) != 3 || !docker[2].Bound || docker[2].Key != "docker:https://ghcr.io" {
		t.Errorf("docker chain = %+v", docker)
	}
	maven := cfg.Chain("maven")
	if len(maven) != 2 || maven[1].Auth == "" {
		t.Errorf("maven chain = %+v", maven)
	}
	if n := len(cfg.Chain("pypi")); n != 2 {
		t.Errorf("pypi chain has %d upstreams", n)
	}
	hubUp, pypiUp := docker[0], cfg.Chain("pypi")[0]
	if hubUp.Key != "docker:https://registry-1.docker.io" || pypiUp.Key != "pypi:https://pypi.org/simple" {
		t.Fatalf("first docker and pypi upstreams: %s, %s", hubUp.Key, pypiUp.Key)
	}
	hub := cfg.HostThresholds(hubUp.Key, hubUp)
	th, thFrom := hub.FailureThreshold, hub.FailureThresholdFrom
	pypi := cfg.HostThresholds(pypiUp.Key, pypiUp)
	reset, resetFrom := pypi.ResetTimeout, pypi.ResetTimeoutFrom
	if th != 10 || thFrom != `override "docker:https://registry-1.docker.io"` || reset != 15*time.Second || resetFrom != `format "pypi"` {
		t.Errorf("thresholds: %d %s %v %s", th, thFrom, reset, resetFrom)
	}
	if s := cfg.Sidecar; s.Listen != "127.0.0.1:3128" || s.StaleMaxBytes != 1<<30 || s.Resolve["nexus.example.internal:443"] != "10.0.12.7:443" {
		t.Errorf("sidecar = %+v", s)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("example config warns: %q", cfg.Warnings)
	}
}
