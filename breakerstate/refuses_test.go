package breakerstate

import (
	"errors"
	"testing"
	"time"
)

// agrees checks, in the state h is in, that Refuses says what Admit then
// does, that asking Refuses counted nothing, and returns Admit's ticket (the
// zero one when it refused) so the caller can drive the state on.
func agrees(t *testing.T, h *harness, key, when string) (Ticket, bool) {
	t.Helper()
	before := h.snap(t, key).Rejections
	refuses := h.Refuses(key)
	if got := h.snap(t, key).Rejections; got != before {
		t.Fatalf("%s: Refuses counted %d refusals", when, got-before)
	}
	tk, err := h.Admit(key)
	refused := errors.Is(err, ErrOpen)
	if refuses != refused {
		t.Fatalf("%s: Refuses says %v, Admit then refused: %v (err %v)", when, refuses, refused, err)
	}
	return tk, refused
}

// TestRefusesAgreesWithAdmit walks one key through every state Admit tells
// apart, and in each Refuses predicts Admit's verdict without taking the
// probe or counting a refusal: fallback refuses a request on its word
// alone (fallback/refusal.go), so any state where the two differ would
// refuse a request Admit would let through, or the other way round.
func TestRefusesAgreesWithAdmit(t *testing.T) {
	t.Run("automatic", func(t *testing.T) {
		h := newHarness(t, true, keySettings("k", 1, 10*time.Second))
		tk, _ := agrees(t, h, "k", "closed")
		tk.Done(Failure) // opens: threshold 1
		agrees(t, h, "k", "open, probe not due")
		h.clock.Advance(10 * time.Second)
		probe, _ := agrees(t, h, "k", "open, probe due")
		if !probe.Probe() {
			t.Fatal("the request after the open period is not the probe")
		}
		agrees(t, h, "k", "half-open, probe out")
		h.clock.Advance(10*time.Second + time.Millisecond)
		lost, _ := agrees(t, h, "k", "half-open, probe presumed lost")
		lost.Done(Success)
		agrees(t, h, "k", "closed again")
		if h.Refuses("unknown") {
			t.Fatal("an unknown key is refused")
		}
	})
	t.Run("forced", func(t *testing.T) {
		h := newHarness(t, true, keySettings("k", 1, 10*time.Second))
		for _, m := range []Mode{ModeOpen, ModeClosed, ModeOpen} {
			if err := h.Force("k", m); err != nil {
				t.Fatal(err)
			}
			tk, _ := agrees(t, h, "k", "forced "+m.String())
			tk.Done(Failure)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		h := newHarness(t, false, keySettings("k", 1, 10*time.Second))
		agrees(t, h, "k", "disabled")
	})
	t.Run("fleet probe gate", func(t *testing.T) {
		// Unlike Refusing, Refuses applies the gate: with the probe due
		// and no permit, Admit refuses, and so must Refuses.
		h, _ := sharedHarness(t)
		h.SetProbeGate(true)
		h.openBreaker(t, testKey)
		h.clock.Advance(30 * time.Second)
		if _, refused := agrees(t, h, testKey, "gated, probe due, no permit"); !refused {
			t.Fatal("a gated-out request was admitted")
		}
		if err := h.SetProbePermit(testKey, true); err != nil {
			t.Fatal(err)
		}
		if tk, refused := agrees(t, h, testKey, "gated, probe due, permit"); refused || !tk.Probe() {
			t.Fatalf("with the permit: refused %v, probe %v", refused, tk.Probe())
		}
	})
}

// TestCountRefusalCountsOne: a refusal decided on Refuses' word is counted
// like one Admit made, in the snapshot and the metric.
func TestCountRefusalCountsOne(t *testing.T) {
	h := newHarness(t, true, keySettings("k", 1, 10*time.Second))
	h.fail(t, "k", 1)
	h.rejected(t, "k")
	h.CountRefusal("k")
	h.CountRefusal("unknown") // nothing to count, no panic
	if got := h.snap(t, "k").Rejections; got != 2 {
		t.Fatalf("rejections = %d, want 2 (one from Admit, one counted)", got)
	}
	if got := series(t, h.reg)["nora_circuit_breaker_rejections_total{registry=k}"]; got != 2 {
		t.Fatalf("rejections metric = %v, want 2", got)
	}
}
