// Package attempt makes one attempt at one upstream: it bounds the wait for
// the response headers and the body's idle time, measures the attempt, and
// reports to the breaker ticket that admitted it, exactly once, what the
// attempt meant for that upstream's health.
package attempt

// It knows nothing of candidates, stale copies or clients: package fallback
// decides which attempts to make, and package answer turns what went wrong
// into the client's answer. The rules it applies are written down in
// docs/behaviour.md, "What an attempt means for an upstream".
