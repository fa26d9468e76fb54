package proxy

import (
	"net/url"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
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
		p.syncBreakers(p.state.Load().cfg)
	}
}

// syncBreakers gives the breaker set (and the throttle gauge) every key of
// cfg plus one per learned host.
func (p *Proxy) syncBreakers(cfg *config.Config) {
	p.keysMu.Lock()
	defer p.keysMu.Unlock()
	keys := p.allKeySettings(cfg)
	p.breakers.Reconfigure(cfg.CircuitBreaker.Enabled, keys)
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Key
	}
	p.throttles.SetKeys(names)
}

// allKeySettings is keySettings(cfg) plus the learned hosts' keys, whose
// settings are looked up like any alias host's.
func (p *Proxy) allKeySettings(cfg *config.Config) []breakerstate.KeySettings {
	keys := keySettings(cfg)
	if p.learned == nil {
		return keys
	}
	byKey := map[string]*config.Upstream{}
	for _, u := range cfg.Upstreams {
		if _, ok := byKey[u.Key]; !ok {
			byKey[u.Key] = u
		}
	}
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k.Key] = true
	}
	for _, h := range p.learned.current() {
		u := byKey[h.upstream]
		if u == nil || seen[h.key()] {
			continue
		}
		seen[h.key()] = true
		th := cfg.HostThresholds(h.key(), u)
		keys = append(keys, breakerstate.KeySettings{Key: h.key(), Format: u.Format,
			FailureThreshold: th.FailureThreshold, ResetTimeout: th.ResetTimeout,
			ThresholdSource: th.FailureThresholdFrom, ResetTimeoutSource: th.ResetTimeoutFrom})
	}
	return keys
}
