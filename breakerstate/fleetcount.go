package breakerstate

// Fleet-wide counting (docs/shared-state.md): with a fleet-sharing layer
// installed, a process tells the fleet about each failure it counts while
// a key is closed, and about the success that ends such a run; every
// process adds the others' failures to its own count and resets it on
// their recoveries, so a key opens everywhere after failure_threshold
// failures of the whole fleet rather than of each process. Successes on a
// clean breaker are not told: they change nothing, and the healthy path
// takes no lock to learn that (fastQuiet).

// counted says what the fleet is to hear of one report.
type counted uint8

const (
	countedNone     counted = iota
	countedFailure          // a failure counted while closed
	countedRecovery         // the success that set a count above 0 back to 0
)

// shareCount hands a counted report to the fleet-sharing layer, outside
// the key's lock.
func (b *breaker) shareCount(c counted) {
	sh := b.set.share.Load()
	if sh == nil {
		return
	}
	switch {
	case c == countedFailure && sh.Failure != nil:
		sh.Failure(b.cfg.Key)
	case c == countedRecovery && sh.Recovery != nil:
		sh.Recovery(b.cfg.Key)
	}
}

// ApplyRemoteFailure counts a failure another process counted for key.
// While the key is closed it adds one to the count and stamps the last
// failure, and opens the key when the count reaches the threshold; that
// opening is this process's own decision (Transition.Fleet), so it is told
// to the fleet like any other, which is what starts the fleet's probe
// election when no process reached the threshold by a failure of its own.
// An open or half-open key ignores it: the opening, and its probe, decide.
// Keys in a forced mode only count, and a disabled set ignores it.
func (s *Set) ApplyRemoteFailure(key string) error {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return err
	}
	b.write(func() (p pending) {
		if b.retired || !b.enabled || b.state != Closed || b.forced == ModeOpen {
			return p
		}
		now := s.now()
		b.count++
		b.lastFailure = now
		if b.forced == ModeAuto && b.count >= b.cfg.FailureThreshold {
			b.startPeriod(now)
			p = b.setState(Open, now)
			p.tr.Fleet = true
		}
		return p
	})
	return nil
}

// ApplyRemoteRecovery resets key's count because another process's request
// succeeded after failures: the upstream works, so the failures counted so
// far are no longer consecutive. Only a closed key's count is reset; an
// open key waits for its probe, or for the fleet's close.
func (s *Set) ApplyRemoteRecovery(key string) error {
	b, err := s.remoteBreaker(key)
	if err != nil {
		return err
	}
	b.write(func() pending {
		if !b.retired && b.enabled && b.state == Closed {
			b.count = 0
		}
		return pending{}
	})
	return nil
}
