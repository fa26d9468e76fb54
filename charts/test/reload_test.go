package charttest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/proxy"
)

// TestConfigChangeReload asks the proxy itself which changes need a
// restart: for each values change, a proxy built from the rendered
// config.toml reloads the changed one (proxy.Reload names the settings it
// cannot apply), and with configChange reload the pod template must change,
// rolling the pods, exactly when the proxy cannot apply the change in place.
// With configChange roll every change of config.toml rolls the pods.
func TestConfigChangeReload(t *testing.T) {
	base := []string{"--set", "ca.enabled=false"}
	changes := []struct{ name, set string }{
		// read once at start
		{"stale size", "sidecar.stale.maxBytes=2GiB"},
		{"stale object size", "sidecar.stale.maxObjectBytes=32MiB"},
		{"idle timeout", "sidecar.idleTimeout=60s"},
		{"connection limit", "sidecar.maxConnections=100"},
		{"scheduler processors", "sidecar.procs=2"},
		{"log level", "sidecar.logLevel=debug"},
		{"log format", "sidecar.logFormat=console"},
		{"shared state", "sidecar.sharedState.url=redis://127.0.0.1:1/0"},
		// applied by a reload
		{"threshold", "circuitBreaker.failureThreshold=9"},
		{"reset timeout", "circuitBreaker.resetTimeout=5"},
		{"allow list", "sidecar.allowHosts={git.example}"},
		{"deny unlisted", "sidecar.denyUnlisted=false"},
		{"dial timeout", "sidecar.dialTimeout=9s"},
		{"handshake timeout", "sidecar.tlsHandshakeTimeout=7s"},
		{"upstream connections", "sidecar.maxUpstreamConnsPerHost=10"},
		{"stale key mode", "sidecar.stale.authenticated=share"},
		{"npm upstream", "upstreams.npm.proxy=https://npm.example"},
		{"formats", "registries.enable={npm,pypi}"},
		{"shared-state prefix without shared state", "sidecar.sharedState.prefix=team-a"},
		{"parent proxy", "sidecar.parentProxy.url=http://proxy.corp.example:3128"},
		{"parent no-proxy hosts", "sidecar.parentProxy.noProxy={.corp.example}"},
	}
	reloadBase := append(base, "--set", "configChange=reload")
	before := render(t, reloadBase...)
	beforeRoll := render(t, base...)
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			after := render(t, append(reloadBase, "--set", c.set)...)
			restart := needsRestart(t, configOf(before), configOf(after))
			rolled := podTemplate(t, before) != podTemplate(t, after)
			if rolled != (len(restart) > 0) {
				t.Errorf("configChange reload: pods roll %t, but the proxy says %q need a restart", rolled, restart)
			}
			afterRoll := render(t, append(base, "--set", c.set)...)
			if configOf(afterRoll) != configOf(beforeRoll) && podTemplate(t, afterRoll) == podTemplate(t, beforeRoll) {
				t.Error("configChange roll: config.toml changed but the pods do not roll")
			}
		})
	}
}

func configOf(r *rendered) string { return r.ConfigMaps[configMap].Data["config.toml"] }

func podTemplate(t *testing.T, r *rendered) string {
	t.Helper()
	b, err := json.Marshal(r.theDeployment(t).Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// needsRestart builds a proxy from one rendered config.toml, reloads the
// other and returns what the proxy says it could not apply. The stale
// directory of the pod is replaced by a temporary one.
func needsRestart(t *testing.T, from, to string) []string {
	t.Helper()
	stale := t.TempDir()
	load := func(text string) *config.Config {
		path := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(config.Options{Flags: config.Flags{ConfigPath: path}, LookupEnv: func(k string) (string, bool) {
			if k == "NORA_SIDECAR_STALE_DIR" {
				return stale, true
			}
			return "", false
		}})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	p, err := proxy.New(load(from), proxy.Deps{Registry: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	restart, err := p.Reload(load(to))
	if err != nil {
		t.Fatal(err)
	}
	return restart
}
