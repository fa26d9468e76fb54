package main

import (
	"sync"
	"time"
)

// trace keeps every request of one load run: when it was sent, how long its
// client waited and what it got. Only the outage run keeps one (for its
// picture); the other sections need nothing but histograms.
type trace struct {
	start  time.Time // when the run began; set by runLoad
	mu     sync.Mutex
	points []tracePoint
}

// tracePoint is one request. status is 0 when the client gave up (its
// timeout) or the connection failed.
type tracePoint struct {
	at, latency time.Duration // sent at start+at
	status      int
}

// add merges one worker's requests (each worker collects its own, so the
// hot loop takes no lock).
func (t *trace) add(ps []tracePoint) {
	t.mu.Lock()
	t.points = append(t.points, ps...)
	t.mu.Unlock()
}

// span is the time from the run's start to the last answer.
func (t *trace) span() time.Duration {
	var end time.Duration
	for _, p := range t.points {
		end = max(end, p.at+p.latency)
	}
	return end
}
