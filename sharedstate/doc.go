// Package sharedstate shares breaker state across a fleet of nora-breaker
// processes through Redis, so that an outage is learned once rather than
// once per pod: when one process opens a key, every process opens it until
// the same open_until; when that time passes, one process (the holder of a
// Redis lease) probes for all; its outcome closes or re-opens every process.
//
// Redis is never on a request's path. The breakers (package breakerstate)
// decide from local state only; this package listens to their transitions,
// writes and publishes them from one background goroutine with short
// timeouts, applies what other processes publish, and acquires probe leases
// ahead of time. While Redis is unreachable each process works alone, and
// it reconverges (resubscribe, re-read, republish) when Redis comes back.
// docs/shared-state.md states the semantics.
package sharedstate
