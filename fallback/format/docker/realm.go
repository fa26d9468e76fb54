package docker

import (
	"net/url"
	"sync"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// realms remembers, for each docker upstream, the breaker key of the host
// its registry names as token realm (learned from the Bearer challenges of
// its 401 answers). While that host's breaker refuses, the upstream counts
// as refused too: its clients could not get a token, so its requests go to
// the next registry (docs/behaviour.md §3.1).
type realms struct {
	byUpstream sync.Map // upstream key → realm host key
}

// learn records the realm named by a docker upstream's 401, when the realm's
// host belongs to a configured upstream (routes names its breaker).
func (rs *realms) learn(u *config.Upstream, challengeRealm string, routes format.Routes) {
	if routes == nil {
		return
	}
	ru, err := url.Parse(challengeRealm)
	if err != nil {
		return
	}
	if k := routes.KeyOf(ru); k != "" && k != u.Key {
		rs.byUpstream.Store(u.Key, k)
	}
}

// of returns the realm host key learned for u, or "".
func (rs *realms) of(u *config.Upstream) string {
	if v, ok := rs.byUpstream.Load(u.Key); ok {
		return v.(string)
	}
	return ""
}
