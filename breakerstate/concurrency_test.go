package breakerstate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Correct under any interleaving: N concurrent requests at the moment a
// probe is due → exactly one reaches the upstream. Even rounds race for the
// probe of an Open breaker whose reset_timeout just passed; odd rounds race
// to replace a lost probe.
func TestExactlyOneProbeUnderContention(t *testing.T) {
	const (
		rounds     = 300
		goroutines = 200
		reset      = 10 * time.Second
	)
	h := newHarness(t, true, keySettings(testKey, 1, reset))
	h.openBreaker(t, testKey)
	var lost Ticket
	for round := range rounds {
		if round%2 == 0 {
			h.clock.Advance(reset) // Open: probe due now
		} else {
			h.clock.Advance(reset + time.Nanosecond) // HalfOpen: the last probe is lost
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var admitted atomic.Int32
		tickets := make(chan Ticket, goroutines)
		errs := make(chan error, goroutines)
		for range goroutines {
			wg.Go(func() {
				<-start
				tk, err := h.Allow(testKey)
				switch {
				case err == nil:
					admitted.Add(1)
					tickets <- tk
				case !errors.Is(err, ErrOpen):
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: unexpected error %v", round, err)
		}
		if n := admitted.Load(); n != 1 {
			t.Fatalf("round %d: %d requests admitted, want exactly 1", round, n)
		}
		tk := <-tickets
		if !tk.Probe() {
			t.Fatalf("round %d: admitted request is not the probe", round)
		}
		lost.Done(Success) // the previous lost probe reports late: fenced
		if round%2 == 0 {
			lost = tk // leave it outstanding: next round replaces it
		} else {
			tk.Done(Failure) // back to Open, last_failure = now
			lost = Ticket{}
		}
		if st := h.snap(t, testKey).State; st == Closed {
			t.Fatalf("round %d: a fenced report closed the breaker", round)
		}
	}
	if r := h.snap(t, testKey).Rejections; r != rounds*(goroutines-1) {
		t.Fatalf("rejections = %d, want %d", r, rounds*(goroutines-1))
	}
}

// One key's traffic never waits on another key's lock.
func TestOneKeysLockNeverBlocksAnother(t *testing.T) {
	h := newHarness(t, true, keySettings("a", 1, time.Second), keySettings("b", 2, time.Second))
	a := h.table.Load().byKey["a"]
	aTicket := h.admit(t, "a")
	a.mu.Lock()
	unlocked := false
	t.Cleanup(func() {
		if !unlocked {
			a.mu.Unlock()
		}
	})

	aDone := make(chan struct{})
	go func() { // a failure needs a's lock: blocks until the test releases it
		defer close(aDone)
		aTicket.Done(Failure)
	}()

	bDone := make(chan error, 1)
	go func() {
		for range 1000 {
			tk, err := h.Allow("b")
			if err != nil && !errors.Is(err, ErrOpen) {
				bDone <- err
				return
			}
			tk.Done(Failure)
			h.clock.Advance(time.Second)
			h.RetryAfter("b")
		}
		if err := h.Force("b", ModeClosed); err != nil {
			bDone <- err
			return
		}
		bDone <- nil
	}()
	select {
	case err := <-bDone:
		if err != nil {
			t.Fatalf("key b: %v", err)
		}
	case <-time.After(30 * time.Second): // a watchdog, not a wait for a state
		t.Fatal("traffic on key b blocked while key a's lock was held")
	}
	select {
	case <-aDone:
		t.Fatal("a report on key a completed while its lock was held: the test proves nothing")
	default:
	}
	a.mu.Unlock()
	unlocked = true
	<-aDone
	if st := h.snap(t, "a").State; st != Open {
		t.Fatalf("key a state %v after its failure, want open", st)
	}
}

// checkLocked returns a description of a broken invariant, or "". Called
// with b.mu held.
func (b *breaker) checkLocked() string {
	switch {
	case b.state > HalfOpen:
		return fmt.Sprintf("bad state %d", b.state)
	case b.count < 0:
		return fmt.Sprintf("negative count %d", b.count)
	case b.probeOut && b.state != HalfOpen:
		return fmt.Sprintf("probe outstanding in state %v", b.state)
	case b.forced == ModeOpen && b.state != Open:
		return fmt.Sprintf("forced open in state %v", b.state)
	case b.forced == ModeClosed && b.state != Closed:
		return fmt.Sprintf("forced closed in state %v", b.state)
	case !b.enabled && (b.state != Closed || b.count != 0 || b.forced != ModeAuto):
		return fmt.Sprintf("disabled but state %v count %d forced %v", b.state, b.count, b.forced)
	}
	return ""
}

// probeLedger records every probe grant; a (breaker, generation) pair
// granted twice would mean two probes admitted for one slot.
type probeLedger struct {
	mu   sync.Mutex
	seen map[*breaker]map[uint64]bool
}

func (l *probeLedger) grant(tk Ticket) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[tk.b] == nil {
		l.seen[tk.b] = map[uint64]bool{}
	}
	if l.seen[tk.b][tk.gen] {
		return fmt.Errorf("probe generation %d of %q granted twice", tk.gen, tk.b.cfg.Key)
	}
	l.seen[tk.b][tk.gen] = true
	return nil
}

// A randomized mix of every operation under -race, checking invariants.
func TestConcurrentStressInvariants(t *testing.T) {
	keys := make([]KeySettings, 8)
	for i := range keys {
		keys[i] = keySettings(fmt.Sprintf("k%d", i), 1+i%3, time.Duration(i%4)*time.Second)
	}
	h := newHarness(t, true, keys...)
	ledger := &probeLedger{seen: map[*breaker]map[uint64]bool{}}
	const workers, ops = 32, 3000
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if err := stressWorker(h, keys, ledger, rand.New(rand.NewPCG(uint64(w), 42)), ops); err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	probes := 0
	for _, gens := range ledger.seen {
		probes += len(gens)
	}
	if trs := len(h.rec.all()); probes < 100 || trs < 100 {
		t.Fatalf("only %d probes and %d transitions: the mix does not exercise the state machine", probes, trs)
	}
	t.Logf("%d probes, %d transitions", probes, len(h.rec.all()))
	// Quiescent: every gauge shows its breaker's state, and only configured
	// keys have series.
	h.Reconfigure(true, keys)
	got := series(t, h.reg)
	for _, s := range h.Snapshot() {
		if v := got["nora_circuit_breaker_state{registry="+s.Key+"}"]; v != float64(s.State) {
			t.Errorf("%s: gauge %v, state %v", s.Key, v, s.State)
		}
	}
	if n := len(h.Snapshot()); n != len(keys) {
		t.Fatalf("%d keys after final reload, want %d", n, len(keys))
	}
}

// stressWorker performs n random operations, holding some tickets for a
// while so that reports arrive late, after clock moves, forces and reloads.
func stressWorker(h *harness, keys []KeySettings, ledger *probeLedger, rng *rand.Rand, n int) error {
	var held []Ticket
	for range n {
		key := keys[rng.IntN(len(keys))].Key
		switch op := rng.IntN(100); {
		case op < 55:
			tk, err := h.Allow(key)
			if err != nil {
				if !errors.Is(err, ErrOpen) && !errors.Is(err, ErrUnknownKey) {
					return err
				}
				continue
			}
			if tk.Probe() {
				if err := ledger.grant(tk); err != nil {
					return err
				}
			}
			held = append(held, tk)
		case op < 80:
			if len(held) > 0 {
				i := rng.IntN(len(held))
				held[i].Done(Outcome(rng.IntN(4)))
				held = append(held[:i], held[i+1:]...)
			}
		case op < 86:
			h.clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
		case op < 90:
			err := h.Force(key, Mode(rng.IntN(3)))
			if err != nil && !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrDisabled) {
				return err
			}
		case op < 92:
			h.Reconfigure(rng.IntN(8) != 0, randomKeys(keys, rng))
		default:
			if err := checkAll(h); err != nil {
				return err
			}
		}
	}
	for _, tk := range held {
		tk.Done(Outcome(rng.IntN(4)))
	}
	return nil
}

// randomKeys returns keys with random thresholds and one key sometimes left out.
func randomKeys(keys []KeySettings, rng *rand.Rand) []KeySettings {
	out := make([]KeySettings, 0, len(keys))
	skip := rng.IntN(len(keys) * 2)
	for i, k := range keys {
		if i == skip {
			continue
		}
		k.FailureThreshold = 1 + rng.IntN(4)
		k.ResetTimeout = time.Duration(rng.IntN(4)) * time.Second
		out = append(out, k)
	}
	return out
}

// checkAll checks every breaker's invariants and the snapshot's promises.
func checkAll(h *harness) error {
	for _, b := range h.table.Load().order {
		b.mu.Lock()
		msg := b.checkLocked()
		if f := b.fast.Load(); msg == "" && f != b.fastBits() {
			msg = fmt.Sprintf("fast mirror %03b, locked state says %03b", f, b.fastBits())
		}
		b.mu.Unlock()
		if msg != "" {
			return fmt.Errorf("%s: %s", b.cfg.Key, msg)
		}
	}
	for _, s := range h.Snapshot() {
		switch {
		case s.State == Closed && s.RetryAfter != 0:
			return fmt.Errorf("%s: closed with Retry-After %v", s.Key, s.RetryAfter)
		case s.State != Closed && (s.RetryAfter < time.Second || s.RetryAfter%time.Second != 0):
			return fmt.Errorf("%s: %v with Retry-After %v", s.Key, s.State, s.RetryAfter)
		case s.Forced == "open" && s.State != Open, s.Forced == "closed" && s.State != Closed:
			return fmt.Errorf("%s: forced %s but %v", s.Key, s.Forced, s.State)
		}
	}
	return nil
}

// The lock-free mirror must agree with the locked state after every kind of
// change; checkAll in the stress test compares them continuously, this
// checks the states one by one.
func TestFastMirrorFollowsState(t *testing.T) {
	h := newHarness(t, true)
	b := h.table.Load().byKey[testKey]
	check := func(step string, want uint32) {
		t.Helper()
		if got := b.fast.Load(); got != want {
			t.Fatalf("%s: fast = %03b, want %03b", step, got, want)
		}
	}
	check("new", fastAdmit|fastQuiet)
	h.fail(t, testKey, 1)
	check("one failure", fastAdmit)
	h.fail(t, testKey, 2)
	check("open", 0)
	h.clock.Advance(30 * time.Second)
	probe := h.admit(t, testKey)
	check("half open", 0)
	probe.Done(Success)
	check("closed by probe", fastAdmit|fastQuiet)
	mustForce(t, h, ModeOpen)
	check("forced open", fastQuiet)
	mustForce(t, h, ModeClosed)
	check("forced closed", fastAdmit|fastQuiet)
	h.Reconfigure(false, []KeySettings{keySettings(testKey, 3, time.Second)})
	check("disabled", fastOff|fastQuiet)
	h.Reconfigure(true, nil)
	check("retired", 0)
}
