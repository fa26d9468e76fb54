package proxy

import "github.com/nora-breaker/nora-breaker/config"

// logParents says, once at start and after a reload, which parent proxies
// the upstream traffic goes through (docs/behaviour.md §5.8): each by its
// breaker key, which carries no credential, with whether it is sent any.
func (p *Proxy) logParents(cfg *config.Config) {
	for _, pp := range cfg.Parents() {
		var direct []string
		var through int
		for _, u := range cfg.Upstreams {
			switch {
			case u.Parent == nil:
				direct = append(direct, u.Key)
			case u.Parent.Key() == pp.Key():
				through++
			}
		}
		p.log.Info().Str("parent", pp.Key()).Bool("credentials", pp.User != "" || pp.Password != "").
			Bool("parent_proxy", cfg.Parent != nil && cfg.Parent.Key() == pp.Key()).Int("upstreams", through).
			Strs("direct", direct).Strs("parent_no_proxy", cfg.Sidecar.ParentNoProxy).
			Msg("upstream traffic goes through a parent proxy")
	}
}
