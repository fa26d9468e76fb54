package main

import (
	"testing"
	"time"
)

func TestSplitFleet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hole := func(ms int) fleetAnswer { return fleetAnswer{sent: at(ms), took: time.Second, reached: true} }
	refused := func(ms int) fleetAnswer { return fleetAnswer{sent: at(ms), took: time.Millisecond} }
	// Threshold 3, a request every 100 ms: the third failure is back at
	// 1200 ms, so requests sent up to then (and within the 50 ms grace) were
	// in flight; the probes come later.
	var answers []fleetAnswer
	for ms := 0; ms <= 1200; ms += 100 {
		answers = append(answers, hole(ms))
	}
	answers = append(answers, refused(1300), refused(2000), hole(3100), refused(3200), hole(6000), refused(9000))
	got := splitFleet(answers, 3, 50*time.Millisecond, 1800*time.Millisecond, time.Second)
	// Window 1200 → 9000 ms: periods end at the earliest at 3000, 5800, 8600.
	want := fleetSplit{reached: 15, inFlight: 10, probes: 2, periods: 3}
	if got != want {
		t.Fatalf("split = %+v, want %+v", got, want)
	}
	if b := got.bound(3); b != 16 {
		t.Fatalf("bound %d, want 3 + 10 + 3", b)
	}
	// Never learned: no period, the bound is the threshold.
	if got := splitFleet([]fleetAnswer{hole(0), refused(500)}, 3, 0, time.Second, time.Second); got.inFlight != 0 ||
		got.periods != 0 || got.bound(3) != 3 {
		t.Fatalf("unlearned split = %+v", got)
	}
}
