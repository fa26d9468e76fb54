package fallback

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// series returns the value of name{registry=key} in reg (a histogram's
// sample count and sum), and whether the series exists.
func series(t *testing.T, reg *prometheus.Registry, name, key string) (value float64, count uint64, ok bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelOf(m, "registry") != key {
				continue
			}
			switch {
			case m.GetHistogram() != nil:
				return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), 0, true
			}
		}
	}
	return 0, 0, false
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestStaleServingIsMeasured: an operator can tell how old the stale copies
// served for an addressed key are and since when nothing fresh was served
// for it (issue 21.7): each stale answer's age goes into a histogram and
// the last one's into a gauge; the time of the first stale answer since
// the last fresh one stays in a gauge until a fresh answer ends the run,
// which removes both gauges.
func TestStaleServingIsMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLoopRig(t, false, 0)
		keptCopy("the kept copy")(t, r)
		key := r.a.Key
		const (
			ages  = "nora_sidecar_stale_served_age_seconds"
			last  = "nora_sidecar_stale_last_served_age_seconds"
			since = "nora_sidecar_stale_serving_since_timestamp_seconds"
		)
		if _, _, ok := series(t, r.reg, since, key); ok {
			t.Fatal("serving stale before any stale answer")
		}
		down := func() {
			r.up["A"].Script(testkit.Status(502, ""))
			r.up["B"].Script(testkit.Status(500, ""))
			r.up["C"].Script(testkit.Status(500, ""))
			if res, _, _ := r.serve(t, http.MethodGet); res.Kind != answer.Stale {
				t.Fatalf("everything down: %s, want the stale copy", res.Kind)
			}
		}
		time.Sleep(time.Hour)
		start := time.Now()
		down()
		time.Sleep(10 * time.Minute)
		down()
		sum, n, _ := series(t, r.reg, ages, key)
		if n != 2 || sum != (time.Hour+time.Hour+10*time.Minute).Seconds() {
			t.Errorf("%s: %d answers summing %vs, want 2 summing 7800s", ages, n, sum)
		}
		if v, _, ok := series(t, r.reg, last, key); !ok || v != (70*time.Minute).Seconds() {
			t.Errorf("%s = %v (%v), want 4200", last, v, ok)
		}
		if v, _, ok := series(t, r.reg, since, key); !ok || v != float64(start.Unix()) {
			t.Errorf("%s = %v (%v), want the first stale answer's time %d", since, v, ok, start.Unix())
		}
		// B answers: a fresh answer ends the run.
		r.up["A"].Script(testkit.Status(502, ""))
		r.up["B"].Script(testkit.Status(200, "from B"))
		if res, _, _ := r.serve(t, http.MethodGet); res.Kind != answer.Fallback {
			t.Fatalf("B healthy: %s", res.Kind)
		}
		for _, name := range []string{since, last} {
			if _, _, ok := series(t, r.reg, name, key); ok {
				t.Errorf("%s still there after a fresh answer", name)
			}
		}
		// The next outage starts a new run.
		time.Sleep(time.Minute)
		again := time.Now()
		down()
		if v, _, _ := series(t, r.reg, since, key); v != float64(again.Unix()) {
			t.Errorf("%s = %v after a fresh answer, want the new run's start %d", since, v, again.Unix())
		}
	})
}
