package proxy

import (
	"fmt"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/sharedstate"
)

// startShared connects the breakers to the fleet's shared state when
// [sidecar] shared_state is set. It never waits for Redis: a proxy whose
// Redis is down at start serves requests alone until it answers.
func (p *Proxy) startShared(cfg *config.Config, snap *snapshot) error {
	sc := cfg.Sidecar
	if sc.SharedState == "" {
		return nil
	}
	c, err := sharedstate.New(sharedstate.Options{
		URL: sc.SharedState, Password: sc.SharedStatePassword, Prefix: sc.SharedStatePrefix,
		// The same roots as upstream TLS: upstream_ca covers an internal
		// Redis's CA as well as an internal registry's.
		RootCAs:  snap.transport.RootCAs(),
		Breakers: p.breakers, Now: p.now, Registerer: p.deps.Registry, Logger: p.log,
	})
	if err != nil {
		return fmt.Errorf("shared state %s: %w", sc.SharedStateDisplay(), err)
	}
	p.shared = c
	p.log.Info().Str("shared_state", sc.SharedStateDisplay()).Str("prefix", sc.SharedStatePrefix).
		Str("pod", c.Pod()).Msg("sharing breaker state with the fleet")
	return nil
}

// sharedStatus is /health's shared_state: "off" when not configured, else
// "up" while Redis is reachable and subscribed, "down" while working alone.
func (p *Proxy) sharedStatus() string {
	if p.shared == nil {
		return "off"
	}
	return p.shared.Status()
}

// closeShared stops sharing; the breakers keep working alone.
func (p *Proxy) closeShared() error {
	if p.shared == nil {
		return nil
	}
	return p.shared.Close()
}
