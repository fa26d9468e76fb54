package breakerstate

import (
	"math"
	"time"
)

// Snapshot is one breaker's state as shown by /breakers and /health.
type Snapshot struct {
	Key, Format        string
	State              State
	FailureCount       int
	Threshold          int
	ResetTimeout       time.Duration
	ThresholdSource    string
	ResetTimeoutSource string
	LastFailure        time.Time // zero if none
	// RetryAfter is when a rejected request could next be admitted, in
	// whole seconds (what it is told, before the jitter RetryAfter adds);
	// 0 while closed.
	RetryAfter time.Duration
	Rejections uint64
	Forced     string // "", "open" or "closed"
	// OpenTime is the length of the current open period while open or
	// half-open in automatic mode (grown and jittered), else the open time
	// the next opening starts from; FailedProbes how many probes of this
	// outage failed in a row; ResetTimeoutMax the bound of the growth (equal
	// to ResetTimeout when the open time is fixed) and Jitter its share.
	OpenTime        time.Duration
	FailedProbes    int
	ResetTimeoutMax time.Duration
	Jitter          float64
}

// Snapshot returns every breaker's state, in config order. Each entry is
// consistent in itself; entries are read one lock at a time.
func (s *Set) Snapshot() []Snapshot {
	t := s.table.Load()
	now := s.now()
	out := make([]Snapshot, 0, len(t.order))
	for _, b := range t.order {
		out = append(out, b.snapshot(now))
	}
	return out
}

// RetryAfter returns key's state and, when it rejects, the Retry-After for a
// synthesized 503: while open, the time until a probe is allowed, moved by
// the key's jitter, rounded up to whole seconds and at least 1s; while
// half-open 1s; while forced open reset_timeout, jittered and rounded up
// likewise; while closed 0. The bool is false for an unknown key. The
// jitter spreads the clients that were refused together over ±jitter of
// the wait, so they do not all come back at the instant the probe is due;
// the half-open 1s is the shortest answer there is and is not moved.
func (s *Set) RetryAfter(key string) (State, time.Duration, bool) {
	b := s.table.Load().byKey[key]
	if b == nil {
		return Closed, 0, false
	}
	now := s.now()
	var st State
	var d time.Duration
	known := false
	b.look(func() {
		if !b.retired {
			st, d = b.waitLocked(now)
			if st == Open {
				d = b.jitter(d)
			}
			d = roundWait(st, d)
			known = true
		}
	})
	return st, d, known
}

// Refusing reports whether key's breaker would refuse a request now, without
// counting a refusal or taking the probe: forced open, open with its probe
// not yet due, or half-open with its probe out. An unknown key, a disabled
// set, or a breaker whose probe is due, is not refusing.
//
// Unlike Admit, Refusing ignores the fleet's probe gate. It serves the
// token-realm exception (docs/behaviour.md §3.1, fallback/search.go): it is
// asked about a realm host on behalf of the registry that names it, to
// learn whether the realm is known to be down. Once the realm's probe is
// due it no longer is, whichever process the fleet elected to probe it: the
// registry is tried (a cached token may serve it), and the realm's
// own admission, the token fetch through Admit, applies the gate there, so
// the elected process probes and the others are refused at the realm.
func (s *Set) Refusing(key string) bool {
	b := s.table.Load().byKey[key]
	if b == nil {
		return false
	}
	refusing := false
	b.look(func() { refusing, _ = b.refuses(false) })
	return refusing
}

// waitLocked returns the reported state and how long a rejected request
// would have to wait, before jitter and rounding. Called with mu held.
func (b *breaker) waitLocked(now time.Time) (State, time.Duration) {
	if !b.enabled {
		return Closed, 0
	}
	switch {
	case b.forced == ModeOpen:
		// No probe will come by itself; reset_timeout is a sensible pace
		// for clients to come back and see whether it was released.
		return Open, b.cfg.ResetTimeout
	case b.state == Open:
		return Open, b.due.Sub(now)
	case b.state == HalfOpen:
		return HalfOpen, time.Second
	}
	return Closed, 0
}

// roundWait is the Retry-After of a wait: whole seconds, at least one,
// while the key rejects; 0 while closed.
func roundWait(st State, d time.Duration) time.Duration {
	if st == Closed {
		return 0
	}
	return ceilSeconds(d)
}

// ceilSeconds rounds d up to whole seconds, at least one: Retry-After is an
// integer number of seconds and 0 would invite an immediate retry storm.
func ceilSeconds(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	q := d / time.Second
	if d%time.Second != 0 && q < math.MaxInt64/time.Second {
		q++
	}
	return q * time.Second
}

// snapshot copies the breaker's state for the admin API.
func (b *breaker) snapshot(now time.Time) (s Snapshot) {
	b.look(func() { s = b.snapshotLocked(now) })
	return s
}

// snapshotLocked is snapshot's body. Called with mu held, through look.
func (b *breaker) snapshotLocked(now time.Time) Snapshot {
	st, wait := b.waitLocked(now)
	open := b.openTime()
	if b.forced == ModeAuto && b.state != Closed && b.period > 0 {
		open = b.period
	}
	s := Snapshot{
		Key:                b.cfg.Key,
		Format:             b.cfg.Format,
		State:              st,
		FailureCount:       b.count,
		Threshold:          b.cfg.FailureThreshold,
		ResetTimeout:       b.cfg.ResetTimeout,
		ThresholdSource:    b.cfg.ThresholdSource,
		ResetTimeoutSource: b.cfg.ResetTimeoutSource,
		LastFailure:        b.lastFailure,
		RetryAfter:         roundWait(st, wait),
		Rejections:         b.rejections,
		Forced:             forcedName(b.forced),
		OpenTime:           open,
		FailedProbes:       b.failedProbes,
		ResetTimeoutMax:    max(b.cfg.ResetTimeoutMax, b.cfg.ResetTimeout),
		Jitter:             b.cfg.Jitter,
	}
	return s
}
