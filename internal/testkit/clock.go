package testkit

import (
	"sync/atomic"
	"time"
)

// Clock is a settable clock, safe for concurrent use: time moves only when
// a test says so, so no test sleeps to make a timeout pass. Reading it takes
// no lock, so it can stand in for time.Now in benchmarks of lock-free code.
type Clock struct {
	ns  atomic.Int64
	loc *time.Location
}

// NewClock returns a clock standing at start.
func NewClock(start time.Time) *Clock {
	c := &Clock{loc: start.Location()}
	c.ns.Store(start.UnixNano())
	return c
}

// Now reports the clock's time; pass it where code wants a func() time.Time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).In(c.loc) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
