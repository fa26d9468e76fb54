package coalesce

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	coalesced *prometheus.CounterVec
}

// newMetrics makes the group's series and registers them on reg (nil: none).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nora_sidecar_coalesced_total",
		Help: "Requests answered by joining an identical request's fetch already in flight, by format.",
	}, []string{"format"})}
	if reg != nil {
		if err := reg.Register(m.coalesced); err != nil {
			return nil, fmt.Errorf("register coalesce metrics: %w", err)
		}
	}
	return m, nil
}
