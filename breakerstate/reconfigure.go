package breakerstate

import "time"

// Reconfigure applies a reloaded configuration without dropping state: keys
// that still exist keep their state, count and forced mode, with the new
// threshold and reset_timeout taking effect from their next event (a lowered
// threshold does not open a breaker by itself; the next failure does). Keys
// that left are dropped with their metric series; new keys start Closed.
// Turning the set off resets every breaker to Closed (automatic, count 0,
// no last failure) and removes the state gauges; turning it on starts every
// key Closed with its gauge at 0.
//
// Config validation runs before this, so invalid entries are not expected;
// should one arrive anyway it is made harmless rather than refused
// (sanitize; an empty or repeated key is skipped), because a reload has no
// way to fail here. A key that stays keeps its count of failed probes: its
// open time follows the new reset_timeout and reset_timeout_max from the
// next period on.
func (s *Set) Reconfigure(enabled bool, keys []KeySettings) {
	s.reconfMu.Lock()
	defer s.reconfMu.Unlock()
	old := s.table.Load()
	next := s.buildTable(enabled, keys, old)
	s.table.Store(next)
	for key, b := range old.byKey {
		if next.byKey[key] == b {
			continue
		}
		b.write(func() pending {
			b.retired = true
			return pending{}
		})
		// Deleted after retiring: a retired breaker never binds a label
		// child again, so the series cannot come back.
		s.metrics.forget(key)
	}
}

// buildTable makes a table for keys, reusing old's breakers for keys it
// already has (old may be nil).
func (s *Set) buildTable(enabled bool, keys []KeySettings, old *table) *table {
	t := &table{
		enabled: enabled,
		byKey:   make(map[string]*breaker, len(keys)),
		order:   make([]*breaker, 0, len(keys)),
	}
	for _, k := range keys {
		if k.Key == "" || t.byKey[k.Key] != nil {
			continue
		}
		k = sanitize(k)
		var b *breaker
		if old != nil {
			b = old.byKey[k.Key]
		}
		if b == nil {
			b = &breaker{set: s}
		}
		s.apply(b, enabled, k)
		t.byKey[k.Key] = b
		t.order = append(t.order, b)
	}
	return t
}

// sanitize makes invalid settings harmless (see Reconfigure): a threshold
// below 1 counts as 1, negative times as 0, a jitter outside [0, 0.5] as
// the nearest end of it (NaN as none).
func sanitize(k KeySettings) KeySettings {
	k.FailureThreshold = max(k.FailureThreshold, 1)
	k.ResetTimeout = max(k.ResetTimeout, 0)
	k.ResetTimeoutMax = max(k.ResetTimeoutMax, 0)
	if !(k.Jitter > 0) {
		k.Jitter = 0
	}
	k.Jitter = min(k.Jitter, maxJitter)
	return k
}

// apply installs settings and the enabled flag on one breaker.
func (s *Set) apply(b *breaker, enabled bool, k KeySettings) {
	b.write(func() pending {
		s.applyLocked(b, enabled, k)
		return pending{}
	})
}

// applyLocked is apply's body. Called with mu held, through write.
func (s *Set) applyLocked(b *breaker, enabled bool, k KeySettings) {
	before := b.openTime()
	b.cfg = k
	if b.enabled == enabled {
		if b.state == Open && b.forced == ModeAuto && b.openTime() != before {
			// The open period in progress takes the new open time, counted
			// from where it started (its last failure), as NORA's
			// reset_timeout would.
			start := b.due.Add(-b.period)
			b.startPeriod(start)
		}
		return
	}
	b.enabled = enabled
	// Whether switching on or off, start from a clean Closed breaker: a
	// disabled breaker records nothing, so any older state is stale.
	b.state = Closed
	b.forced = ModeAuto
	b.count = 0
	b.silent = 0
	b.lastFailure = time.Time{}
	b.failedProbes, b.period, b.due = 0, 0, time.Time{}
	b.gen++
	b.probeOut = false
	b.permit = false
	if enabled {
		b.m = s.metrics.bind(k.Key, Closed)
		return
	}
	if b.m.state != nil {
		s.metrics.unbindState(k.Key)
		b.m.state = nil
	}
}

// Adjust adds the breakers of keys the set does not have yet and drops
// those of remove, leaving every other key exactly as it is: no settings
// re-applied, no state touched. It is the narrow call for keys that come
// and go between reloads (hosts learned from redirects); a whole new
// configuration goes through Reconfigure.
func (s *Set) Adjust(add []KeySettings, remove []string) {
	s.reconfMu.Lock()
	defer s.reconfMu.Unlock()
	old := s.table.Load()
	gone := make(map[string]bool, len(remove))
	for _, k := range remove {
		gone[k] = true
	}
	next := &table{enabled: old.enabled, byKey: make(map[string]*breaker, len(old.byKey)+len(add)),
		order: make([]*breaker, 0, len(old.order)+len(add))}
	for _, b := range old.order {
		if !gone[b.cfg.Key] {
			next.byKey[b.cfg.Key] = b
			next.order = append(next.order, b)
		}
	}
	for _, k := range add {
		if k.Key == "" || next.byKey[k.Key] != nil || gone[k.Key] {
			continue
		}
		k = sanitize(k)
		b := &breaker{set: s}
		s.apply(b, old.enabled, k)
		next.byKey[k.Key] = b
		next.order = append(next.order, b)
	}
	s.table.Store(next)
	for _, k := range remove {
		if b := old.byKey[k]; b != nil {
			b.write(func() pending {
				b.retired = true
				return pending{}
			})
			s.metrics.forget(k)
		}
	}
}

// Keys lists the configured keys in order.
func (s *Set) Keys() []string {
	t := s.table.Load()
	out := make([]string, len(t.order))
	for i, b := range t.order {
		out[i] = b.cfg.Key
	}
	return out
}
