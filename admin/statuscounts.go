package admin

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// pageCounts are the since-start counters the status page shows, read from
// the proxy's private registry so the page and /metrics can never disagree.
// Every label value in them comes from the configuration (breaker keys,
// formats) or a fixed vocabulary (results), never from request data.
type pageCounts struct {
	// results maps format → result → requests (nora_sidecar_requests_total).
	results map[string]map[string]uint64
	// staleServed maps the addressed breaker key → stale copies served.
	staleServed map[string]uint64
	// staleSince maps an addressed breaker key served only from stale
	// since its last fresh answer → the Unix time of the first stale answer
	// (nora_sidecar_stale_serving_since_timestamp_seconds), and staleAge →
	// the age in seconds of the last copy served for it.
	staleSince, staleAge map[string]float64
	// coalesced maps format → requests that joined an identical request's
	// fetch (nora_sidecar_coalesced_total).
	coalesced map[string]uint64
	// fallbacks are the from → to pairs that served at least once, busiest first.
	fallbacks []fallbackCount
}

// fallbackCount is one from → to pair of nora_sidecar_fallback_total.
type fallbackCount struct {
	From, To string
	N        uint64
}

// gatherCounts reads the counters the page needs. A registry that cannot be
// gathered leaves them empty: the page still shows the breakers. The labels
// of other families are never read.
func gatherCounts(g prometheus.Gatherer) pageCounts {
	c := pageCounts{results: map[string]map[string]uint64{}, staleServed: map[string]uint64{},
		staleSince: map[string]float64{}, staleAge: map[string]float64{}, coalesced: map[string]uint64{}}
	fams, _ := g.Gather()
	for _, f := range fams {
		switch f.GetName() {
		case "nora_sidecar_requests_total":
			for _, m := range f.GetMetric() {
				format := metricLabel(m, "format")
				if c.results[format] == nil {
					c.results[format] = map[string]uint64{}
				}
				c.results[format][metricLabel(m, "result")] += counterCount(m)
			}
		case "nora_sidecar_stale_served_total":
			for _, m := range f.GetMetric() {
				c.staleServed[metricLabel(m, "registry")] += counterCount(m)
			}
		case "nora_sidecar_coalesced_total":
			for _, m := range f.GetMetric() {
				c.coalesced[metricLabel(m, "format")] += counterCount(m)
			}
		case "nora_sidecar_stale_serving_since_timestamp_seconds":
			for _, m := range f.GetMetric() {
				c.staleSince[metricLabel(m, "registry")] = m.GetGauge().GetValue()
			}
		case "nora_sidecar_stale_last_served_age_seconds":
			for _, m := range f.GetMetric() {
				c.staleAge[metricLabel(m, "registry")] = m.GetGauge().GetValue()
			}
		case "nora_sidecar_fallback_total":
			for _, m := range f.GetMetric() {
				if n := counterCount(m); n > 0 {
					c.fallbacks = append(c.fallbacks,
						fallbackCount{From: metricLabel(m, "from"), To: metricLabel(m, "to"), N: n})
				}
			}
		}
	}
	sort.SliceStable(c.fallbacks, func(i, j int) bool { return c.fallbacks[i].N > c.fallbacks[j].N })
	return c
}

// metricLabel is the value of m's label name, "" when it has none.
func metricLabel(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// counterCount is m's counter value as a count.
func counterCount(m *dto.Metric) uint64 { return uint64(m.GetCounter().GetValue()) }

// total adds up every result of one format.
func (c pageCounts) total(format string) uint64 {
	var n uint64
	for _, v := range c.results[format] {
		n += v
	}
	return n
}
