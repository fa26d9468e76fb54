package fallback

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A stale 200 hides an outage until the copies run out, so the loop says,
// per addressed breaker key, how old the copies it serves are and since when
// it has served nothing but copies (docs/behaviour.md §6, §7): a run of
// stale answers starts with the first stale answer after a fresh one (or
// since start) and ends with the next fresh answer, from the addressed
// upstream or a candidate.

// staleAgeBuckets span a copy's age from a minute to a month.
func staleAgeBuckets() []float64 {
	return []float64{60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400}
}

// staleWatch holds the runs of stale answers and their series. Safe for
// concurrent use.
type staleWatch struct {
	ages    *prometheus.HistogramVec
	lastAge *prometheus.GaugeVec
	since   *prometheus.GaugeVec

	// mu guards runs and keeps each key's two gauges in step with it: a
	// gauge exists exactly while its key has a run.
	mu   sync.RWMutex
	runs map[string]time.Time // key → the first stale answer of its run
}

func newStaleWatch(reg prometheus.Registerer) (*staleWatch, error) {
	w := &staleWatch{
		ages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nora_sidecar_stale_served_age_seconds",
			Help:    "Age of the stale copies served, by addressed breaker key.",
			Buckets: staleAgeBuckets(),
		}, []string{"registry"}),
		lastAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nora_sidecar_stale_last_served_age_seconds",
			Help: "Age of the last stale copy served for an addressed breaker key, while no fresh answer came since.",
		}, []string{"registry"}),
		since: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nora_sidecar_stale_serving_since_timestamp_seconds",
			Help: "Unix time of the first stale copy served for an addressed breaker key since its last fresh answer; absent when its last answer was fresh.",
		}, []string{"registry"}),
		runs: map[string]time.Time{},
	}
	for _, m := range []prometheus.Collector{w.ages, w.lastAge, w.since} {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("register stale serving metrics: %w", err)
		}
	}
	return w, nil
}

// served records a stale copy stored at storedAt, served for key at now.
func (w *staleWatch) served(key string, now, storedAt time.Time) {
	age := max(now.Sub(storedAt), 0).Seconds()
	w.ages.WithLabelValues(key).Observe(age)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastAge.WithLabelValues(key).Set(age)
	if _, ok := w.runs[key]; !ok {
		w.runs[key] = now
		w.since.WithLabelValues(key).Set(float64(now.Unix()))
	}
}

// fresh ends key's run of stale answers, if it has one. It is called for
// every fresh answer, so the common case (no run) takes only a read lock.
func (w *staleWatch) fresh(key string) {
	w.mu.RLock()
	_, ok := w.runs[key]
	w.mu.RUnlock()
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.runs[key]; ok {
		delete(w.runs, key)
		w.since.DeleteLabelValues(key)
		w.lastAge.DeleteLabelValues(key)
	}
}

// forget drops key's run and every series of it, for a key that left the
// breaker set.
func (w *staleWatch) forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.runs, key)
	w.since.DeleteLabelValues(key)
	w.lastAge.DeleteLabelValues(key)
	w.ages.DeleteLabelValues(key)
}
