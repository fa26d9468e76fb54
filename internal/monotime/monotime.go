// Package monotime measures local expiries on a clock that stepping the wall
// clock cannot move.
package monotime

import "time"

// Clock reads how much time has passed since the clock was made. Readings
// are only ever compared with one another, so the origin means nothing.
type Clock func() time.Duration

// Of returns the Clock that measures with now: each reading is now() minus
// the first reading, taken with time.Time.Sub. With time.Now both carry Go's
// monotonic reading and Sub uses it, so an NTP step or an operator's `date
// -s` changes nothing; a test's clock (whose readings carry none) is followed
// as it is. Nothing may turn a reading into wall-clock numbers (UnixNano,
// Unix) on the way: that drops the monotonic reading.
func Of(now func() time.Time) Clock {
	origin := now()
	return func() time.Duration { return now().Sub(origin) }
}
