package breakerstate

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// newSet builds an enabled set over one key on clock, drawing jitter from
// rnd (nil: the key's own generator).
func newSet(t testing.TB, clock *testkit.Clock, rnd func() float64, k KeySettings) *Set {
	t.Helper()
	s, err := New(Options{Enabled: true, Keys: []KeySettings{k}, Now: clock.Now, Rand: rnd,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sequence returns the values in turn, then the last one forever; safe for
// concurrent use.
func sequence(vals ...float64) func() float64 {
	var mu sync.Mutex
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		v := vals[0]
		if len(vals) > 1 {
			vals = vals[1:]
		}
		return v
	}
}

func snapOf(t testing.TB, s *Set) Snapshot {
	t.Helper()
	return s.Snapshot()[0]
}

// Each failed probe doubles the open time up to reset_timeout_max; the
// probe's success (or any close) starts the next outage from reset_timeout.
func TestOpenTimeDoublesPerFailedProbeAndResets(t *testing.T) {
	clock := testkit.NewClock()
	s := newSet(t, clock, nil, growing(testKey, 1, 30*time.Second, 100*time.Second))
	s.admitOrFail(t).Done(Failure)
	for i, want := range []time.Duration{30, 60, 100, 100} {
		want *= time.Second
		sn := snapOf(t, s)
		if sn.State != Open || sn.OpenTime != want || sn.FailedProbes != i || sn.RetryAfter != want {
			t.Fatalf("period %d: %+v, want open for %v after %d failed probes", i, sn, want, i)
		}
		clock.Advance(want - time.Millisecond)
		if _, err := s.Allow(testKey); err == nil {
			t.Fatalf("period %d: admitted before its %v were over", i, want)
		}
		clock.Advance(time.Millisecond)
		probe := s.admitOrFail(t)
		if !probe.Probe() {
			t.Fatalf("period %d: not the probe", i)
		}
		probe.Done(Failure)
	}
	clock.Advance(100 * time.Second)
	s.admitOrFail(t).Done(Success)
	if sn := snapOf(t, s); sn.State != Closed || sn.FailedProbes != 0 || sn.OpenTime != 30*time.Second {
		t.Fatalf("after the probe's success: %+v, want closed, open time back to 30s", sn)
	}
	s.admitOrFail(t).Done(Failure)
	if sn := snapOf(t, s); sn.OpenTime != 30*time.Second || sn.RetryAfter != 30*time.Second {
		t.Fatalf("the next outage: %+v, want 30s", sn)
	}
}

// A maximum below reset_timeout (the zero value) keeps the open time fixed.
func TestOpenTimeFixedByDefault(t *testing.T) {
	clock := testkit.NewClock()
	s := newSet(t, clock, nil, keySettings(testKey, 1, 30*time.Second))
	s.admitOrFail(t).Done(Failure)
	for range 5 {
		clock.Advance(30 * time.Second)
		s.admitOrFail(t).Done(Failure)
	}
	if sn := snapOf(t, s); sn.OpenTime != 30*time.Second || sn.FailedProbes != 5 || sn.ResetTimeoutMax != 30*time.Second {
		t.Fatalf("%+v, want a fixed 30s after 5 failed probes", sn)
	}
}

// outageProbes runs a simulated outage of length d: one request a second,
// every probe failing at once. It returns when each probe went, from the
// opening.
func outageProbes(t *testing.T, k KeySettings, rnd func() float64, d time.Duration) []time.Duration {
	t.Helper()
	clock := testkit.NewClock()
	s := newSet(t, clock, rnd, k)
	start := clock.Now()
	s.admitOrFail(t).Done(Failure)
	var probes []time.Duration
	for clock.Now().Sub(start) < d {
		clock.Advance(time.Second)
		tk, err := s.Allow(testKey)
		if err != nil {
			continue
		}
		if !tk.Probe() {
			t.Fatal("an open breaker admitted a request that is not its probe")
		}
		probes = append(probes, clock.Now().Sub(start))
		tk.Done(Failure)
	}
	return probes
}

// A 30-minute outage with reset_timeout 30s: the fixed schedule probes 60
// times; with reset_timeout_max = 8 x reset_timeout the open time doubles
// to 240s and the outage costs 9 probes, at 30, 90, 210, 450 and then every
// 240s.
func TestThirtyMinuteOutageProbes(t *testing.T) {
	const reset, outage = 30 * time.Second, 30 * time.Minute
	fixed := outageProbes(t, keySettings(testKey, 1, reset), nil, outage)
	grown := outageProbes(t, growing(testKey, 1, reset, 8*reset), nil, outage)
	var want []time.Duration
	for at, period := time.Duration(0), reset; ; period = min(2*period, 8*reset) {
		if at += period; at > outage {
			break
		}
		want = append(want, at)
	}
	if len(fixed) != 60 {
		t.Fatalf("fixed schedule: %d probes, want 60", len(fixed))
	}
	if !equalDurations(grown, want) {
		t.Fatalf("growing open time: probes at %v, want %v", grown, want)
	}
	t.Logf("30-minute outage: %d probes with a fixed 30s, %d growing to 240s (%v)", len(fixed), len(grown), grown)

	// With the default jitter each period lies within ±10% of its open time.
	jittered := outageProbes(t, withJitter(growing(testKey, 1, reset, 8*reset), 0.1), nil, outage)
	prev, period := time.Duration(0), reset
	for i, at := range jittered {
		gap := at - prev
		// The clock moves in whole seconds: a probe comes at most 1s late.
		if lo, hi := time.Duration(float64(period)*0.9), time.Duration(float64(period)*1.1)+time.Second; gap < lo || gap > hi {
			t.Fatalf("jittered probe %d came %v after the last, want within [%v, %v]", i, gap, lo, hi)
		}
		prev, period = at, min(2*period, 8*reset)
	}
	if n := len(jittered); n < len(want)-1 || n > len(want)+1 {
		t.Fatalf("jittered: %d probes, want %d ± 1", n, len(want))
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func withJitter(k KeySettings, j float64) KeySettings {
	k.Jitter = j
	return k
}

// The jitter moves each open period and each Retry-After by the drawn share
// of ±jitter: a draw of 0 gives the shortest, 0.5 none, just below 1 the
// longest. The snapshot shows the time left itself.
func TestJitterMovesPeriodAndRetryAfter(t *testing.T) {
	const reset, j = 30 * time.Second, 0.1
	moved := func(d time.Duration, draw float64) time.Duration {
		return d + time.Duration(float64(d)*j*(2*draw-1))
	}
	for _, c := range []struct {
		draw   float64
		period time.Duration
	}{{0, 27 * time.Second}, {0.5, 30 * time.Second}, {0.999, 32994 * time.Millisecond}} {
		clock := testkit.NewClock()
		s := newSet(t, clock, sequence(c.draw), withJitter(keySettings(testKey, 1, reset), j))
		s.admitOrFail(t).Done(Failure)
		due := s.Statuses()[0].OpenUntil
		if got := due.Sub(clock.Now()); got != c.period {
			t.Errorf("draw %v: period %v, want %v", c.draw, got, c.period)
		}
		clock.Advance(10 * time.Second)
		left := due.Sub(clock.Now())
		if _, ra, _ := s.RetryAfter(testKey); ra != ceilSeconds(moved(left, c.draw)) {
			t.Errorf("draw %v: Retry-After %v with %v left, want %v", c.draw, ra, left, ceilSeconds(moved(left, c.draw)))
		}
		if sn := snapOf(t, s); sn.RetryAfter != ceilSeconds(left) || sn.OpenTime != c.period {
			t.Errorf("draw %v: snapshot %+v, want %v left of %v", c.draw, sn, ceilSeconds(left), c.period)
		}
	}
	// Forced open: reset_timeout, jittered the same way.
	clock := testkit.NewClock()
	s := newSet(t, clock, sequence(0), withJitter(keySettings(testKey, 1, reset), j))
	if err := s.Force(testKey, ModeOpen); err != nil {
		t.Fatal(err)
	}
	if _, ra, _ := s.RetryAfter(testKey); ra != 27*time.Second {
		t.Errorf("forced open: Retry-After %v, want 27s", ra)
	}
}

// A hundred processes that open at the same instant with the default
// jitter (10%) and their own generators do not all probe within one second
// of each other: their probes spread over about ±3s of reset_timeout.
func TestJitterSpreadsAHundredProcessesProbes(t *testing.T) {
	clock := testkit.NewClock()
	opened := clock.Now()
	var first, last time.Duration = math.MaxInt64, 0
	seen := map[time.Duration]bool{}
	for range 100 {
		s := newSet(t, clock, nil, withJitter(keySettings(testKey, 1, 30*time.Second), 0.1))
		s.admitOrFail(t).Done(Failure)
		at := s.Statuses()[0].OpenUntil.Sub(opened)
		if at < 27*time.Second || at > 33*time.Second {
			t.Fatalf("a probe due after %v, want within 30s ± 10%%", at)
		}
		first, last = min(first, at), max(last, at)
		seen[at] = true
	}
	t.Logf("100 processes' probes fall due from %v to %v after the opening (%d distinct times)", first, last, len(seen))
	if last-first <= time.Second {
		t.Fatalf("all 100 probes within %v of each other, want them spread over more than a second", last-first)
	}
	if len(seen) < 90 {
		t.Fatalf("only %d distinct probe times among 100 processes: generators not independent", len(seen))
	}
}

// Every time the set keeps is a reading of its clock, so with time.Now
// each carries Go's monotonic reading (printed as "m=") and open periods
// ignore wall-clock steps; a remote open included, which before came as a
// wall-clock open_until (issue 21, point 5).
func TestStoredTimesCarryTheMonotonicReading(t *testing.T) {
	s, err := New(Options{Enabled: true, Keys: []KeySettings{keySettings("a", 1, time.Minute), keySettings("b", 1, time.Minute)},
		Now: time.Now, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tk, err := s.Allow("a")
	if err != nil {
		t.Fatal(err)
	}
	tk.Done(Failure)
	if _, err := s.ApplyRemoteOpen("b", 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	for _, st := range s.Statuses() {
		if !strings.Contains(st.OpenUntil.String(), " m=") {
			t.Errorf("%s: open until %v carries no monotonic reading", st.Key, st.OpenUntil)
		}
	}
	if lf := s.Snapshot()[0].LastFailure; !strings.Contains(lf.String(), " m=") {
		t.Errorf("last failure %v carries no monotonic reading", lf)
	}
}

// A reload that changes the open time of a key in the middle of an open
// period applies it to that period, counted from its start.
func TestReconfigureAppliesNewOpenTimeToThePeriod(t *testing.T) {
	clock := testkit.NewClock()
	s := newSet(t, clock, nil, growing(testKey, 1, 30*time.Second, 120*time.Second))
	s.admitOrFail(t).Done(Failure)
	clock.Advance(30 * time.Second)
	s.admitOrFail(t).Done(Failure) // failed probe: 60s
	clock.Advance(10 * time.Second)
	s.Reconfigure(true, []KeySettings{growing(testKey, 1, 10*time.Second, 120*time.Second)})
	if sn := snapOf(t, s); sn.OpenTime != 20*time.Second || sn.RetryAfter != 10*time.Second || sn.FailedProbes != 1 {
		t.Fatalf("after the reload: %+v, want the period 2 x 10s, 10s left", sn)
	}
}

// admitOrFail is Allow that fails the test on a refusal.
func (s *Set) admitOrFail(t testing.TB) Ticket {
	t.Helper()
	tk, err := s.Allow(testKey)
	if err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return tk
}

// The key's own generator is used only under its lock: many goroutines
// opening, probing, asking for Retry-After and applying the fleet's opens
// on a jittered key at once (run with -race). Afterwards the open period
// and the Retry-After stay within reset_timeout_max and the jitter. (While
// the clock races ahead, a Retry-After may be worked out from a reading
// taken just before another goroutine pushed the probe out, so the bound
// is checked once the clock stands still.)
func TestJitterUnderConcurrency(t *testing.T) {
	clock := testkit.NewClock()
	s := newSet(t, clock, nil, withJitter(growing(testKey, 2, 10*time.Second, 80*time.Second), 0.5))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				switch (g + i) % 4 {
				case 0:
					if tk, err := s.Allow(testKey); err == nil {
						tk.Done(Failure)
					}
				case 1:
					_, _, _ = s.RetryAfter(testKey)
				case 2:
					_, _ = s.ApplyRemoteOpen(testKey, 15*time.Second, 1)
				default:
					clock.Advance(time.Second)
					_ = s.Snapshot()
				}
			}
		})
	}
	wg.Wait()
	if sn := snapOf(t, s); sn.OpenTime > 120*time.Second || sn.RetryAfter > 120*time.Second {
		t.Fatalf("%+v: open period beyond reset_timeout_max + jitter (120s)", sn)
	}
	_ = s.Force(testKey, ModeOpen) // a known state: forced open, Retry-After reset_timeout ± 50%
	for range 100 {
		if _, ra, _ := s.RetryAfter(testKey); ra < 5*time.Second || ra > 15*time.Second {
			t.Fatalf("forced open: Retry-After %v, want 10s ± 50%%", ra)
		}
	}
}
