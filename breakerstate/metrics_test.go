package breakerstate

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// series gathers reg into "name{l1=v1,l2=v2}" -> value. Reading through
// Gather (not WithLabelValues) matters: it must not create the series it
// checks for.
func series(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

func TestGaugeInitialisedForEveryKeyWhenEnabled(t *testing.T) {
	h := newHarness(t, true, keySettings("a", 1, 0), keySettings("b", 1, 0))
	got := series(t, h.reg)
	for _, k := range []string{"a", "b"} {
		v, ok := got["nora_circuit_breaker_state{registry="+k+"}"]
		if !ok || v != 0 {
			t.Errorf("state gauge for %s = %v (present %v), want 0", k, v, ok)
		}
	}
	if n := testutil.CollectAndCount(h.metrics.state); n != 2 {
		t.Fatalf("%d state series, want 2", n)
	}
}

func TestNoGaugeWhenDisabled(t *testing.T) {
	h := newHarness(t, false, keySettings("a", 1, 0))
	h.fail(t, "a", 3)
	if n := testutil.CollectAndCount(h.metrics.state); n != 0 {
		t.Fatalf("%d state series while disabled, want 0", n)
	}
	if n := testutil.CollectAndCount(h.metrics.transitions); n != 0 {
		t.Fatalf("%d transition series while disabled, want 0", n)
	}
}

func TestStateTransitionAndRejectionMetrics(t *testing.T) {
	const key = "docker:https://registry-1.docker.io"
	h := newHarness(t, true, keySettings(key, 2, 10*time.Second))
	gauge := func() float64 { return series(t, h.reg)["nora_circuit_breaker_state{registry="+key+"}"] }
	trans := func(from, to string) float64 {
		return series(t, h.reg)["nora_circuit_breaker_transitions_total{from="+from+",registry="+key+",to="+to+"}"]
	}

	h.openBreaker(t, key)
	if g := gauge(); g != 1 {
		t.Fatalf("gauge after opening = %v, want 1", g)
	}
	h.rejected(t, key)
	h.rejected(t, key)
	if r := series(t, h.reg)["nora_circuit_breaker_rejections_total{registry="+key+"}"]; r != 2 {
		t.Fatalf("rejections = %v, want 2", r)
	}
	h.clock.Advance(10 * time.Second)
	probe := h.admit(t, key)
	if g := gauge(); g != 2 {
		t.Fatalf("gauge half-open = %v, want 2", g)
	}
	probe.Done(Failure)
	h.clock.Advance(10 * time.Second)
	h.admit(t, key).Done(Alive)
	if g := gauge(); g != 0 {
		t.Fatalf("gauge after probe alive = %v, want 0", g)
	}
	for _, c := range []struct {
		from, to string
		want     float64
	}{
		{"closed", "open", 1}, {"open", "half_open", 2}, {"half_open", "open", 1}, {"half_open", "closed", 1},
	} {
		if got := trans(c.from, c.to); got != c.want {
			t.Errorf("transitions %s->%s = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(h.metrics.transitions); n != 4 {
		t.Errorf("%d transition series, want 4 (only pairs that happened)", n)
	}
}
