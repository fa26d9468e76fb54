// Package attempt makes one attempt at one upstream and says what it meant
// for that upstream's health. It bounds the wait for response headers and
// the idle time while reading the body, measures the attempt, and reports the
// outcome to the breaker ticket that admitted it exactly once: at header time
// when the headers decide, or when the body ends when the body decides.
//
// It knows nothing of candidates, stale copies or clients: package fallback
// decides which attempts to make, and package answer turns what went wrong
// into the client's answer. The rules it applies are written down in
// docs/behaviour.md, "What an attempt means for an upstream".
package attempt
