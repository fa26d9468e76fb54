package proxy

import (
	"fmt"

	"github.com/nora-breaker/nora-breaker/config"
)

// Reload swaps in a new validated configuration without dropping a
// connection: requests that arrive afterwards are decided under the new
// snapshot, requests in flight finish under the one they started with.
// Breakers whose key still exists keep their state and take the new
// thresholds. Settings copied once at start cannot change; Reload returns
// the names of those that differ from what the process started with
// (restartSettings lists them), so every reload names them until the file
// agrees with what runs again. It fails, and
// changes nothing, when the new snapshot cannot be built (an upstream_ca
// file that cannot be read).
func (p *Proxy) Reload(cfg *config.Config) (needsRestart []string, err error) {
	old := p.state.Load()
	snap, err := p.buildSnapshot(cfg, old)
	if err != nil {
		p.ReloadFailed()
		return nil, fmt.Errorf("reload: %w", err)
	}
	// The breakers take the new keys and the snapshot goes in force under
	// one hold of keysMu, so a host learned meanwhile is synced from either
	// the old configuration before both or the new one after both.
	p.keysMu.Lock()
	p.syncBreakers(snap)
	p.state.Store(snap)
	p.keysMu.Unlock()
	if snap.transport != old.transport {
		// Requests still using the old transport keep their connections;
		// idle ones would never be used again.
		old.transport.Retire()
		p.logParents(cfg)
	}
	p.metrics.reloads.WithLabelValues("ok").Inc()
	p.warmLeaves(cfg)
	for _, s := range restartSettings() {
		if s.changed(p.fixed.atStart, cfg.Sidecar) {
			needsRestart = append(needsRestart, s.key)
		}
	}
	return needsRestart, nil
}

// ReloadFailed counts a refused reload (the old configuration stays).
func (p *Proxy) ReloadFailed() { p.metrics.reloads.WithLabelValues("error").Inc() }

// restartSetting is a [sidecar] setting copied once at start.
type restartSetting struct {
	key     string
	changed func(old, new config.Sidecar) bool
}

// restartSettings lists every [sidecar] setting a reload cannot apply, with
// the place it is copied at start:
//   - listen, admin_listen: the listeners, opened by main (the admin
//     listener's Host rule follows the address it bound, in Serve);
//   - ca_cert, ca_key: the interception CA, loaded by buildCA;
//   - stale_dir, stale_max_bytes, stale_max_object_bytes: the stale cache,
//     opened by buildFallback, which also bounds the coalesced bodies' spools
//     by the two sizes;
//   - idle_timeout: the client-facing servers (Serve, Handler, mitm.go),
//     through p.fixed;
//   - max_connections: the proxy listener's limit, set up in Serve
//     through p.fixed;
//   - log_level, log_format: the process logger, built by main;
//   - shared_state, shared_state_prefix, shared_state_password: the fleet
//     connection, made by startShared.
//
// Every other setting is read from the snapshot each request takes
// (reloadableSettings); TestReloadEverySidecarKeyIsAccountedFor fails for a
// key that is in neither list.
func restartSettings() []restartSetting {
	return []restartSetting{
		{"listen", func(o, n config.Sidecar) bool { return o.Listen != n.Listen }},
		{"admin_listen", func(o, n config.Sidecar) bool { return o.AdminListen != n.AdminListen }},
		{"ca_cert", func(o, n config.Sidecar) bool { return o.CACert != n.CACert }},
		{"ca_key", func(o, n config.Sidecar) bool { return o.CAKey != n.CAKey }},
		{"stale_dir", func(o, n config.Sidecar) bool { return o.StaleDir != n.StaleDir }},
		{"stale_max_bytes", func(o, n config.Sidecar) bool { return o.StaleMaxBytes != n.StaleMaxBytes }},
		{"stale_max_object_bytes", func(o, n config.Sidecar) bool { return o.StaleMaxObjectBytes != n.StaleMaxObjectBytes }},
		{"idle_timeout", func(o, n config.Sidecar) bool { return o.IdleTimeout != n.IdleTimeout }},
		{"max_connections", func(o, n config.Sidecar) bool { return o.MaxConnections != n.MaxConnections }},
		{"procs", func(o, n config.Sidecar) bool { return o.Procs != n.Procs }},
		{"log_level", func(o, n config.Sidecar) bool { return o.LogLevel != n.LogLevel }},
		{"log_format", func(o, n config.Sidecar) bool { return o.LogFormat != n.LogFormat }},
		{"shared_state", func(o, n config.Sidecar) bool { return o.SharedState != n.SharedState }},
		{"shared_state_prefix", func(o, n config.Sidecar) bool { return o.SharedStatePrefix != n.SharedStatePrefix }},
		{"shared_state_password", func(o, n config.Sidecar) bool { return o.SharedStatePassword != n.SharedStatePassword }},
	}
}
