package main

import "testing"

// TestInterceptionRows: the ratio rows divide by the direct new TLS
// connection and carry the relative targets; the difference row is named
// for what it contains, and the leaf has a row of its own.
func TestInterceptionRows(t *testing.T) {
	p50 := series{"direct": {0.001}, "new": {0.0025}, "repeat": {0.0012},
		"direct resumed": {0.0008}, "repeat resumed": {0.0011}}
	rows := interceptionRows("interception", p50, 0.00015)
	find := func(target, figure string) row {
		t.Helper()
		for _, r := range rows {
			if r.target == target && r.figure == figure {
				return r
			}
		}
		t.Fatalf("no row %q / %q in %+v", target, figure, rows)
		return row{}
	}
	near := func(a, b float64) bool { return a > b*0.999 && a < b*1.001 }
	if r := find("nora-breaker new host", "p50 ÷ direct new TLS connection"); !near(r.value, 2.5) || r.met != "**no**" || r.goal != "≤ 2×" {
		t.Errorf("new host ratio row = %+v", r)
	}
	if r := find("nora-breaker repeat host", "p50 ÷ direct new TLS connection"); !near(r.value, 1.2) || r.met != "yes" || r.goal != "≤ 1.3×" {
		t.Errorf("repeat host ratio row = %+v", r)
	}
	if r := find("nora-breaker", "new − repeat host (upstream TLS + HTTP/2 connection, leaf)"); !near(r.value, 0.0013) {
		t.Errorf("difference row = %+v", r)
	}
	if r := find("nora-breaker repeat host, session resumed", "p50 ÷ direct, session resumed"); !near(r.value, 1.375) || r.goal != "" {
		t.Errorf("resumed ratio row = %+v", r)
	}
	if r := find("nora-breaker repeat host, session resumed", "p50 ÷ direct new TLS connection"); !near(r.value, 1.1) {
		t.Errorf("resumed over a new direct connection row = %+v", r)
	}
	if r := find("certs package, in the harness", "leaf signing alone (p50)"); r.value != 0.00015 {
		t.Errorf("leaf row = %+v", r)
	}
}
