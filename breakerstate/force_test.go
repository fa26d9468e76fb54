package breakerstate

import (
	"errors"
	"testing"
	"time"
)

// Manual control: open (stays open until released).
func TestForceOpenStaysOpenUntilReleased(t *testing.T) {
	h := newHarness(t, true)
	mustForce(t, h, ModeOpen)
	for range 3 {
		h.clock.Advance(time.Hour) // far past reset_timeout: still no probe
		h.rejected(t, testKey)
	}
	s := h.snap(t, testKey)
	if s.State != Open || s.Forced != "open" || s.Rejections != 3 {
		t.Fatalf("%+v: want open, forced open, 3 rejections", s)
	}
	mustForce(t, h, ModeAuto)
	if s := h.snap(t, testKey); s.State != Closed || s.Forced != "" {
		t.Fatalf("after release: %+v, want closed, not forced", s)
	}
	h.admit(t, testKey)
}

// A success reported while forced open resets the count but keeps it open.
func TestForceOpenIgnoresClosingSuccess(t *testing.T) {
	h := newHarness(t, true)
	slow := h.admit(t, testKey)
	h.fail(t, testKey, 2)
	mustForce(t, h, ModeOpen)
	slow.Done(Success)
	if s := h.snap(t, testKey); s.State != Open || s.FailureCount != 0 {
		t.Fatalf("%+v: want open with count 0", s)
	}
}

// Manual control: closed (never opens; failures still counted).
func TestForceClosedNeverOpensButCounts(t *testing.T) {
	h := newHarness(t, true)
	h.openBreaker(t, testKey)
	mustForce(t, h, ModeClosed)
	h.fail(t, testKey, 10)
	s := h.snap(t, testKey)
	if s.State != Closed || s.Forced != "closed" || s.FailureCount != 13 || !s.LastFailure.Equal(h.clock.Now()) {
		t.Fatalf("%+v: want closed, forced closed, count 13", s)
	}
	if h.admit(t, testKey).Probe() {
		t.Fatal("forced closed breaker admitted a probe")
	}
}

// Manual control: auto (back to automatic, count 0).
func TestForceAutoResets(t *testing.T) {
	h := newHarness(t, true)
	mustForce(t, h, ModeClosed)
	h.fail(t, testKey, 5)
	mustForce(t, h, ModeAuto)
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 0 || s.Forced != "" {
		t.Fatalf("%+v: want closed, count 0, automatic", s)
	}
	h.fail(t, testKey, 2)
	if st := h.snap(t, testKey).State; st != Closed {
		t.Fatalf("state %v: count was not reset by auto", st)
	}
	h.fail(t, testKey, 1)
	if st := h.snap(t, testKey).State; st != Open {
		t.Fatalf("state %v: automatic operation did not resume", st)
	}
}

// Forcing a mode fences the outstanding probe: the operator's decision wins.
func TestForceFencesOutstandingProbe(t *testing.T) {
	for _, m := range []Mode{ModeOpen, ModeClosed, ModeAuto} {
		t.Run(m.String(), func(t *testing.T) {
			h := newHarness(t, true)
			probe := h.probe(t, testKey)
			mustForce(t, h, m)
			before := h.snap(t, testKey)
			probe.Done(Failure)
			probe.Done(Success)
			if after := h.snap(t, testKey); after != before {
				t.Fatalf("probe report after force changed %+v -> %+v", before, after)
			}
		})
	}
}

func TestForceErrors(t *testing.T) {
	h := newHarness(t, true)
	if err := h.Force("nope", ModeOpen); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Force(unknown) = %v, want ErrUnknownKey", err)
	}
	if err := h.Force(testKey, Mode(9)); !errors.Is(err, ErrInvalidMode) {
		t.Fatalf("Force(bad mode) = %v, want ErrInvalidMode", err)
	}
	d := newHarness(t, false)
	if err := d.Force(testKey, ModeOpen); !errors.Is(err, ErrDisabled) {
		t.Fatalf("Force while disabled = %v, want ErrDisabled", err)
	}
}

func TestForceAnnouncesTransitions(t *testing.T) {
	h := newHarness(t, true)
	mustForce(t, h, ModeOpen)
	mustForce(t, h, ModeOpen) // no change, no transition
	mustForce(t, h, ModeClosed)
	trs := h.rec.all()
	if len(trs) != 2 || trs[0].To != Open || trs[1].From != Open || trs[1].To != Closed {
		t.Fatalf("transitions = %+v", trs)
	}
}
