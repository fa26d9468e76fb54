package breakerstate

import (
	"testing"
	"time"
)

// Closed: all requests pass.
func TestClosedAllRequestsPass(t *testing.T) {
	h := newHarness(t, true)
	for i := range 100 {
		tk := h.admit(t, testKey)
		if tk.Probe() {
			t.Fatalf("request %d admitted as probe while closed", i)
		}
		tk.Done(Success)
	}
	if s := h.snap(t, testKey); s.State != Closed || s.Rejections != 0 {
		t.Fatalf("snapshot = %+v, want closed with no rejections", s)
	}
}

// A failure adds one to the count and stamps last_failure.
func TestClosedFailureCountsAndStamps(t *testing.T) {
	h := newHarness(t, true)
	if s := h.snap(t, testKey); !s.LastFailure.IsZero() {
		t.Fatalf("LastFailure before any failure = %v, want zero", s.LastFailure)
	}
	for i := 1; i <= 2; i++ {
		h.clock.Advance(time.Second)
		h.fail(t, testKey, 1)
		s := h.snap(t, testKey)
		if s.FailureCount != i || !s.LastFailure.Equal(h.clock.Now()) || s.State != Closed {
			t.Fatalf("after %d failures: %+v (now %v)", i, s, h.clock.Now())
		}
	}
}

// At count ≥ threshold(key) → Open.
func TestClosedOpensAtThreshold(t *testing.T) {
	for _, threshold := range []int{1, 2, 5} {
		h := newHarness(t, true, keySettings(testKey, threshold, 30*time.Second))
		h.fail(t, testKey, threshold-1)
		if st := h.snap(t, testKey).State; st != Closed {
			t.Fatalf("threshold %d: state after %d failures = %v, want closed", threshold, threshold-1, st)
		}
		h.fail(t, testKey, 1)
		if st := h.snap(t, testKey).State; st != Open {
			t.Fatalf("threshold %d: state after %d failures = %v, want open", threshold, threshold, st)
		}
		trs := h.rec.all()
		if len(trs) != 1 || trs[0].From != Closed || trs[0].To != Open || trs[0].FailureCount != threshold ||
			trs[0].Key != testKey || !trs[0].At.Equal(h.clock.Now()) {
			t.Fatalf("threshold %d: transitions = %+v", threshold, trs)
		}
	}
}

// A success resets the count.
func TestClosedSuccessResetsCount(t *testing.T) {
	h := newHarness(t, true) // threshold 3
	h.fail(t, testKey, 2)
	h.admit(t, testKey).Done(Success)
	if n := h.snap(t, testKey).FailureCount; n != 0 {
		t.Fatalf("count after success = %d, want 0", n)
	}
	h.fail(t, testKey, 2)
	if st := h.snap(t, testKey).State; st != Closed {
		t.Fatalf("state = %v: failures before the success were not forgotten", st)
	}
}

// An alive answer (any 4xx) changes nothing (and neither does a neutral one).
func TestClosedAliveAndNeutralChangeNothing(t *testing.T) {
	for _, o := range []Outcome{Alive, Neutral} {
		t.Run(o.String(), func(t *testing.T) {
			h := newHarness(t, true) // threshold 3
			h.fail(t, testKey, 2)
			before := h.snap(t, testKey)
			h.clock.Advance(time.Second)
			h.admit(t, testKey).Done(o)
			if after := h.snap(t, testKey); after != before {
				t.Fatalf("snapshot changed: %+v -> %+v", before, after)
			}
			h.fail(t, testKey, 1)
			if st := h.snap(t, testKey).State; st != Open {
				t.Fatalf("third failure after %v: state %v, want open (count must survive)", o, st)
			}
		})
	}
}

// Open: every request is rejected (counted as a rejection) until
// reset_timeout(key) has passed since last_failure.
func TestOpenRejectsUntilResetTimeout(t *testing.T) {
	h := newHarness(t, true)
	h.openBreaker(t, testKey)
	for range 3 {
		h.rejected(t, testKey)
	}
	h.clock.Advance(30*time.Second - time.Nanosecond)
	h.rejected(t, testKey)
	if n := h.snap(t, testKey).Rejections; n != 4 {
		t.Fatalf("rejections = %d, want 4", n)
	}
}

// Then the next request turns it HalfOpen and is the single probe.
func TestOpenNextRequestAfterTimeoutIsProbe(t *testing.T) {
	h := newHarness(t, true)
	h.openBreaker(t, testKey)
	h.clock.Advance(30 * time.Second)
	tk := h.admit(t, testKey)
	if !tk.Probe() {
		t.Fatal("request after reset_timeout is not the probe")
	}
	if st := h.snap(t, testKey).State; st != HalfOpen {
		t.Fatalf("state = %v, want half_open", st)
	}
	if trs := h.rec.all(); trs[len(trs)-1].From != Open || trs[len(trs)-1].To != HalfOpen {
		t.Fatalf("last transition = %+v, want open -> half_open", trs[len(trs)-1])
	}
}

// A zero reset_timeout probes at once, but still one probe at a time.
func TestZeroResetTimeoutStillSingleProbe(t *testing.T) {
	h := newHarness(t, true, keySettings(testKey, 1, 0))
	h.openBreaker(t, testKey)
	if !h.admit(t, testKey).Probe() {
		t.Fatal("want immediate probe")
	}
	h.rejected(t, testKey)
}

// HalfOpen: only the probe passes; others are rejected.
func TestHalfOpenOnlyProbePasses(t *testing.T) {
	h := newHarness(t, true)
	h.probe(t, testKey)
	for range 5 {
		h.clock.Advance(time.Second)
		h.rejected(t, testKey)
	}
	if n := h.snap(t, testKey).Rejections; n != 5 {
		t.Fatalf("rejections = %d, want 5", n)
	}
}

// Probe success or alive → Closed, count 0.
func TestProbeSuccessOrAliveCloses(t *testing.T) {
	for _, o := range []Outcome{Success, Alive} {
		t.Run(o.String(), func(t *testing.T) {
			h := newHarness(t, true)
			h.probe(t, testKey).Done(o)
			s := h.snap(t, testKey)
			if s.State != Closed || s.FailureCount != 0 || s.RetryAfter != 0 {
				t.Fatalf("after probe %v: %+v, want closed, count 0", o, s)
			}
			if tk := h.admit(t, testKey); tk.Probe() {
				t.Fatal("closed breaker admitted a probe")
			}
		})
	}
}

// Probe failure → Open, last_failure = now.
func TestProbeFailureReopens(t *testing.T) {
	h := newHarness(t, true)
	tk := h.probe(t, testKey)
	h.clock.Advance(7 * time.Second)
	tk.Done(Failure)
	s := h.snap(t, testKey)
	if s.State != Open || !s.LastFailure.Equal(h.clock.Now()) || s.RetryAfter != 30*time.Second {
		t.Fatalf("after probe failure: %+v (now %v)", s, h.clock.Now())
	}
	h.clock.Advance(30*time.Second - time.Nanosecond)
	h.rejected(t, testKey)
	h.clock.Advance(time.Nanosecond)
	if !h.admit(t, testKey).Probe() {
		t.Fatal("no new probe reset_timeout after the probe failed")
	}
}

// A probe outstanding longer than reset_timeout is lost: the next request
// becomes a fresh probe, and the lost probe's late report is ignored (a
// generation token fences it).
func TestLostProbeIsReplacedAndFenced(t *testing.T) {
	for _, late := range []Outcome{Success, Alive, Failure, Neutral} {
		t.Run("late "+late.String(), func(t *testing.T) {
			h := newHarness(t, true)
			lost := h.probe(t, testKey)
			h.clock.Advance(30 * time.Second) // exactly reset_timeout: not lost yet
			h.rejected(t, testKey)
			h.clock.Advance(time.Nanosecond)
			fresh := h.admit(t, testKey)
			if !fresh.Probe() {
				t.Fatal("request after a lost probe is not a fresh probe")
			}
			h.rejected(t, testKey) // the fresh probe holds the slot
			before := h.snap(t, testKey)
			lost.Done(late)
			if after := h.snap(t, testKey); after != before {
				t.Fatalf("late %v report of the lost probe changed state: %+v -> %+v", late, before, after)
			}
			h.rejected(t, testKey) // slot still held by the fresh probe
			fresh.Done(Success)
			if st := h.snap(t, testKey).State; st != Closed {
				t.Fatalf("fresh probe success: state %v, want closed", st)
			}
		})
	}
}

// A probe whose client went away before any answer releases the slot.
func TestNeutralProbeReleasesSlot(t *testing.T) {
	h := newHarness(t, true)
	first := h.probe(t, testKey)
	first.Done(Neutral)
	if st := h.snap(t, testKey).State; st != HalfOpen {
		t.Fatalf("state after neutral probe = %v, want half_open", st)
	}
	next := h.admit(t, testKey)
	if !next.Probe() {
		t.Fatal("request after a neutral probe is not the probe")
	}
	h.rejected(t, testKey)
	first.Done(Success) // a second report of the released probe is fenced
	if st := h.snap(t, testKey).State; st != HalfOpen {
		t.Fatalf("released probe's second report changed state to %v", st)
	}
	next.Done(Failure)
	if st := h.snap(t, testKey).State; st != Open {
		t.Fatalf("state = %v, want open", st)
	}
}

// Reports from requests admitted while Closed keep NORA's meaning: a success
// closes and resets.
func TestClosedAdmittedSuccessClosesOpenBreaker(t *testing.T) {
	h := newHarness(t, true)
	slow := h.admit(t, testKey) // admitted while closed, answers late
	h.openBreaker(t, testKey)
	slow.Done(Success)
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 0 {
		t.Fatalf("after closed-admitted success: %+v, want closed, count 0", s)
	}
	if trs := h.rec.all(); trs[len(trs)-1].From != Open || trs[len(trs)-1].To != Closed {
		t.Fatalf("last transition = %+v, want open -> closed", trs[len(trs)-1])
	}
}

// The same holds while HalfOpen, and the then-outstanding probe is fenced.
func TestClosedAdmittedSuccessClosesHalfOpenAndFencesProbe(t *testing.T) {
	h := newHarness(t, true)
	slow := h.admit(t, testKey)
	probe := h.probe(t, testKey)
	slow.Done(Success)
	probe.Done(Failure)
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 0 {
		t.Fatalf("%+v: want closed, count 0 (probe report fenced)", s)
	}
}

// A failure (of a request admitted while Closed) while Open refreshes
// last_failure, which pushes the probe time out.
func TestClosedAdmittedFailureWhileOpenRefreshesLastFailure(t *testing.T) {
	h := newHarness(t, true)
	slow := h.admit(t, testKey)
	h.openBreaker(t, testKey)
	h.clock.Advance(20 * time.Second)
	slow.Done(Failure)
	s := h.snap(t, testKey)
	if s.State != Open || !s.LastFailure.Equal(h.clock.Now()) || s.FailureCount != 4 {
		t.Fatalf("%+v: want open, last_failure now, count 4", s)
	}
	h.clock.Advance(10 * time.Second) // 30s after opening, 10s after the refresh
	h.rejected(t, testKey)
	h.clock.Advance(20 * time.Second)
	if !h.admit(t, testKey).Probe() {
		t.Fatal("no probe reset_timeout after the refreshed last_failure")
	}
}

// A failure of a Closed-admitted request while HalfOpen only counts: the
// probe decides.
func TestClosedAdmittedFailureWhileHalfOpenOnlyCounts(t *testing.T) {
	h := newHarness(t, true)
	slow := h.admit(t, testKey)
	probe := h.probe(t, testKey)
	slow.Done(Failure)
	if s := h.snap(t, testKey); s.State != HalfOpen || s.FailureCount != 4 {
		t.Fatalf("%+v: want half_open, count 4", s)
	}
	probe.Done(Success)
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 0 {
		t.Fatalf("%+v: probe success must still close", s)
	}
}

func TestZeroTicketDoneIsNoop(t *testing.T) {
	var tk Ticket
	if tk.Probe() {
		t.Fatal("zero ticket is a probe")
	}
	for _, o := range []Outcome{Success, Failure, Alive, Neutral} {
		tk.Done(o) // must not panic
	}
}

// TestRefusingTakesNothing: Refusing says what Allow would answer without
// counting a refusal or taking the probe.
func TestRefusingTakesNothing(t *testing.T) {
	h := newHarness(t, true, keySettings("k", 1, 10*time.Second))
	if h.Refusing("k") || h.Refusing("unknown") {
		t.Fatal("a closed or unknown key is refusing")
	}
	h.fail(t, "k", 1)
	if !h.Refusing("k") {
		t.Fatal("an open key whose probe is not due is not refusing")
	}
	h.clock.Advance(10 * time.Second)
	if h.Refusing("k") {
		t.Fatal("a key whose probe is due is refusing")
	}
	if probe := h.probe(t, "k"); !probe.Probe() { // the probe is still there to take
		t.Fatal("Refusing took the probe")
	}
	if !h.Refusing("k") {
		t.Fatal("half-open with its probe out is not refusing")
	}
	if s := h.snap(t, "k"); s.Rejections != 0 {
		t.Fatalf("Refusing counted %d rejections", s.Rejections)
	}
}
