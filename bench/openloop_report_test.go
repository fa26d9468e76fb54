package main

import (
	"testing"
)

// TestOLRows: each ratio is the median CPU of its row over that of the row
// it is compared with, judged against its target; a ratio whose comparison
// did not run (squid under --no-peers) is left out, not reported as 0 or ∞.
func TestOLRows(t *testing.T) {
	m := newOLMeasures()
	set := func(rate int, name string, vs ...float64) {
		for _, v := range vs {
			m.cpu.add(olKey(rate, name), v)
		}
	}
	set(500, olPlain, 300e-6, 340e-6, 900e-6) // median 340 µs
	set(500, olSquid, 400e-6)
	set(500, olMini, 300e-6)
	set(500, olRefusal, 200e-6)
	set(500, olBare, 190e-6)
	set(2000, olPlain, 100e-6)
	set(2000, olMini, 200e-6)
	set(2000, olRefusal, 300e-6)
	set(2000, olBare, 100e-6)
	rows := olRows([]int{500, 2000}, m)
	type want struct {
		section, target, figure string
		value                   float64
		met                     string
	}
	wants := []want{
		{"open loop 500 req/s (1 KiB, 32 conns)", olPlain, "CPU per request ÷ squid's", 0.85, "yes"},
		{"open loop 500 req/s (1 KiB, 32 conns)", olPlain, "CPU per request ÷ minimal Go proxy's", 340.0 / 300, "**no**"},
		{"open loop 500 req/s (1 KiB, 32 conns)", olRefusal, "CPU per request ÷ bare Go server's 200", 200.0 / 190, "yes"},
		{"open loop 2000 req/s (1 KiB, 32 conns)", olPlain, "CPU per request ÷ minimal Go proxy's", 0.5, "yes"},
		{"open loop 2000 req/s (1 KiB, 32 conns)", olRefusal, "CPU per request ÷ bare Go server's 200", 3, "**no**"},
	}
	if len(rows) != len(wants) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(wants), rows)
	}
	for i, w := range wants {
		r := rows[i]
		if r.section != w.section || r.target != w.target || r.figure != w.figure || r.met != w.met ||
			r.unit != unitRatio || r.value < w.value*0.999 || r.value > w.value*1.001 {
			t.Errorf("row %d = %+v, want %+v", i, r, w)
		}
	}
}
