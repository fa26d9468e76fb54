// Package coalesce lets identical GETs that arrive while one is being
// decided share that one decision: a single fetch whose answer every waiting
// client gets, with the body streamed to each from a spool on disk at the
// client's own pace (docs/behaviour.md §5.9).
package coalesce

// The package knows nothing of upstreams, breakers or formats: its caller
// says which requests are identical (Key), runs the whole decision in the
// function it hands to Do, and gets back, for each waiting client, an answer
// of its own. What makes the sharing safe — the same URL, credentials and
// variant headers, an answer that does not vary by anything the waiters
// differ in — is decided in key.go and vary.go; how long a fetch lives
// (until its last waiting client has gone) in group.go and flight.go; who
// reads the upstream's body in upstream.go; how a body is kept for readers
// of every pace in spool.go, and how much disk that may take in room.go.
