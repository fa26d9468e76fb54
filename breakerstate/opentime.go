package breakerstate

import (
	crand "crypto/rand"
	"math/rand/v2"
	"time"
)

// How long a breaker stays open (docs/behaviour.md §4): reset_timeout after
// the opening, doubled by each probe that fails in a row up to
// reset_timeout_max, back to reset_timeout once the upstream answers. Each
// open period is moved at random by up to ±jitter of its length, and so is
// each Retry-After, so that the probes of many processes and the retries of
// many clients do not arrive in step.

// maxJitter is the largest jitter share: beyond half, an open period could
// shrink to nothing.
const maxJitter = 0.5

// maxFailedProbes bounds the count of failed probes kept: far past the
// point where any open time reaches its maximum, and small enough that a
// remote value cannot make the doubling loop long.
const maxFailedProbes = 64

// openTime is the key's open time before jitter: reset_timeout doubled once
// per failed probe, never above reset_timeout_max (a maximum below
// reset_timeout means a fixed open time). Called with mu held.
func (b *breaker) openTime() time.Duration {
	d, hi := b.cfg.ResetTimeout, max(b.cfg.ResetTimeoutMax, b.cfg.ResetTimeout)
	for i := 0; i < b.failedProbes && d < hi; i++ {
		if d > hi/2 {
			return hi
		}
		d *= 2
	}
	return min(d, hi)
}

// longestPeriod is the longest open period this process could choose at
// the current growth: the open time with the whole jitter added. A period
// announced by another process is never held longer (remote.go). Called
// with mu held.
func (b *breaker) longestPeriod() time.Duration {
	d := b.openTime()
	return d + time.Duration(float64(d)*b.cfg.Jitter)
}

// startPeriod begins an open period at now: a jittered open time, with the
// probe due at its end. Called with mu held, before setState(Open).
func (b *breaker) startPeriod(now time.Time) {
	b.period = b.jitter(b.openTime())
	b.due = now.Add(b.period)
}

// pushOut applies NORA's rule that a failure while open pushes the next
// probe out: the probe falls due a whole period after it, never earlier
// than it already was. Called with mu held.
func (b *breaker) pushOut(now time.Time) {
	if d := now.Add(b.period); d.After(b.due) {
		b.due = d
	}
}

// jitter moves d by a uniform amount within ±Jitter of it. Called with mu
// held (the key's own generator is not safe for concurrent use).
func (b *breaker) jitter(d time.Duration) time.Duration {
	j := b.cfg.Jitter
	if j <= 0 || d <= 0 {
		return d
	}
	return d + time.Duration(float64(d)*j*(2*b.draw()-1))
}

// draw returns a number uniform in [0, 1): from the set's injected source
// when there is one, else from the key's own generator.
func (b *breaker) draw() float64 {
	if b.set.rand != nil {
		return b.set.rand()
	}
	if b.rng == nil {
		b.rng = newRand()
	}
	return b.rng.Float64()
}

// newRand is a generator seeded from the operating system, so that no two
// processes (and no two keys) draw the same jitter.
func newRand() *rand.Rand {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // crypto/rand.Read never fails (Go 1.24+)
	return rand.New(rand.NewChaCha8(seed))
}
