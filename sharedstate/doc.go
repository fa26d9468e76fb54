// Package sharedstate shares breaker state across a fleet of nora-breaker
// processes through Redis, in the background only, so that an outage is
// learned and probed once for the fleet instead of once per pod
// (docs/shared-state.md).
package sharedstate

// Redis is never on a request's path. The breakers (package breakerstate)
// decide from local state only; this package listens to their transitions,
// writes and publishes them from one background goroutine with short
// timeouts, applies what other processes publish, and acquires probe leases
// ahead of time. While Redis is unreachable each process works alone, and it
// reconverges (resubscribe, re-read, republish) when Redis comes back.
// docs/shared-state.md states the semantics.
