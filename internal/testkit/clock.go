package testkit

import (
	"sync/atomic"
	"time"
)

// Clock is the injected clock: time moves only when a test says so, so no
// test sleeps to make a timeout pass. Safe for concurrent use; reading it
// takes no lock, so it can stand in for time.Now in benchmarks and -race
// tests of lock-free code.
type Clock struct {
	ns  atomic.Int64
	loc *time.Location
}

// NewClock returns a clock standing at a fixed instant, so a test's log
// lines and times read the same on every run.
func NewClock() *Clock { return NewClockAt(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)) }

// NewClockAt returns a clock standing at start, in start's location.
func NewClockAt(start time.Time) *Clock {
	c := &Clock{loc: start.Location()}
	c.ns.Store(start.UnixNano())
	return c
}

// Now reports the clock's time; pass it where code wants a func() time.Time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).In(c.loc) }

// Advance moves the clock by d (a negative d steps it back, as a wall
// clock can be stepped).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
