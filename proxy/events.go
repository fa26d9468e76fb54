package proxy

import (
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// logTransition logs a breaker transition: warn when an upstream is cut off,
// info when it is probed or comes back (SPEC §9).
func (p *Proxy) logTransition(t breakerstate.Transition) {
	lvl := zerolog.InfoLevel
	if t.To == breakerstate.Open {
		lvl = zerolog.WarnLevel
	}
	p.log.WithLevel(lvl).Str("key", t.Key).Str("from", t.From.String()).Str("to", t.To.String()).
		Int("failure_count", t.FailureCount).Bool("remote", t.Remote).Bool("manual", t.Manual).
		Msg("circuit breaker transition")
}
