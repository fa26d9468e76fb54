// Package throttle remembers which upstream hosts answered 429 and until
// when, so that their GET and HEAD requests go elsewhere meanwhile
// (docs/behaviour.md §5.6): no breaker state, no probe, no failure count,
// only a time until which a host is left alone.
package throttle

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/internal/monotime"
)

// maxWait caps how long one 429 can keep a host throttled: a registry that
// asks for a day gets an hour, after which it is asked again.
const maxWait = time.Hour

// Table holds the throttled hosts by breaker key. The request path reads it
// without a lock; marking a host is rare and may take one.
type Table struct {
	// now is the wall clock the callers compute their marks with; it is
	// read only to turn a mark into a duration at once. Expiry itself is
	// measured on mono, so stepping the wall clock moves no throttle
	// (docs/behaviour.md §5.6).
	now  func() time.Time
	mono monotime.Clock
	// until maps a breaker key to the mono reading (nanoseconds) until
	// which it is throttled; an entry at or below the current reading is
	// not throttled. Entries are created on first use and never removed,
	// so the request path only ever loads.
	until sync.Map // string → *atomic.Int64
	// keys are the keys the gauge reports even while not throttled.
	keys  atomic.Pointer[[]string]
	gauge *prometheus.Desc
}

// New builds a Table that reports nora_upstream_throttled{registry} on reg
// for keys (more can be named later with SetKeys). now is the clock both
// for the marks' times and, through monotime.Of, for their expiry: with
// time.Now the expiry follows Go's monotonic clock.
func New(now func() time.Time, keys []string, reg prometheus.Registerer) (*Table, error) {
	return newTable(now, monotime.Of(now), keys, reg)
}

// newTable is New with the expiry clock given apart, so a test can step
// the wall clock alone.
func newTable(now func() time.Time, mono monotime.Clock, keys []string, reg prometheus.Registerer) (*Table, error) {
	t := &Table{now: now, mono: mono, gauge: prometheus.NewDesc("nora_upstream_throttled",
		"1 while the host behind this breaker key is skipped after answering 429, else 0.",
		[]string{"registry"}, nil)}
	t.SetKeys(keys)
	if err := reg.Register(t); err != nil {
		return nil, fmt.Errorf("register throttle metric: %w", err)
	}
	return t, nil
}

// SetKeys replaces the keys the gauge reports (after a reload).
func (t *Table) SetKeys(keys []string) {
	cp := append([]string(nil), keys...)
	t.keys.Store(&cp)
}

// Mark throttles key until until, a time of the Table's clock; a later
// mark never shortens an earlier one. until is turned into a duration at
// once (until minus now, which with time.Now is measured monotonically)
// and the deadline kept on the monotonic clock.
func (t *Table) Mark(key string, until time.Time) {
	deadline := int64(t.mono() + until.Sub(t.now()))
	// A fresh slot holds the lowest reading there is, so that it throttles
	// nothing even against a test clock stepped below its origin.
	fresh := new(atomic.Int64)
	fresh.Store(math.MinInt64)
	v, _ := t.until.LoadOrStore(key, fresh)
	slot := v.(*atomic.Int64)
	for {
		cur := slot.Load()
		if cur >= deadline || slot.CompareAndSwap(cur, deadline) {
			return
		}
	}
}

// Left returns how long key stays throttled; 0 when it is not.
func (t *Table) Left(key string) time.Duration {
	v, ok := t.until.Load(key)
	if !ok {
		return 0
	}
	return max(time.Duration(v.(*atomic.Int64).Load())-t.mono(), 0)
}

// Describe and Collect make the Table its own gauge, computed from the
// clock when scraped, so no timer has to flip it back to 0.
func (t *Table) Describe(ch chan<- *prometheus.Desc) { ch <- t.gauge }

// Collect reports every configured key, 1 while throttled.
func (t *Table) Collect(ch chan<- prometheus.Metric) {
	for _, k := range *t.keys.Load() {
		v := 0.0
		if t.Left(k) > 0 {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(t.gauge, prometheus.GaugeValue, v, k)
	}
}

// Wait is how long a 429 answer asks the client to wait: its Retry-After in
// seconds or as an HTTP date, capped at maxWait; def when it has none (or
// one that cannot be read or lies in the past).
func Wait(h http.Header, now time.Time, def time.Duration) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return min(def, maxWait)
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return min(def, maxWait)
		}
		if secs >= int64(maxWait/time.Second) {
			return maxWait
		}
		return time.Duration(secs) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return min(at.Sub(now), maxWait)
	}
	return min(def, maxWait)
}
