package breakerstate

import (
	"fmt"
	"time"
)

// Share is what a fleet-sharing layer (package sharedstate) hears from a
// Set, so that several processes in front of the same upstreams can learn an
// outage once. The Set never waits on it: both calls are made after the
// key's lock is released and must return quickly (queue, never do I/O).
type Share struct {
	// Transition is called after each state change this process decided by
	// itself (an opening ApplyRemoteFailure caused included). It is not
	// called for changes applied through ApplyRemoteOpen, ApplyRemoteClose
	// or ApplyRemoteForce (they came from the fleet) nor for forced modes
	// (see Forced).
	Transition func(Transition)
	// Forced is called after each successful local Force.
	Forced func(key string, m Mode)
	// Failure is called after each failure of this process's requests
	// counted while the key is closed, except the one that opens it (the
	// opening is told through Transition); Recovery after the success that
	// set a count above 0 back to 0 (fleetcount.go).
	Failure  func(key string)
	Recovery func(key string)
}

// SetShare installs the fleet-sharing hooks; nil detaches them. It also
// turns the probe gate off: a Set without a fleet probes on its own.
func (s *Set) SetShare(sh *Share) {
	s.share.Store(sh)
	if sh == nil {
		s.gated.Store(false)
	}
}

// SetProbeGate turns the fleet's probe election on or off. While on, a key
// whose open period has passed admits its half-open probe only if this
// process holds the fleet's lease for it (SetProbePermit); otherwise the
// request is rejected as Open with a Retry-After of 1s. The sharing layer
// turns it off whenever it loses its connection, so that each process then
// probes alone rather than never.
func (s *Set) SetProbeGate(on bool) { s.gated.Store(on) }

// ProbeGated reports whether the fleet's probe election is on.
func (s *Set) ProbeGated() bool { return s.gated.Load() }

// SetProbePermit records whether this process holds the fleet's probe lease
// for key's current open period. The permit lapses by itself when the
// breaker next moves to Open or Closed, because a new period needs a new
// lease.
func (s *Set) SetProbePermit(key string, ok bool) error {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return err
	}
	b.write(func() pending {
		if b.state != Closed {
			b.permit = ok
		}
		return pending{}
	})
	return nil
}

// gatedOut reports whether the probe election forbids this process to probe
// now. Called with mu held, only off the healthy path.
func (b *breaker) gatedOut() bool {
	return b.set.gated.Load() && !b.permit
}

// ApplyRemoteOpen opens key because another process opened it: its probe
// falls due in, and failedProbes of its probes failed in a row. It returns
// when this process's probe now falls due (zero when it changed nothing).
//
// A remote open is bounded by this process's own settings, so that neither
// a peer's clock nor a broken or hostile message can hold a healthy
// upstream open: in is cut to [0, the longest period this process would
// choose itself at that growth] (reset_timeout doubled per failed probe up
// to reset_timeout_max, plus the whole jitter), and failedProbes to what
// can matter. The later of the local and the remote due time wins, so a
// stale message cannot shorten an open period. An outstanding local probe
// is fenced. Keys in a forced mode, and a disabled set, ignore it.
func (s *Set) ApplyRemoteOpen(key string, in time.Duration, failedProbes int) (time.Time, error) {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return time.Time{}, err
	}
	var due time.Time
	b.write(func() (p pending) {
		if b.retired || !b.enabled || b.forced != ModeAuto {
			return p
		}
		now := s.now()
		b.failedProbes = max(b.failedProbes, min(failedProbes, maxFailedProbes))
		in = min(max(in, 0), b.longestPeriod())
		if b.state == Open {
			if d := now.Add(in); d.After(b.due) {
				// The fleet's new period (its probe failed elsewhere) is
				// this process's period too.
				b.due, b.period = d, max(b.period, in)
			}
			// Still a new open period for the fleet: the old lease is spent.
			b.permit = false
			due = b.due
			return p
		}
		b.period, b.due = in, now.Add(in)
		due = b.due
		p = b.setState(Open, now)
		p.tr.Remote = true
		return p
	})
	return due, nil
}

// ApplyRemoteClose closes key because the fleet's probe succeeded
// elsewhere: count 0, Closed, outstanding probe fenced. Keys in a forced
// mode, and a disabled set, ignore it.
func (s *Set) ApplyRemoteClose(key string) error {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return err
	}
	b.write(func() (p pending) {
		if !b.enabled || b.forced != ModeAuto {
			return p
		}
		b.count = 0
		p = b.setState(Closed, b.set.now())
		p.tr.Remote = true
		return p
	})
	return nil
}

// ApplyRemoteForce applies a manual mode set on another process. It behaves
// like Force except that Share.Forced is not called, so the mode does not
// echo back to the fleet.
func (s *Set) ApplyRemoteForce(key string, m Mode) error {
	if m > ModeClosed {
		return fmt.Errorf("remote force %q: mode %d: %w", key, uint8(m), ErrInvalidMode)
	}
	b, err := s.remoteBreaker(key)
	if err != nil {
		return err
	}
	if err := b.force(m, true); err != nil {
		return fmt.Errorf("remote force %q: %w", key, err)
	}
	return nil
}

// remoteBreaker looks key up for the ApplyRemote* calls; a key this process
// does not know (the fleet runs mixed configurations during a rollout) is
// ErrUnknownKey, which the caller ignores.
func (s *Set) remoteBreaker(key string) (*breaker, error) {
	b := s.table.Load().byKey[key]
	if b == nil {
		return nil, fmt.Errorf("remote %q: %w", key, ErrUnknownKey)
	}
	return b, nil
}

// Status is one key's state as the fleet-sharing layer needs it to
// resynchronise after a reconnect.
type Status struct {
	Key    string
	State  State
	Forced Mode
	// OpenUntil is when the probe falls due, while Open or HalfOpen in
	// automatic mode, as a reading of the set's clock; zero otherwise.
	OpenUntil    time.Time
	ResetTimeout time.Duration
	// FailedProbes is the growth of the open time (Transition.FailedProbes).
	FailedProbes int
}

// Statuses returns every enabled key's Status, in config order; nil while
// the set is disabled.
func (s *Set) Statuses() []Status {
	t := s.table.Load()
	if !t.enabled {
		return nil
	}
	out := make([]Status, 0, len(t.order))
	for _, b := range t.order {
		var st Status
		var enabled bool
		b.look(func() {
			st = Status{Key: b.cfg.Key, State: b.state, Forced: b.forced, ResetTimeout: b.cfg.ResetTimeout,
				FailedProbes: b.failedProbes}
			if b.forced == ModeAuto && b.state != Closed {
				st.OpenUntil = b.due
			}
			enabled = b.enabled && !b.retired
		})
		if enabled {
			out = append(out, st)
		}
	}
	return out
}

// ResetTimeout returns key's reset_timeout, which the fleet-sharing layer
// needs to size probe leases for keys opened by other processes.
func (s *Set) ResetTimeout(key string) (time.Duration, error) {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	b.look(func() { d = b.cfg.ResetTimeout })
	return d, nil
}

// OpenBound returns the longest open period key's breaker would choose by
// itself now: its open time at the current growth with the whole jitter
// added. It is the bound ApplyRemoteOpen applies, which the fleet-sharing
// layer also applies to what it finds stored.
func (s *Set) OpenBound(key string) (time.Duration, error) {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	b.look(func() { d = b.longestPeriod() })
	return d, nil
}
