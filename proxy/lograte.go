package proxy

import (
	"sync"
	"time"
)

// goneLogBurst is how many log lines of requests whose client went away
// are written per second; the rest are counted in the next one written.
const goneLogBurst = 20

// lineLimiter lets the first burst lines of each interval through and
// counts the rest, so one noisy cause (a client resetting thousands of
// streams a second) cannot flood the log, while the next line that gets
// through says how many were left out. It has no timer: intervals start
// when a line arrives. Safe for concurrent use.
type lineLimiter struct {
	now      func() time.Time
	interval time.Duration
	burst    int

	mu         sync.Mutex
	start      time.Time // the current interval began here
	used       int       // lines let through in the current interval
	suppressed int64     // lines left out since the last one let through
}

func newLineLimiter(now func() time.Time, interval time.Duration, burst int) *lineLimiter {
	return &lineLimiter{now: now, interval: interval, burst: burst}
}

// allow reports whether a line may be written now and, if so, how many
// lines were left out before it.
func (l *lineLimiter) allow() (ok bool, suppressed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); l.start.IsZero() || now.Sub(l.start) >= l.interval || now.Before(l.start) {
		l.start, l.used = now, 0
	}
	if l.used >= l.burst {
		l.suppressed++
		return false, 0
	}
	l.used++
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
