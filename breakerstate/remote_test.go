package breakerstate

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// shareRecorder collects what a Set tells its fleet-sharing layer.
type shareRecorder struct {
	mu     sync.Mutex
	trs    []Transition
	forced []Mode
}

func (r *shareRecorder) share() *Share {
	return &Share{
		Transition: func(tr Transition) { r.mu.Lock(); r.trs = append(r.trs, tr); r.mu.Unlock() },
		Forced:     func(_ string, m Mode) { r.mu.Lock(); r.forced = append(r.forced, m); r.mu.Unlock() },
	}
}

func (r *shareRecorder) transitions() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Transition(nil), r.trs...)
}

// sharedHarness is a harness (by default threshold 3, reset 30s) with a
// share recorder installed.
func sharedHarness(t *testing.T, keys ...KeySettings) (*harness, *shareRecorder) {
	t.Helper()
	h := newHarness(t, true, keys...)
	r := &shareRecorder{}
	h.SetShare(r.share())
	return h, r
}

func TestApplyRemoteOpen(t *testing.T) {
	for _, c := range []struct {
		name      string
		setup     func(*harness)
		in        time.Duration // the remote's time until its probe
		probes    int           // the remote's failed probes
		wantRetry time.Duration
		wantTrans bool
	}{
		{"closed key opens for that long", func(*harness) {}, 20 * time.Second, 0, 20 * time.Second, true},
		{"closed key with a negative time probes at once", func(*harness) {}, -time.Second, 0, time.Second, true},
		{"later due extends a local open", func(h *harness) { h.openBreaker(t, testKey) }, 25 * time.Second, 0, 30 * time.Second, false},
		{"earlier due never shortens it", func(h *harness) { h.openBreaker(t, testKey) }, 10 * time.Second, 0, 30 * time.Second, false},
		// The bound: never longer than this process would open itself.
		{"an hour is cut to reset_timeout", func(*harness) {}, time.Hour, 0, 30 * time.Second, true},
		{"an hour cannot extend a local open", func(h *harness) {
			h.openBreaker(t, testKey)
			h.clock.Advance(10 * time.Second)
		}, time.Hour, 0, 30 * time.Second, false},
		// Growth carried by the fleet is bounded by reset_timeout_max (here
		// 4 x reset_timeout).
		{"two failed probes elsewhere allow 120s", func(*harness) {}, 2 * time.Minute, 2, 120 * time.Second, true},
		{"a thousand failed probes allow reset_timeout_max", func(*harness) {}, time.Hour, 1000, 120 * time.Second, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, r := sharedHarness(t, growing(testKey, 3, 30*time.Second, 120*time.Second))
			c.setup(h)
			before := len(h.rec.all())
			due, err := h.ApplyRemoteOpen(testKey, c.in, c.probes)
			if err != nil {
				t.Fatal(err)
			}
			st, ra, _ := h.RetryAfter(testKey)
			if st != Open || ra != c.wantRetry {
				t.Fatalf("state %v retry-after %v, want open %v", st, ra, c.wantRetry)
			}
			if left := due.Sub(h.clock.Now()); ceilSeconds(left) != c.wantRetry {
				t.Fatalf("returned due in %v, want about %v", left, c.wantRetry)
			}
			trs := h.rec.all()[before:]
			if got := len(trs) == 1; got != c.wantTrans {
				t.Fatalf("logged transitions %+v, want one: %v", trs, c.wantTrans)
			}
			if c.wantTrans && (!trs[0].Remote || trs[0].Manual || trs[0].To != Open) {
				t.Fatalf("transition %+v, want remote open", trs[0])
			}
			for _, tr := range r.transitions() {
				if tr.Remote {
					t.Fatalf("remote transition %+v echoed to the fleet", tr)
				}
			}
		})
	}
}

// A remote open fences the local probe: its late report changes nothing.
func TestApplyRemoteOpenFencesProbe(t *testing.T) {
	h, _ := sharedHarness(t)
	probe := h.probe(t, testKey)
	if _, err := h.ApplyRemoteOpen(testKey, 30*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	probe.Done(Success)
	if s := h.snap(t, testKey); s.State != Open || s.RetryAfter != 30*time.Second {
		t.Fatalf("%+v: want open 30s after a fenced probe", s)
	}
}

func TestApplyRemoteClose(t *testing.T) {
	h, r := sharedHarness(t)
	probe := h.probe(t, testKey)
	if err := h.ApplyRemoteClose(testKey); err != nil {
		t.Fatal(err)
	}
	probe.Done(Failure) // fenced: the fleet's success wins
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 0 {
		t.Fatalf("%+v: want closed, count 0", s)
	}
	for _, tr := range r.transitions() {
		if tr.To == Closed {
			t.Fatalf("remote close echoed: %+v", tr)
		}
	}
}

// Forced modes win over the fleet's automatic decisions; a disabled set
// ignores them.
func TestRemoteIgnoredWhenForcedOrDisabled(t *testing.T) {
	for _, m := range []Mode{ModeOpen, ModeClosed} {
		h, _ := sharedHarness(t)
		mustForce(t, h, m)
		before := h.snap(t, testKey)
		if _, err := h.ApplyRemoteOpen(testKey, 20*time.Second, 0); err != nil {
			t.Fatal(err)
		}
		if err := h.ApplyRemoteClose(testKey); err != nil {
			t.Fatal(err)
		}
		if after := h.snap(t, testKey); after != before {
			t.Fatalf("forced %v: %+v -> %+v", m, before, after)
		}
	}
	d := newHarness(t, false)
	if _, err := d.ApplyRemoteOpen(testKey, 20*time.Second, 0); err != nil {
		t.Fatal(err)
	}
	d.admit(t, testKey)
}

func TestRemoteUnknownKey(t *testing.T) {
	h, _ := sharedHarness(t)
	for name, err := range map[string]error{
		"open":   second(h.ApplyRemoteOpen("nope", time.Second, 0)),
		"fail":   h.ApplyRemoteFailure("nope"),
		"ok":     h.ApplyRemoteRecovery("nope"),
		"close":  h.ApplyRemoteClose("nope"),
		"force":  h.ApplyRemoteForce("nope", ModeOpen),
		"permit": h.SetProbePermit("nope", true),
	} {
		if !errors.Is(err, ErrUnknownKey) {
			t.Errorf("%s: %v, want ErrUnknownKey", name, err)
		}
	}
	if err := h.ApplyRemoteForce(testKey, Mode(7)); !errors.Is(err, ErrInvalidMode) {
		t.Errorf("bad mode: %v", err)
	}
}

// With the gate on, only the lease holder probes, and a new open period
// needs a new lease.
func TestProbeGate(t *testing.T) {
	h, _ := sharedHarness(t)
	h.SetProbeGate(true)
	h.openBreaker(t, testKey)
	h.clock.Advance(30 * time.Second)
	h.rejected(t, testKey)
	if st, ra, _ := h.RetryAfter(testKey); st != Open || ra != time.Second {
		t.Fatalf("gated: %v %v, want open 1s", st, ra)
	}
	if err := h.SetProbePermit(testKey, true); err != nil {
		t.Fatal(err)
	}
	probe := h.admit(t, testKey)
	if !probe.Probe() {
		t.Fatal("lease holder's request is not the probe")
	}
	h.rejected(t, testKey) // one probe at a time, permit or not
	probe.Done(Failure)
	h.clock.Advance(30 * time.Second)
	h.rejected(t, testKey) // the permit lapsed with the new open period

	h.SetProbeGate(false)
	if !h.admit(t, testKey).Probe() {
		t.Fatal("gate off: local probe refused")
	}
}

// Refusing ignores the probe gate: a realm whose probe is due is not known
// to be down, so the registry naming it is still tried; the gate refuses at
// the realm's own admission (docs/behaviour.md §3.1).
func TestRefusingIgnoresProbeGate(t *testing.T) {
	h, _ := sharedHarness(t)
	h.SetProbeGate(true)
	h.openBreaker(t, testKey)
	if !h.Refusing(testKey) {
		t.Fatal("gated, open, probe not due: not refusing")
	}
	h.clock.Advance(30 * time.Second)
	if h.Refusing(testKey) {
		t.Fatal("gated, probe due, no permit: refusing")
	}
	h.rejected(t, testKey) // while Admit, gated out, refuses
	if st := h.snap(t, testKey).State; st != Open {
		t.Fatalf("gated-out request moved the breaker to %v", st)
	}
}

// A neutral probe keeps the permit: the holder may probe again in the same
// period. A permit given to a closed key is ignored.
func TestProbePermitKeptAfterNeutral(t *testing.T) {
	h, _ := sharedHarness(t)
	h.SetProbeGate(true)
	if err := h.SetProbePermit(testKey, true); err != nil {
		t.Fatal(err)
	}
	h.openBreaker(t, testKey)
	h.clock.Advance(30 * time.Second)
	h.rejected(t, testKey) // permit given while closed does not count
	_ = h.SetProbePermit(testKey, true)
	h.admit(t, testKey).Done(Neutral)
	if !h.admit(t, testKey).Probe() {
		t.Fatal("permit lost after a neutral probe")
	}
}

func TestSetShareNilTurnsGateOff(t *testing.T) {
	h, _ := sharedHarness(t)
	h.SetProbeGate(true)
	h.SetShare(nil)
	if h.ProbeGated() {
		t.Fatal("gate still on without a fleet")
	}
}

func TestShareHooks(t *testing.T) {
	h, r := sharedHarness(t)
	h.openBreaker(t, testKey)
	opened := h.clock.Now()
	mustForce(t, h, ModeClosed)
	if err := h.ApplyRemoteForce(testKey, ModeOpen); err != nil {
		t.Fatal(err)
	}
	trs := r.transitions()
	if len(trs) != 1 || trs[0].To != Open || !trs[0].OpenUntil.Equal(opened.Add(30*time.Second)) {
		t.Fatalf("shared transitions %+v, want one open with open_until", trs)
	}
	if len(r.forced) != 1 || r.forced[0] != ModeClosed {
		t.Fatalf("forced %v, want [closed] only (remote force must not echo)", r.forced)
	}
	all := h.rec.all()
	if last := all[len(all)-1]; !last.Remote || !last.Manual || last.To != Open {
		t.Fatalf("last logged %+v, want remote manual open", last)
	}
}

func TestStatuses(t *testing.T) {
	h := newHarness(t, true, keySettings("a", 1, 10*time.Second), keySettings("b", 1, 10*time.Second))
	h.fail(t, "b", 1)
	got := h.Statuses()
	want := []Status{
		{Key: "a", State: Closed, ResetTimeout: 10 * time.Second},
		{Key: "b", State: Open, OpenUntil: h.clock.Now().Add(10 * time.Second), ResetTimeout: 10 * time.Second},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Statuses = %+v, want %+v", got, want)
	}
	if d := newHarness(t, false); d.Statuses() != nil {
		t.Fatal("disabled set reports statuses")
	}
}

// N concurrent requests at the moment the lease holder may probe: exactly
// one is admitted.
func TestGatedSingleProbeUnderConcurrency(t *testing.T) {
	h, _ := sharedHarness(t)
	h.SetProbeGate(true)
	h.openBreaker(t, testKey)
	h.clock.Advance(30 * time.Second)
	_ = h.SetProbePermit(testKey, true)
	var admitted atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if _, err := h.Allow(testKey); err == nil {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if n := admitted.Load(); n != 1 {
		t.Fatalf("%d admitted, want exactly 1", n)
	}
}

// second drops a call's first result, for tables of errors.
func second[T any](_ T, err error) error { return err }
