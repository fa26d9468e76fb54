package breakerstate

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the breaker collectors of docs/behaviour.md §7. They are registered once,
// in New; Reconfigure only adds and deletes label children.
type metrics struct {
	state       *prometheus.GaugeVec
	rejections  *prometheus.CounterVec
	transitions *prometheus.CounterVec
}

// newMetrics creates and registers the collectors on reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, errors.New("breakerstate: Options.Registerer is required")
	}
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nora_circuit_breaker_state",
			Help: "Circuit breaker state per breaker key: 0 closed, 1 open, 2 half_open.",
		}, []string{"registry"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_circuit_breaker_rejections_total",
			Help: "Requests rejected by a breaker that was open or half-open with its probe taken.",
		}, []string{"registry"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_circuit_breaker_transitions_total",
			Help: "Breaker state changes, by breaker key and from/to state.",
		}, []string{"registry", "from", "to"}),
	}
	for _, c := range []prometheus.Collector{m.state, m.rejections, m.transitions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("breakerstate: register metrics: %w", err)
		}
	}
	return m, nil
}

// bound are one breaker's pre-bound label children, so that the request path
// never builds label values or looks up a child. A nil field means the series
// does not exist (yet): the state gauge is nil while the set is disabled, and
// transition counters are bound on first use because transitions are rare and
// most of the six from/to pairs never happen for most keys.
type bound struct {
	state       prometheus.Gauge
	rejections  prometheus.Counter
	transitions [numStates][numStates]prometheus.Counter
}

// bind creates the series of an enabled breaker: its state gauge, set to the
// current state (0 for a new key, as docs/behaviour.md §7 asks), and its rejection counter.
func (m *metrics) bind(key string, st State) bound {
	g := m.state.WithLabelValues(key)
	g.Set(float64(st))
	return bound{state: g, rejections: m.rejections.WithLabelValues(key)}
}

// transition counts one state change, binding the child on first use.
func (m *metrics) transition(b *bound, key string, from, to State) {
	c := b.transitions[from][to]
	if c == nil {
		c = m.transitions.WithLabelValues(key, from.String(), to.String())
		b.transitions[from][to] = c
	}
	c.Inc()
}

// unbindState removes a key's state gauge, used when the set is disabled: a
// disabled breaker has no state worth alerting on.
func (m *metrics) unbindState(key string) {
	m.state.DeleteLabelValues(key)
}

// forget removes every series of a key that left the configuration.
func (m *metrics) forget(key string) {
	m.state.DeleteLabelValues(key)
	m.rejections.DeleteLabelValues(key)
	m.transitions.DeletePartialMatch(prometheus.Labels{"registry": key})
}
