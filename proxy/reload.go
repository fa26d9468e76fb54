package proxy

import (
	"github.com/nora-breaker/nora-breaker/config"
)

// Reload swaps in a new validated configuration without dropping a
// connection: the upstream table is replaced atomically, breakers whose key
// still exists keep their state and take the new thresholds. Settings that
// belong to open listeners or loaded files (listen addresses, CA, stale
// directory, timeouts of the transport) need a restart; Reload reports them.
func (p *Proxy) Reload(cfg *config.Config) (needsRestart []string) {
	old := p.state.Load().cfg
	p.breakers.Reconfigure(cfg.CircuitBreaker.Enabled, KeySettings(cfg))
	p.state.Store(newRuntimeState(cfg))
	p.metrics.reloads.WithLabelValues("ok").Inc()
	o, n := old.Sidecar, cfg.Sidecar
	check := func(name string, changed bool) {
		if changed {
			needsRestart = append(needsRestart, name)
		}
	}
	check("listen", o.Listen != n.Listen)
	check("admin_listen", o.AdminListen != n.AdminListen)
	check("ca_cert/ca_key", o.CACert != n.CACert || o.CAKey != n.CAKey)
	check("upstream_ca", o.UpstreamCA != n.UpstreamCA)
	check("stale_dir", o.StaleDir != n.StaleDir)
	check("dial_timeout", o.DialTimeout != n.DialTimeout)
	check("shared_state", o.SharedState != n.SharedState || o.SharedStatePrefix != n.SharedStatePrefix ||
		o.SharedStatePassword != n.SharedStatePassword)
	return needsRestart
}

// ReloadFailed counts a refused reload (the old configuration stays).
func (p *Proxy) ReloadFailed() { p.metrics.reloads.WithLabelValues("error").Inc() }
