package proxy

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nora-breaker/nora-breaker/answer"
)

// metrics are the proxy package's own series. Label values come from the
// configuration and fixed vocabularies, never from request data.
type metrics struct {
	requests *prometheus.CounterVec
	leaves   prometheus.Counter
	reloads  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_requests_total",
			Help: "Proxied requests by format and result (" + resultNames() + ").",
		}, []string{"format", "result"}),
		leaves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nora_sidecar_mitm_leaves_generated_total",
			Help: "Leaf certificates generated for intercepted hosts.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_config_reloads_total",
			Help: "Configuration reloads by result (ok, error).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.leaves, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	return m, nil
}

// resultNames lists every request result for the requests metric's help.
func resultNames() string {
	names := make([]string, 0, len(answer.Results()))
	for _, r := range answer.Results() {
		names = append(names, string(r))
	}
	return strings.Join(names, ", ")
}
