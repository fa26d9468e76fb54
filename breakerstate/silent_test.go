package breakerstate

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSilentAttemptsOpen: failure_threshold silent attempts with no answer
// in between open the breaker before any of them has failed, with a reason
// of their own, and every attempt still waiting is told at once; those
// that registered later and those that left are not called twice.
func TestSilentAttemptsOpen(t *testing.T) {
	h := newHarness(t, true) // threshold 3
	var woken [3]atomic.Int32
	var releases []func()
	for i := range 3 {
		tk := h.admit(t, testKey)
		if st := h.snap(t, testKey).State; st != Closed {
			t.Fatalf("before silent attempt %d: %v, want closed", i+1, st)
		}
		releases = append(releases, tk.Suspect(1, func() { woken[i].Add(1) }))
	}
	if st := h.snap(t, testKey).State; st != Open {
		t.Fatalf("after 3 silent attempts: %v, want open", st)
	}
	for i := range woken {
		if n := woken[i].Load(); n != 1 {
			t.Errorf("attempt %d told %d times of the opening, want once", i+1, n)
		}
	}
	trs := h.rec.all()
	if len(trs) != 1 || !trs[0].Silent || trs[0].Why() != "no headers within suspect_after" {
		t.Fatalf("transitions %+v, want one silent opening", trs)
	}
	if trs[0].OpenTime != 30*time.Second {
		t.Errorf("open time %v, want reset_timeout", trs[0].OpenTime)
	}
	for _, rel := range releases {
		rel() // after the opening: harmless
	}
}

// TestSilentCountRestartsOnAnAnswer: a header answer from the host between
// silent attempts (any answer, a 5xx's too) means the host is no black
// hole: the count starts again, and a slow host that answers in between
// never opens by silence.
func TestSilentCountRestartsOnAnAnswer(t *testing.T) {
	h := newHarness(t, true) // threshold 3
	for round := range 5 {
		for range 2 {
			h.admit(t, testKey).Suspect(1, nil)()
		}
		answering := h.admit(t, testKey)
		answering.Heard()
		answering.Done(Failure) // a 5xx: it answered
		if st := h.snap(t, testKey).State; st != Closed {
			t.Fatalf("round %d: %v, want closed: an answer came between the silent attempts", round, st)
		}
		// The 5xx failures count as failures; keep them below the threshold.
		h.admit(t, testKey).Done(Success)
	}
}

// TestSilentAttemptHandedOnWhenAlreadyOpen: an attempt that turns silent
// after its breaker opened (here by failures) is told at once.
func TestSilentAttemptHandedOnWhenAlreadyOpen(t *testing.T) {
	h := newHarness(t, true)
	waiting := h.admit(t, testKey)
	h.openBreaker(t, testKey)
	told := 0
	release := waiting.Suspect(1, func() { told++ })
	release()
	if told != 1 {
		t.Fatalf("told %d times, want once", told)
	}
}

// TestSilentAttemptToldOfAnyOpening: an attempt silent for fewer than the
// threshold is still told when failures open the breaker; one that has
// stopped waiting (released) is not.
func TestSilentAttemptToldOfAnyOpening(t *testing.T) {
	h := newHarness(t, true)
	var told, gone atomic.Int32
	h.admit(t, testKey).Suspect(1, func() { told.Add(1) })
	h.admit(t, testKey).Suspect(1, func() { gone.Add(1) })()
	h.openBreaker(t, testKey)
	if told.Load() != 1 || gone.Load() != 0 {
		t.Fatalf("waiting attempt told %d times, released one %d; want 1 and 0", told.Load(), gone.Load())
	}
}

// TestSilentNotCounted: the probe, a zero Ticket, a forced-closed breaker
// and a disabled set never open by silence.
func TestSilentNotCounted(t *testing.T) {
	t.Run("probe", func(t *testing.T) {
		h := newHarness(t, true, keySettings(testKey, 1, 30*time.Second))
		p := h.probe(t, testKey)
		p.Suspect(1, nil)()
		if st := h.snap(t, testKey).State; st != HalfOpen {
			t.Fatalf("%v, want half_open: the probe's own verdict decides", st)
		}
	})
	t.Run("zero ticket", func(t *testing.T) {
		Ticket{}.Suspect(1, func() { t.Error("called") })()
		Ticket{}.Heard()
	})
	t.Run("forced closed", func(t *testing.T) {
		h := newHarness(t, true)
		if err := h.Force(testKey, ModeClosed); err != nil {
			t.Fatal(err)
		}
		for range 5 {
			h.admit(t, testKey).Suspect(1, nil)()
		}
		if st := h.snap(t, testKey).State; st != Closed {
			t.Fatalf("%v, want closed", st)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		h := newHarness(t, false)
		for range 5 {
			h.admit(t, testKey).Suspect(1, nil)()
		}
		if st := h.snap(t, testKey).State; st != Closed {
			t.Fatalf("%v, want closed", st)
		}
	})
}

// TestSilentOpeningUnderConcurrency: many attempts turning silent at once
// open the breaker exactly once, and every one of them, registered before
// the opening or after it, is told exactly once.
func TestSilentOpeningUnderConcurrency(t *testing.T) {
	h := newHarness(t, true, keySettings(testKey, 5, 30*time.Second))
	const n = 64
	tickets := make([]Ticket, n)
	for i := range tickets {
		tickets[i] = h.admit(t, testKey)
	}
	var told [n]atomic.Int32
	releases := make([]func(), n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			releases[i] = tickets[i].Suspect(1, func() { told[i].Add(1) })
		}()
	}
	wg.Wait()
	for _, rel := range releases {
		rel()
	}
	opens := 0
	for _, tr := range h.rec.all() {
		if tr.To == Open {
			opens++
		}
	}
	if opens != 1 {
		t.Fatalf("%d openings, want exactly one", opens)
	}
	for i := range told {
		if c := told[i].Load(); c != 1 {
			t.Errorf("attempt %d told %d times, want once", i, c)
		}
	}
}

// TestSilentAttemptOfManyRequests: one silent attempt that several client
// requests wait on (a fetch they share) counts once for each of them: two
// requests' worth stay below a threshold of 3, three open the breaker,
// and the attempt is told; its verdict is still one.
func TestSilentAttemptOfManyRequests(t *testing.T) {
	h := newHarness(t, true) // threshold 3
	h.admit(t, testKey).Suspect(2, nil)()
	if st := h.snap(t, testKey).State; st != Closed {
		t.Fatalf("after one attempt of 2 requests: %v, want closed", st)
	}
	answered := h.admit(t, testKey)
	answered.Heard() // an answer: the count starts again
	answered.Done(Success)
	told := 0
	tk := h.admit(t, testKey)
	release := tk.Suspect(3, func() { told++ })
	defer release()
	if st := h.snap(t, testKey).State; st != Open || told != 1 {
		t.Fatalf("after one attempt of 3 requests: %v, told %d times; want open, told once", st, told)
	}
	if trs := h.rec.all(); len(trs) != 1 || !trs[0].Silent {
		t.Fatalf("transitions %+v, want one silent opening", trs)
	}
	if n := h.snap(t, testKey).FailureCount; n != 0 {
		t.Errorf("failure count %d: a silent attempt is no failure yet", n)
	}
}
