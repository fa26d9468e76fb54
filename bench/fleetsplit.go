package main

import (
	"slices"
	"time"
)

// fleetAnswer is one request of the fleet workload as its client saw it:
// when it was sent, how long the answer took, and whether the request
// reached the dead upstream (the proxy's 504 after proxy_timeout; a refusal
// by the breaker is the proxy's own 503, at once).
type fleetAnswer struct {
	sent    time.Time
	took    time.Duration
	reached bool
}

// fleetSplit divides the requests that reached the dead upstream the way
// issue 25 bounds them: failure_threshold failures to learn the outage,
// the requests already in flight when the fleet learned it, and the probes
// after that, at most one per open period.
type fleetSplit struct {
	reached  int // requests that reached the upstream (by the clients' answers)
	inFlight int // sent before the fleet learned the outage, beyond the threshold's own
	probes   int // sent after the fleet learned it
	periods  int // open periods that can end within the run after that
}

// bound is failure_threshold + in-flight + one probe per open period.
func (s fleetSplit) bound(threshold int) int { return threshold + s.inFlight + s.periods }

// splitFleet works the split out from the answers. The fleet has learned
// the outage when the threshold-th failure came back to its client (the
// process that saw it opens then, and tells the others); a request sent
// within grace after that may still find a process that has not heard yet
// and counts as in flight. Open periods are counted at their shortest: the
// open time less its jitter, each followed by a probe that fails after
// probeFails (proxy_timeout), so the bound is never too tight.
func splitFleet(answers []fleetAnswer, threshold int, grace, minPeriod, probeFails time.Duration) fleetSplit {
	var reached []fleetAnswer
	var last time.Time
	for _, a := range answers {
		if a.reached {
			reached = append(reached, a)
		}
		if a.sent.After(last) {
			last = a.sent
		}
	}
	s := fleetSplit{reached: len(reached)}
	if len(reached) < threshold {
		return s // never learned: nothing in flight, no period
	}
	back := make([]time.Time, len(reached))
	for i, a := range reached {
		back[i] = a.sent.Add(a.took)
	}
	slices.SortFunc(back, time.Time.Compare)
	learned := back[threshold-1]
	for _, a := range reached {
		if a.sent.Before(learned.Add(grace)) {
			s.inFlight++
		} else {
			s.probes++
		}
	}
	s.inFlight -= threshold
	if w := last.Sub(learned); w >= minPeriod && minPeriod > 0 {
		s.periods = 1 + int((w-minPeriod)/(minPeriod+probeFails))
	}
	return s
}
