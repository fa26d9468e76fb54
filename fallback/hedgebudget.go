package fallback

import (
	"sync"
	"sync/atomic"
)

// The hedging budget (docs/behaviour.md §5.10), after Envoy's retry budget:
// at most a share of the requests waiting on a host may be hedged at once,
// plus a small minimum, so that a general slowdown, in which hedges win
// nothing, never doubles the load on the candidates. A request whose host
// has answered nothing since it was sent is hedged whatever the budget: a
// host that answers no one is no slow host but a dead one, and its hedges
// are the failovers its requests would make anyway, only sooner.
const (
	hedgeShare = 0.2
	hedgeMin   = 3
)

// hedgeBudget holds each host key's load. It is safe for concurrent use.
type hedgeBudget struct {
	keys sync.Map // breaker key → *hostLoad
}

// hostLoad is one host key's requests waiting in a race (hedgeable) and
// its hedges in flight.
type hostLoad struct {
	waiting, hedges atomic.Int64
}

func (b *hedgeBudget) of(key string) *hostLoad {
	if v, ok := b.keys.Load(key); ok {
		return v.(*hostLoad)
	}
	v, _ := b.keys.LoadOrStore(key, &hostLoad{})
	return v.(*hostLoad)
}

// take counts one more hedge in flight if the budget allows it, or if
// silent says the host has answered nothing since the request was sent.
func (l *hostLoad) take(silent bool) bool {
	for {
		n := l.hedges.Load()
		limit := max(hedgeMin, int64(hedgeShare*float64(l.waiting.Load())))
		if !silent && n >= limit {
			return false
		}
		if l.hedges.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// give ends one hedge in flight.
func (l *hostLoad) give() { l.hedges.Add(-1) }
