// Package fallback decides which upstream answers a classified request. It
// runs one bounded loop: the addressed upstream while its breaker admits it,
// then, for a GET or HEAD it could not serve, each later upstream of the
// same format (with the request rewritten for that upstream and its own
// credentials), then a stale copy, then the proxy's own answer. Each step of
// the loop is one check; docs/behaviour.md, "When the addressed upstream
// cannot serve", is the account of it.
//
// One attempt at one upstream is package attempt's job; the proxy's own
// answers are package answer's; what one format adds to the loop (docker's
// bearer tokens, PyPI's links) is its package's under fallback/format. This
// package owns what lies between: the order of the attempts, substitution,
// stale copies, the terminal answer, and the record of every attempt.
package fallback
