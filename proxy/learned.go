package proxy

import (
	"net/url"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// onRedirect learns the host a classified upstream redirected to. A new
// host gets its breaker (and hosts that left lose theirs) through the
// breaker set's narrow Adjust: the request that saw the redirect never
// rebuilds the set.
func (p *Proxy) onRedirect(upstreamKey string, target *url.URL) {
	if p.learned.Learn(upstreamKey, target) {
		p.keysMu.Lock()
		defer p.keysMu.Unlock()
		p.syncLearned(p.state.Load())
	}
}

// syncLearned brings the learned hosts' breakers in line with the learned
// set: keys of hosts learned since are added, keys of hosts that expired or
// were evicted are dropped, and the configured keys are left alone.
// Callers hold keysMu.
func (p *Proxy) syncLearned(snap *snapshot) {
	want := p.learnedKeySettings(snap, configuredKeys(snap))
	var add []breakerstate.KeySettings
	next := make(map[string]bool, len(want))
	for _, k := range want {
		next[k.Key] = true
		if !p.learnedKeys[k.Key] {
			add = append(add, k)
		}
	}
	var remove []string
	for k := range p.learnedKeys {
		if !next[k] {
			remove = append(remove, k)
		}
	}
	if len(add) == 0 && len(remove) == 0 {
		return
	}
	p.breakers.Adjust(add, remove)
	p.learnedKeys = next
	p.throttles.SetKeys(p.breakers.Keys())
	p.forgetKeys(remove)
}

// syncBreakers gives the breaker set (and the throttle gauge) every key of
// snap's configuration plus one per learned host: a reload. Callers hold
// keysMu, and snap is the snapshot in force under it (or, in Reload, the
// one stored before keysMu is released): since a reload stores its
// snapshot under keysMu too, no sync can reconfigure the set from a
// configuration that a reload has already replaced.
func (p *Proxy) syncBreakers(snap *snapshot) {
	keys := keySettings(snap.cfg)
	learned := p.learnedKeySettings(snap, configuredKeys(snap))
	p.learnedKeys = make(map[string]bool, len(learned))
	for _, k := range learned {
		p.learnedKeys[k.Key] = true
	}
	keys = append(keys, learned...)
	before := p.breakers.Keys()
	p.breakers.Reconfigure(snap.cfg.CircuitBreaker.Enabled, keys)
	names := keyNames(keys)
	p.throttles.SetKeys(names)
	kept := make(map[string]bool, len(names))
	for _, k := range names {
		kept[k] = true
	}
	var gone []string
	for _, k := range before {
		if !kept[k] {
			gone = append(gone, k)
		}
	}
	p.forgetKeys(gone)
}

// forgetKeys drops what the attempts and the chain keep by key for keys
// that left the breaker set; the breaker set forgets its own series.
func (p *Proxy) forgetKeys(keys []string) {
	if len(keys) == 0 {
		return
	}
	p.sender.Forget(keys...)
	p.chain.Forget(keys...)
}

// configuredKeys is the set of snap's configured breaker keys.
func configuredKeys(snap *snapshot) map[string]bool {
	keys := keySettings(snap.cfg)
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		seen[k.Key] = true
	}
	return seen
}

// learnedKeySettings are the learned hosts' keys that configured does not
// already have, with settings looked up like any alias host's.
func (p *Proxy) learnedKeySettings(snap *snapshot, configured map[string]bool) []breakerstate.KeySettings {
	var out []breakerstate.KeySettings
	seen := map[string]bool{}
	for _, h := range p.learned.Current() {
		u := snap.routes.Table().ByKey(h.Upstream)
		if u == nil || configured[h.Key()] || seen[h.Key()] {
			continue
		}
		seen[h.Key()] = true
		out = append(out, keySetting(h.Key(), u.Format, snap.cfg.HostThresholds(h.Key(), u)))
	}
	return out
}
