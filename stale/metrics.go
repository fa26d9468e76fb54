package stale

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the cache's Prometheus series; see docs/behaviour.md §7.
type metrics struct {
	bytes       prometheus.Gauge
	objects     prometheus.Gauge
	writeErrors *prometheus.CounterVec
	evictions   prometheus.Counter
}

// newMetrics creates the cache's series and registers them on reg; a nil reg
// leaves them unregistered (handy for tools and tests that do not scrape).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nora_sidecar_stale_cache_bytes",
			Help: "Bytes the stale cache takes on disk: allocated blocks of its bodies, metadata and directories, and the writes in flight.",
		}),
		objects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nora_sidecar_stale_cache_objects",
			Help: "Entries held by the stale cache.",
		}),
		writeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_stale_cache_write_errors_total",
			Help: "Stale cache writes or commits that failed, by cause: no_space, not_writable, digest_mismatch, other.",
		}, []string{"cause"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nora_sidecar_stale_cache_evictions_total",
			Help: "Stale cache entries removed to stay under stale_max_bytes.",
		}),
	}
	for _, cause := range writeCauses() {
		m.writeErrors.WithLabelValues(cause)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.bytes, m.objects, m.writeErrors, m.evictions} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m, nil
}
