package proxy

import (
	"net/url"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// routeOf classifies u under snap: the configured table first, then the
// hosts learned from redirects, which are alias hosts of the upstream that
// redirected to them (docs/behaviour.md §3, §3.2).
func (p *Proxy) routeOf(snap *snapshot, u *url.URL) route {
	if r := snap.table.Classify(u); r.Classified() {
		return r
	}
	host, port := hostPort(u)
	return p.learnedRoute(snap, host, port)
}

// hostRouteOf is routeOf for a CONNECT, where only host and port are seen.
func (p *Proxy) hostRouteOf(snap *snapshot, host, port string) route {
	if r := snap.table.HostUpstream(host, port); r.Classified() {
		return r
	}
	return p.learnedRoute(snap, host, port)
}

func (p *Proxy) learnedRoute(snap *snapshot, host, port string) route {
	h, ok := p.learned.lookup(host, port)
	if !ok {
		return route{}
	}
	up := snap.table.byKey[h.upstream]
	if up == nil {
		return route{} // the upstream left the configuration
	}
	return route{Upstream: up, Alias: true, Key: h.key()}
}

// onRedirect learns the host a classified upstream redirected to; a new
// host gets its breaker.
func (p *Proxy) onRedirect(upstreamKey string, target *url.URL) {
	if p.learned.learn(upstreamKey, target) {
		p.keysMu.Lock()
		defer p.keysMu.Unlock()
		p.syncBreakers(p.state.Load())
	}
}

// syncBreakers gives the breaker set (and the throttle gauge) every key of
// snap's configuration plus one per learned host. Callers hold keysMu, and
// snap is the snapshot in force under it (or, in Reload, the one stored
// before keysMu is released): since a reload stores its snapshot under
// keysMu too, no sync can reconfigure the set from a configuration that a
// reload has already replaced.
func (p *Proxy) syncBreakers(snap *snapshot) {
	keys := p.allKeySettings(snap)
	p.breakers.Reconfigure(snap.cfg.CircuitBreaker.Enabled, keys)
	p.throttles.SetKeys(keyNames(keys))
}

// allKeySettings is keySettings of snap's configuration plus the learned
// hosts' keys, whose settings are looked up like any alias host's.
func (p *Proxy) allKeySettings(snap *snapshot) []breakerstate.KeySettings {
	keys := keySettings(snap.cfg)
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k.Key] = true
	}
	for _, h := range p.learned.current() {
		u := snap.table.byKey[h.upstream]
		if u == nil || seen[h.key()] {
			continue
		}
		seen[h.key()] = true
		keys = append(keys, keySetting(h.key(), u.Format, snap.cfg.HostThresholds(h.key(), u)))
	}
	return keys
}
