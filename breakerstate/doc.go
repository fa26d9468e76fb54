// Package breakerstate keeps one circuit breaker per breaker key (an upstream
// or a format) and decides, in a few tens of nanoseconds and without timers,
// whether a request may reach that upstream.
//
// The design follows sony/gobreaker v2: the state is computed lazily from an
// injected clock when a request arrives, the half-open probe carries a
// generation number so that a late report from a superseded probe is ignored,
// and the API is split in two steps (Allow, then Ticket.Done) to fit a proxy
// that learns the outcome only after the response has been streamed.
//
// The semantics are NORA's (docs/behaviour.md §4): Closed counts consecutive failures
// and opens at the key's threshold, Open rejects until its open time has
// passed since the last failure, HalfOpen admits exactly one probe. The open
// time is reset_timeout, doubled by each failed probe up to
// reset_timeout_max and jittered (opentime.go); with a fleet-sharing layer
// the count is the fleet's (fleetcount.go) and openings come from it too,
// bounded by this process's own settings (remote.go). The package also owns
// the breaker metrics of docs/behaviour.md §7.
package breakerstate
