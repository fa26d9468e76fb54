package breakerstate

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countRecorder collects what a Set tells the fleet about its counts.
type countRecorder struct {
	failures, recoveries atomic.Int64
	opens                atomic.Int64
}

func (r *countRecorder) share() *Share {
	return &Share{
		Failure:  func(string) { r.failures.Add(1) },
		Recovery: func(string) { r.recoveries.Add(1) },
		Transition: func(tr Transition) {
			if tr.To == Open {
				r.opens.Add(1)
			}
		},
	}
}

// Local reports: each failure counted while closed is told, except the one
// that opens the key (the opening is); the first success after failures is
// told once; successes on a clean breaker are not.
func TestLocalCountsToldToTheFleet(t *testing.T) {
	h := newHarness(t, true) // threshold 3
	r := &countRecorder{}
	h.SetShare(r.share())
	for range 5 {
		h.admit(t, testKey).Done(Success)
	}
	h.fail(t, testKey, 2)
	h.admit(t, testKey).Done(Success)
	h.admit(t, testKey).Done(Success)
	h.admit(t, testKey).Done(Alive) // a 4xx is no recovery
	if f, rc := r.failures.Load(), r.recoveries.Load(); f != 2 || rc != 1 {
		t.Fatalf("told %d failures and %d recoveries, want 2 and 1", f, rc)
	}
	h.fail(t, testKey, 3)
	if f, o := r.failures.Load(), r.opens.Load(); f != 4 || o != 1 {
		t.Fatalf("told %d failures and %d openings, want 4 (the opening one not) and 1", f, o)
	}
}

// The fleet's failures add to the local count: a key opens after
// failure_threshold failures of the whole fleet. The opening is this
// process's own decision, told to the fleet, and says why.
func TestRemoteFailuresOpenAtTheFleetThreshold(t *testing.T) {
	h := newHarness(t, true) // threshold 3
	r := &countRecorder{}
	h.SetShare(r.share())
	h.fail(t, testKey, 1)
	if err := h.ApplyRemoteFailure(testKey); err != nil {
		t.Fatal(err)
	}
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 2 {
		t.Fatalf("%+v, want closed with 2 failures", s)
	}
	if err := h.ApplyRemoteFailure(testKey); err != nil {
		t.Fatal(err)
	}
	s := h.snap(t, testKey)
	if s.State != Open || s.RetryAfter != 30*time.Second || !s.LastFailure.Equal(h.clock.Now()) {
		t.Fatalf("%+v, want open for reset_timeout at the fleet's third failure", s)
	}
	trs := h.rec.all()
	if tr := trs[len(trs)-1]; tr.To != Open || tr.Remote || !tr.Fleet || tr.Why() != "fleet threshold reached" {
		t.Fatalf("transition %+v (%s), want a local opening by the fleet's count", tr, tr.Why())
	}
	if r.opens.Load() != 1 {
		t.Fatal("the opening was not told to the fleet: nobody would start the probe election")
	}
	// Open: further failures elsewhere change nothing here.
	due := h.Statuses()[0].OpenUntil
	h.clock.Advance(5 * time.Second)
	_ = h.ApplyRemoteFailure(testKey)
	if got := h.Statuses()[0].OpenUntil; !got.Equal(due) {
		t.Fatalf("a remote failure while open moved the probe from %v to %v", due, got)
	}
}

// A recovery elsewhere ends the run of consecutive failures here.
func TestRemoteRecoveryResetsTheCount(t *testing.T) {
	h := newHarness(t, true)
	h.fail(t, testKey, 2)
	if err := h.ApplyRemoteRecovery(testKey); err != nil {
		t.Fatal(err)
	}
	if s := h.snap(t, testKey); s.FailureCount != 0 {
		t.Fatalf("count %d after a recovery elsewhere, want 0", s.FailureCount)
	}
	h.fail(t, testKey, 2)
	if st := h.snap(t, testKey).State; st != Closed {
		t.Fatalf("opened at 2 local failures after a reset: %v", st)
	}
	// Open keys wait for their probe or the fleet's close.
	h.fail(t, testKey, 1)
	_ = h.ApplyRemoteRecovery(testKey)
	if s := h.snap(t, testKey); s.State != Open || s.FailureCount != 3 {
		t.Fatalf("%+v, want open with the count kept", s)
	}
}

// Forced modes: forced open ignores the fleet's failures, forced closed
// counts them and never opens; a disabled set ignores them.
func TestRemoteFailuresUnderForcedModes(t *testing.T) {
	h := newHarness(t, true)
	mustForce(t, h, ModeClosed)
	for range 10 {
		_ = h.ApplyRemoteFailure(testKey)
	}
	if s := h.snap(t, testKey); s.State != Closed || s.FailureCount != 10 {
		t.Fatalf("forced closed: %+v, want closed counting 10", s)
	}
	mustForce(t, h, ModeOpen)
	before := h.snap(t, testKey)
	_ = h.ApplyRemoteFailure(testKey)
	if after := h.snap(t, testKey); after != before {
		t.Fatalf("forced open: %+v -> %+v", before, after)
	}
	d := newHarness(t, false)
	for range 5 {
		_ = d.ApplyRemoteFailure(testKey)
	}
	if s := d.snap(t, testKey); s.FailureCount != 0 {
		t.Fatalf("disabled set counted %d", s.FailureCount)
	}
}

// Local traffic and the fleet's failures and recoveries at once, from many
// goroutines: the key opens exactly once, only after the threshold, and the
// lock-free mirror never admits a request past an open breaker's lock.
func TestFleetCountingUnderConcurrency(t *testing.T) {
	h := newHarness(t, true, keySettings(testKey, 50, time.Hour))
	r := &countRecorder{}
	h.SetShare(r.share())
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				switch {
				case g%4 == 0:
					_ = h.ApplyRemoteFailure(testKey)
				case g%4 == 1 && i%50 == 0:
					_ = h.ApplyRemoteRecovery(testKey)
				default:
					if tk, err := h.Allow(testKey); err == nil {
						tk.Done(Failure)
					}
				}
			}
		})
	}
	wg.Wait()
	var opens int
	for _, tr := range h.rec.all() {
		if tr.To == Open {
			opens++
			if tr.FailureCount < 50 {
				t.Errorf("opened at %d failures, want >= 50", tr.FailureCount)
			}
		}
	}
	if opens != 1 || h.snap(t, testKey).State != Open {
		t.Fatalf("%d openings, state %v; want exactly one, open", opens, h.snap(t, testKey).State)
	}
	if _, err := h.Allow(testKey); err == nil {
		t.Fatal("an open key (reset 1h) admitted a request")
	}
}
