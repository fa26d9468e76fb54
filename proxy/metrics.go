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
	// handshakes counts intercepted TLS handshakes by whether they resumed
	// a session (docs/behaviour.md §5.2).
	handshakes *prometheus.CounterVec
	reloads    *prometheus.CounterVec
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
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_mitm_handshakes_total",
			Help: "TLS handshakes of intercepted connections, by whether the client resumed a session (resumed=true) or paid a full handshake.",
		}, []string{"resumed"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_config_reloads_total",
			Help: "Configuration reloads by result (ok, error).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.leaves, m.handshakes, m.reloads,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	m.handshakes.WithLabelValues("true")
	m.handshakes.WithLabelValues("false")
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
