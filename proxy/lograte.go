package proxy

import (
	"sync"
	"time"
)

// goneLogBurst is how many log lines of requests whose client went away
// are written per second; the rest are counted in the next one written.
const goneLogBurst = 20

// acceptLogBurst is how many failed accepts on the proxy port are logged
// in one second; net/http backs off its retries up to one a second.
const acceptLogBurst = 5

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

// refusalLimiters summarise the log lines of refusals (the proxy's own 503s
// and 429s, policy's 403s) per key and kind during an outage
// (docs/behaviour.md §9): the first line in full, then at most one line a
// second, saying how many were left out. Metrics count every one. The keys
// are breaker keys and fixed kinds, so the map stays small; it is cleared
// should it ever grow past maxRefusalKeys.
type refusalLimiters struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*lineLimiter
}

const maxRefusalKeys = 4096

func newRefusalLimiters(now func() time.Time) *refusalLimiters {
	return &refusalLimiters{now: now, m: map[string]*lineLimiter{}}
}

// allow reports whether a refusal line for key may be written now and, if
// so, how many were left out before it.
func (r *refusalLimiters) allow(key string) (bool, int64) {
	r.mu.Lock()
	l := r.m[key]
	if l == nil {
		if len(r.m) >= maxRefusalKeys {
			clear(r.m)
		}
		l = newLineLimiter(r.now, time.Second, 1)
		r.m[key] = l
	}
	r.mu.Unlock()
	return l.allow()
}
