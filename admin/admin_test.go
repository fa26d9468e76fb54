package admin

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		name       string
		states     [][2]string // format, state
		enabled    bool
		status, cb string
		worst      map[string]string
	}{
		{"all closed", [][2]string{{"npm", "closed"}, {"pypi", "closed"}}, true, "healthy", "enabled",
			map[string]string{"npm": "closed", "pypi": "closed"}},
		{"worst per format", [][2]string{{"npm", "closed"}, {"npm", "half_open"}, {"npm", "open"}, {"npm", "closed"},
			{"pypi", "half_open"}, {"cargo", "closed"}}, true, "degraded", "enabled",
			map[string]string{"npm": "open", "pypi": "half_open", "cargo": "closed"}},
		{"disabled", [][2]string{{"npm", "disabled"}, {"pypi", "disabled"}}, false, "healthy", "disabled",
			map[string]string{"npm": "disabled", "pypi": "disabled"}},
		{"no breakers", nil, true, "healthy", "enabled", map[string]string{}},
	} {
		var views []breakerView
		for _, s := range c.states {
			views = append(views, breakerView{Key: s[0] + fmt.Sprint(len(views)), Format: s[0], State: s[1]})
		}
		got := summarize(views, c.enabled)
		if got.status != c.status || got.circuitBreaker != c.cb || fmt.Sprint(got.worst) != fmt.Sprint(c.worst) {
			t.Errorf("%s: %+v, want %s %s %v", c.name, got, c.status, c.cb, c.worst)
		}
	}
}

func TestTransitionLogKeepsTheNewestInOrder(t *testing.T) {
	var l History
	if got := l.list(); len(got) != 0 {
		t.Fatalf("zero value holds %d entries", len(got))
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range historySize + 50 {
		l.add(historyEntry{At: t0.Add(time.Duration(i) * time.Second), Key: fmt.Sprint(i)})
	}
	got := l.list()
	if len(got) != historySize {
		t.Fatalf("%d entries, want %d", len(got), historySize)
	}
	if got[0].Key != fmt.Sprint(historySize+49) || got[historySize-1].Key != "50" {
		t.Fatalf("newest %s, oldest %s; want %d and 50", got[0].Key, got[historySize-1].Key, historySize+49)
	}
	// Transitions that reached the hook out of order are shown by time.
	l.add(historyEntry{At: t0.Add(time.Hour), Key: "late-but-newer"})
	l.add(historyEntry{At: t0.Add(time.Hour - time.Second), Key: "earlier"})
	if got := l.list(); got[0].Key != "late-but-newer" || got[1].Key != "earlier" {
		t.Fatalf("not ordered by time: %s, %s", got[0].Key, got[1].Key)
	}
}

// TestTransitionLogConcurrent runs writers and readers at once (go test
// -race): every list is a consistent copy of at most historySize entries,
// and each writer's entries stay in its own order.
func TestTransitionLogConcurrent(t *testing.T) {
	var l History
	const writers, each = 16, 500
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := l.list(); len(got) > historySize {
					t.Errorf("list returned %d entries", len(got))
					return
				}
			}
		}()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.add(historyEntry{At: t0.Add(time.Duration(i) * time.Millisecond), Key: fmt.Sprint(w),
					FailureCount: i})
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	got := l.list()
	if len(got) != historySize {
		t.Fatalf("%d entries after %d adds", len(got), writers*each)
	}
	last := map[string]int{}
	for i := len(got) - 1; i >= 0; i-- { // oldest first
		e := got[i]
		if prev, ok := last[e.Key]; ok && e.FailureCount <= prev {
			t.Fatalf("writer %s: entry %d after %d", e.Key, e.FailureCount, prev)
		}
		last[e.Key] = e.FailureCount
	}
}

// breakerRow finds the status page's table row of one key.
func breakerRow(t *testing.T, page, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr class="breaker" data-key="` + regexp.QuoteMeta(key) + `".*?</tr>`).FindString(page)
	if m == "" {
		t.Fatalf("page has no row for %s:\n%s", key, page)
	}
	return m
}

func TestGroupFormatsPerUpstream(t *testing.T) {
	views := []breakerView{
		{Key: "pypi:P", Format: "pypi", State: "closed", Upstream: "pypi:P", Host: "pypi.org"},
		{Key: "cargo", Format: "cargo", State: "closed", Upstream: "cargo"},
		{Key: "pypi:P@files.pythonhosted.org", Format: "pypi", State: "open", Upstream: "pypi:P",
			Host: "files.pythonhosted.org", Throttled: true, ThrottledSeconds: 9},
		{Key: "pypi:Q", Format: "pypi", State: "closed"}, // no upstream given: its own group
	}
	got := groupFormats(views, summarize(views, true).worst,
		pageCounts{staleServed: map[string]uint64{"pypi:P": 4, "pypi:P@files.pythonhosted.org": 3}}, time.Time{})
	if len(got) != 2 || got[0].Name != "pypi" || got[1].Name != "cargo" || got[0].Status != "open" {
		t.Fatalf("formats: %+v", got)
	}
	ups := got[0].Upstreams
	if len(ups) != 2 || ups[0].Key != "pypi:P" || len(ups[0].Hosts) != 2 || ups[1].Key != "pypi:Q" ||
		ups[0].StaleServed != 7 || ups[0].Hosts[1].Host != "files.pythonhosted.org" {
		t.Fatalf("upstreams: %+v", ups)
	}
}

func TestStatusPageRendersThrottledHosts(t *testing.T) {
	views := []breakerView{{Key: "cargo@index.crates.io", Format: "cargo", State: "closed", Upstream: "cargo",
		Host: "index.crates.io", Throttled: true, ThrottledSeconds: 42, Threshold: 5}}
	var b strings.Builder
	if err := statusPageTemplate.Execute(&b, pageView{Status: "healthy",
		Formats: groupFormats(views, summarize(views, true).worst, pageCounts{}, time.Time{})}); err != nil {
		t.Fatal(err)
	}
	row := breakerRow(t, b.String(), "cargo@index.crates.io")
	for _, want := range []string{`data-throttled="true"`, `throttled, <span class="countdown" data-seconds="42">42 s</span> left`,
		"<code>index.crates.io</code>"} {
		if !strings.Contains(row, want) {
			t.Errorf("row lacks %s:\n%s", want, row)
		}
	}
}

// A key served only from stale copies says so on its row: since when (as
// a duration) and how old the last copy was, read back from the gauges the
// loop keeps (issue 21.7); a key whose last answer was fresh says nothing.
func TestStatusPageShowsServingStale(t *testing.T) {
	reg := prometheus.NewRegistry()
	since := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nora_sidecar_stale_serving_since_timestamp_seconds"}, []string{"registry"})
	age := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nora_sidecar_stale_last_served_age_seconds"}, []string{"registry"})
	reg.MustRegister(since, age)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	since.WithLabelValues("npm:a").Set(float64(now.Add(-12*time.Minute - 5*time.Second).Unix()))
	age.WithLabelValues("npm:a").Set((3*time.Hour + 2*time.Minute).Seconds())
	views := []breakerView{{Key: "npm:a", Format: "npm", State: "open", Upstream: "npm:a"},
		{Key: "npm:b", Format: "npm", State: "closed", Upstream: "npm:b"}}
	var b strings.Builder
	if err := statusPageTemplate.Execute(&b, pageView{Status: "degraded",
		Formats: groupFormats(views, summarize(views, true).worst, gatherCounts(reg), now)}); err != nil {
		t.Fatal(err)
	}
	row := breakerRow(t, b.String(), "npm:a")
	for _, want := range []string{"only stale copies for 12m 5s, the last 3h 2m old",
		fmt.Sprintf(`data-stale-since="%d"`, now.Add(-12*time.Minute-5*time.Second).Unix())} {
		if !strings.Contains(row, want) {
			t.Errorf("row lacks %s:\n%s", want, row)
		}
	}
	if row := breakerRow(t, b.String(), "npm:b"); strings.Contains(row, "stale") {
		t.Errorf("a key answered fresh shows stale:\n%s", row)
	}
}

func TestGatherCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	req := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nora_sidecar_requests_total"}, []string{"format", "result"})
	fb := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nora_sidecar_fallback_total"}, []string{"from", "to"})
	st := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nora_sidecar_stale_served_total"}, []string{"registry"})
	reg.MustRegister(req, fb, st)
	req.WithLabelValues("npm", "forwarded").Add(5)
	req.WithLabelValues("npm", "synthesized_503").Add(2)
	fb.WithLabelValues("a", "b").Add(1)
	fb.WithLabelValues("a", "c").Add(3)
	fb.WithLabelValues("b", "c") // never served: not listed
	st.WithLabelValues("npm:x").Add(6)
	c := gatherCounts(reg)
	if c.total("npm") != 7 || c.results["npm"]["synthesized_503"] != 2 || c.staleServed["npm:x"] != 6 {
		t.Fatalf("counts: %+v", c)
	}
	if len(c.fallbacks) != 2 || c.fallbacks[0] != (fallbackCount{"a", "c", 3}) {
		t.Fatalf("fallbacks: %+v", c.fallbacks)
	}
}

func TestFormatAge(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "0s", 42 * time.Second: "42s",
		7*time.Minute + 3*time.Second: "7m 3s", 2*time.Hour + 5*time.Minute: "2h 5m", 76 * time.Hour: "3d 4h"} {
		if got := formatAge(d); got != want {
			t.Errorf("formatAge(%v) = %q, want %q", d, got, want)
		}
	}
}
