package breakerstate

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ticketKind says why a request was admitted, which decides how its report
// is applied.
type ticketKind uint8

const (
	// kindNone is the zero Ticket: nothing to report (disabled set).
	kindNone ticketKind = iota
	// kindAdmitted is a request admitted while Closed (or forced closed).
	kindAdmitted
	// kindProbe is the single half-open probe of one generation.
	kindProbe
)

// Bits of breaker.fast.
const (
	// fastAdmit: Allow may admit an ordinary request without the lock (the
	// breaker is Closed or forced closed).
	fastAdmit uint32 = 1 << iota
	// fastQuiet: an ordinary request's success would change nothing (the
	// count is 0 and there is nothing to close).
	fastQuiet
	// fastOff: the set is disabled; Allow hands out the zero Ticket.
	fastOff
	// fastSilent: silent attempts are counted (silent.go), so a header
	// answer (Ticket.Heard) has a count to reset.
	fastSilent
)

// breaker is the state machine of one key. Every field below mu is guarded
// by it; each key has its own mutex so that one key's traffic never waits on
// another key's. mu is taken only by write and look: a section that may
// change the state runs inside write, which publishes the fast mirror before
// the lock is released, so no change can leave the mirror behind
// (TestBreakerLockTakenOnlyByWriteAndLook keeps it that way).
type breaker struct {
	set *Set // clock, metrics and transition hook; never changes

	// fast mirrors, for lock-free reads, whether the healthy path may skip
	// the lock: a Closed breaker admits everyone and a success on a clean
	// breaker changes nothing, so neither needs to serialise with other
	// requests. It is stored under mu (by write) after every change, so a
	// reader sees either the state before a change or the state after it.
	fast atomic.Uint32

	mu sync.Mutex
	// cfg is replaced by Reconfigure; Key never changes.
	cfg KeySettings
	// enabled mirrors the set's flag under this lock, so that every decision
	// about this key is taken under one lock even while Reconfigure runs.
	enabled bool
	// retired is set when the key leaves the configuration; a retired
	// breaker answers ErrUnknownKey and ignores reports, so that late
	// reports cannot recreate the metric series Reconfigure deleted.
	retired bool

	state       State
	forced      Mode
	count       int
	lastFailure time.Time
	// due is when the probe of the current open period falls due, period
	// that period's length (the open time, grown by failedProbes and
	// jittered: opentime.go) and failedProbes how many probes of this
	// outage failed in a row. Closing clears all three.
	due          time.Time
	period       time.Duration
	failedProbes int
	// rng draws the jitter of this key when the set has no injected
	// source; used only under mu, so it needs no lock of its own.
	rng *rand.Rand
	// gen changes on every state change and every probe grant. A probe
	// ticket's report counts only if its generation is still current.
	gen      uint64
	probeOut bool      // the probe of generation gen is outstanding
	probeAt  time.Time // when that probe was admitted
	// permit says this process holds the fleet's probe lease for the current
	// open period; consulted only while the set is gated (remote.go). Any
	// move to Open or Closed clears it: a new period needs a new lease.
	permit bool
	// silent counts the attempts admitted while closed that waited their
	// suspect wait with no answer from the host since (silent.go); every
	// state change clears it. waiters are the callbacks of silent attempts
	// still waiting, by id, called when the breaker opens.
	silent    int
	waiters   map[uint64]func()
	waiterSeq uint64

	rejections uint64
	m          bound
}

// fastBits computes the fast mirror from the locked state. Called with mu held.
func (b *breaker) fastBits() uint32 {
	switch {
	case b.retired:
		return 0 // take the lock and answer ErrUnknownKey
	case !b.enabled:
		return fastOff | fastQuiet
	}
	var f uint32
	if b.forced == ModeClosed || (b.forced == ModeAuto && b.state == Closed) {
		f |= fastAdmit
	}
	if b.count == 0 && (b.forced != ModeAuto || b.state == Closed) {
		f |= fastQuiet
	}
	if b.silent > 0 {
		f |= fastSilent
	}
	return f
}

// write runs change under the key's lock, publishes the fast mirror, then
// releases the lock and announces the transition change decided (outside
// the lock, so a slow logger never holds up the key's traffic).
func (b *breaker) write(change func() pending) {
	b.mu.Lock()
	p := change()
	b.fast.Store(b.fastBits())
	b.mu.Unlock()
	b.announce(p)
}

// look runs read under the key's lock; read must not change the state.
func (b *breaker) look(read func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	read()
}

// pending is a transition decided under the lock, announced after it,
// whether the report that caused it is one the fleet counts (fleetcount.go),
// and the callbacks of the attempts an opening hands on (silent.go).
type pending struct {
	tr      Transition
	ok      bool
	counted counted
	wake    []func()
}

// announce calls the transition hook, outside the breaker's lock so a slow
// logger never holds up the key's traffic.
func (b *breaker) announce(p pending) {
	if p.counted != countedNone {
		b.shareCount(p.counted)
	}
	for _, f := range p.wake {
		f()
	}
	if !p.ok {
		return
	}
	if b.set.onTransition != nil {
		b.set.onTransition(p.tr)
	}
	// Only the state machine's own decisions go to the fleet: remote ones
	// came from it, and manual ones travel through Share.Forced.
	if sh := b.set.share.Load(); sh != nil && sh.Transition != nil && !p.tr.Remote && !p.tr.Manual {
		sh.Transition(p.tr)
	}
}

// setState moves to st, bumping the generation (which fences any outstanding
// probe) and updating the metrics under the lock, so the gauge always ends
// on the state the breaker is really in. Callers update count first: the
// transition carries it.
func (b *breaker) setState(st State, now time.Time) pending {
	from := b.state
	if from == st {
		return pending{}
	}
	b.state = st
	b.gen++
	b.probeOut = false
	b.silent = 0
	if st != HalfOpen {
		b.permit = false
	}
	if st == Closed {
		// The outage is over: the next one starts from reset_timeout.
		b.failedProbes, b.period, b.due = 0, 0, time.Time{}
	}
	if b.m.state != nil {
		b.m.state.Set(float64(st))
	}
	b.set.metrics.transition(&b.m, b.cfg.Key, from, st)
	tr := Transition{Key: b.cfg.Key, From: from, To: st, At: now, FailureCount: b.count, FailedProbes: b.failedProbes}
	if st == Open && b.forced == ModeAuto {
		tr.OpenUntil, tr.OpenTime = b.due, b.period
	}
	p := pending{ok: true, tr: tr}
	if st == Open {
		b.wakeWaiters(&p)
	}
	return p
}

// allow decides whether one request may go to the upstream. The healthy
// path reads one atomic word; everything else takes the key's lock.
func (b *breaker) allow() (Ticket, error) {
	switch f := b.fast.Load(); {
	case f&fastOff != 0:
		return Ticket{}, nil
	case f&fastAdmit != 0:
		return Ticket{b: b, kind: kindAdmitted}, nil
	}
	return b.allowLocked()
}

// allowLocked is allow for a breaker that is not plainly Closed. It checks
// everything again under the lock: the mirror may be stale by now.
func (b *breaker) allowLocked() (t Ticket, err error) {
	b.write(func() (p pending) {
		t, p, err = b.admit()
		return p
	})
	return t, err
}

// refuses reports whether admit would refuse a request now, read without
// changing anything: forced open, open with its probe not due, half-open
// with its probe out, and with gate, a fleet probe gate that holds this
// process out. now is the clock reading it took (zero when the state
// needed none: no clock read while Closed). Called with mu held.
func (b *breaker) refuses(gate bool) (refused bool, now time.Time) {
	switch {
	case b.retired || !b.enabled || b.forced == ModeClosed:
		return false, now
	case b.forced == ModeOpen:
		return true, now
	case b.state == Closed:
		return false, now
	}
	now = b.set.now()
	return b.probeNotDue(now) || (gate && b.gatedOut()), now
}

// admit decides one request under the lock and returns the transition it
// caused, if any. Called with mu held, through write. What it refuses is
// what refuses says, the fleet's probe gate included: without the fleet's
// lease another process probes for everyone, and this one refuses
// (Retry-After 1s) until its outcome arrives.
func (b *breaker) admit() (Ticket, pending, error) {
	if b.retired {
		return Ticket{}, pending{}, ErrUnknownKey
	}
	refused, now := b.refuses(true)
	switch {
	case !b.enabled:
		return Ticket{}, pending{}, nil
	case refused:
		b.reject()
		return Ticket{}, pending{}, ErrOpen
	case b.forced == ModeClosed || b.state == Closed:
		return Ticket{b: b, kind: kindAdmitted}, pending{}, nil
	}
	var p pending
	if b.state == Open {
		p = b.setState(HalfOpen, now)
	}
	b.gen++
	b.probeOut = true
	b.probeAt = now
	return Ticket{b: b, gen: b.gen, kind: kindProbe}, p, nil
}

// probeNotDue reports whether the state machine itself refuses a request
// now: Open with its open period not over (due not reached), or
// HalfOpen with its probe out. A probe outstanding longer than
// reset_timeout is presumed lost (its client hung or its report was
// dropped); without this rule a lost probe would keep the breaker half-open
// forever. Forced modes, the enabled flag and the fleet's probe gate are the
// caller's to check. Called with mu held.
func (b *breaker) probeNotDue(now time.Time) bool {
	switch b.state {
	case Open:
		return now.Before(b.due)
	case HalfOpen:
		return b.probeOut && now.Sub(b.probeAt) <= b.cfg.ResetTimeout
	}
	return false
}

// reject counts one rejection. Called with mu held.
func (b *breaker) reject() {
	b.rejections++
	if b.m.rejections != nil {
		b.m.rejections.Inc()
	}
}

// done applies the report of a ticket issued by this breaker.
func (b *breaker) done(t Ticket, o Outcome) {
	// Alive and neutral reports of ordinary requests change nothing, and
	// neither does a success on a clean breaker: skip the lock.
	if t.kind == kindAdmitted && (o == Alive || o == Neutral ||
		(o == Success && b.fast.Load()&fastQuiet != 0)) {
		return
	}
	b.write(func() pending {
		switch {
		case b.retired || !b.enabled:
			return pending{}
		case t.kind == kindProbe:
			return b.doneProbe(t.gen, o)
		}
		return b.doneAdmitted(o)
	})
}

// doneAdmitted applies the report of a request admitted while Closed. As in
// NORA, such a report is not fenced: a success proves the upstream works and
// closes the breaker whatever happened meanwhile, and a failure while Open
// refreshes last_failure, pushing the next probe out by the period's
// length. A failure counted while Closed, and the success that ends a run
// of them, are also the fleet's to hear (fleetcount.go). Called with mu
// held.
func (b *breaker) doneAdmitted(o Outcome) pending {
	switch o {
	case Success:
		recovered := b.count > 0 && b.state == Closed
		b.count = 0
		if b.forced == ModeAuto && b.state != Closed {
			return b.setState(Closed, b.set.now())
		}
		if recovered {
			return pending{counted: countedRecovery}
		}
	case Failure:
		now := b.set.now()
		b.count++
		b.lastFailure = now
		switch {
		case b.state == Open:
			if b.forced == ModeAuto {
				b.pushOut(now)
			}
		case b.state == HalfOpen:
			// A failure while HalfOpen only counts: the outstanding
			// probe is fresher evidence and decides the state.
		case b.forced == ModeAuto && b.count >= b.cfg.FailureThreshold:
			// The fleet hears of the open itself, which says more than
			// one more failure would.
			b.startPeriod(now)
			return b.setState(Open, now)
		default:
			return pending{counted: countedFailure}
		}
	}
	return pending{}
}

// doneProbe applies a probe's report unless a newer generation has started
// (probe lost and replaced, forced mode, reconfiguration). Called with mu held.
func (b *breaker) doneProbe(gen uint64, o Outcome) pending {
	if gen != b.gen || !b.probeOut || b.state != HalfOpen {
		return pending{}
	}
	switch o {
	case Neutral:
		// The client left before any answer: the probe proved nothing, so
		// free the slot for the next request instead of waiting for the
		// lost-probe timeout.
		b.probeOut = false
	case Success, Alive:
		b.count = 0
		return b.setState(Closed, b.set.now())
	case Failure:
		now := b.set.now()
		b.count++
		b.lastFailure = now
		// The upstream is still down: the next period is twice as long, up
		// to reset_timeout_max.
		b.failedProbes = min(b.failedProbes+1, maxFailedProbes)
		b.startPeriod(now)
		return b.setState(Open, now)
	}
	return pending{}
}

// force applies a manual mode; remote says it came from the fleet.
func (b *breaker) force(m Mode, remote bool) (err error) {
	b.write(func() pending {
		switch {
		case b.retired:
			err = ErrUnknownKey
			return pending{}
		case !b.enabled:
			err = ErrDisabled
			return pending{}
		}
		now := b.set.now()
		b.forced = m
		// A new generation drops the report of any outstanding probe: the
		// operator's decision wins over it.
		b.gen++
		b.probeOut = false
		var p pending
		switch m {
		case ModeOpen:
			p = b.setState(Open, now)
		case ModeClosed:
			p = b.setState(Closed, now)
		case ModeAuto:
			b.count = 0
			p = b.setState(Closed, now)
		}
		p.tr.Manual, p.tr.Remote = true, remote
		return p
	})
	if err != nil {
		return err
	}
	if sh := b.set.share.Load(); !remote && sh != nil && sh.Forced != nil {
		sh.Forced(b.cfg.Key, m)
	}
	return nil
}
