package breakerstate

// Early opening (docs/behaviour.md §4): a black hole accepts connections
// and never answers, so each request that meets it waits out the whole
// header timeout before its failure counts. The attempts tell the breaker
// sooner that something is wrong: an attempt that has waited its suspect
// wait (suspect_after, or longer for a host that is slow by habit) with no
// header answer is silent, and failure_threshold silent attempts with no
// answer from the host in between open the breaker then, with the attempts
// still waiting on it told at once so that their requests can go on to a
// candidate or a stale copy. Any header answer (a 5xx too: a host that
// answers is no black hole) starts the count again. Only requests admitted
// while closed count; the probe has its own verdict to wait for.

// noRelease is the release of an attempt that registered nothing.
func noRelease() {}

// Suspect counts the attempt admitted by t as silent: it has waited its
// suspect wait without response headers. It counts as requests silent
// requests, at least one: an attempt that several clients wait on (a
// fetch identical requests share, docs/behaviour.md §5.9) is as many
// requests waiting on a silent host, and sharing a fetch must not make a
// hot URL's black hole slower to learn than many URLs'. onOpen (nil: none)
// is called once, outside the breaker's lock, if the breaker opens while
// the attempt still waits, whatever opens it, and at once when it is open
// already. The returned release must be called when the attempt stops
// waiting; it is safe to call after onOpen has run. A zero Ticket, a probe
// and a disabled or retired breaker count nothing.
func (t Ticket) Suspect(requests int, onOpen func()) (release func()) {
	b := t.b
	if b == nil || t.kind != kindAdmitted {
		return noRelease
	}
	id, wakeNow := uint64(0), false
	b.write(func() (p pending) {
		switch {
		case b.retired || !b.enabled:
			return p
		case b.forced == ModeOpen || b.state == Open:
			wakeNow = true
			return p
		}
		if onOpen != nil {
			if b.waiters == nil {
				b.waiters = make(map[uint64]func())
			}
			b.waiterSeq++
			id = b.waiterSeq
			b.waiters[id] = onOpen
		}
		if b.state != Closed {
			return p // half-open: its probe decides
		}
		b.silent += max(requests, 1)
		if b.forced != ModeAuto || b.silent < b.cfg.FailureThreshold {
			return p
		}
		now := b.set.now()
		b.lastFailure = now
		b.startPeriod(now)
		p = b.setState(Open, now)
		p.tr.Silent = true
		return p
	})
	if wakeNow && onOpen != nil {
		onOpen()
	}
	if id == 0 {
		return noRelease
	}
	return func() {
		b.write(func() pending {
			delete(b.waiters, id)
			return pending{}
		})
	}
}

// Heard tells t's breaker that the attempt got response headers: its host
// answered, so the silent attempts counted so far are no black hole's
// evidence. It reads one atomic word unless silent attempts are counted.
func (t Ticket) Heard() {
	b := t.b
	if b == nil || b.fast.Load()&fastSilent == 0 {
		return
	}
	b.write(func() pending {
		b.silent = 0
		return pending{}
	})
}

// wakeWaiters hands the callbacks of the attempts waiting on the breaker to
// the transition being decided, to be called after the lock is released.
// Called with mu held, by setState on every move to Open.
func (b *breaker) wakeWaiters(p *pending) {
	for id, f := range b.waiters {
		p.wake = append(p.wake, f)
		delete(b.waiters, id)
	}
}
