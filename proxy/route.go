package proxy

import (
	"net/url"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// onRedirect learns the host a classified upstream redirected to; a new
// host gets its breaker.
func (p *Proxy) onRedirect(upstreamKey string, target *url.URL) {
	if p.learned.Learn(upstreamKey, target) {
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
	for _, h := range p.learned.Current() {
		u := snap.routes.Table().ByKey(h.Upstream)
		if u == nil || seen[h.Key()] {
			continue
		}
		seen[h.Key()] = true
		keys = append(keys, keySetting(h.Key(), u.Format, snap.cfg.HostThresholds(h.Key(), u)))
	}
	return keys
}
