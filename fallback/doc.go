// Package fallback decides which upstream answers a classified request, in
// one bounded loop over the addressed upstream, each later upstream of its
// format, a stale copy and the proxy's own answer (docs/behaviour.md, "When
// the addressed upstream cannot serve").
package fallback

// One attempt at one upstream is package attempt's job; the proxy's own
// answers are package answer's; what one format adds to the loop (docker's
// bearer tokens, PyPI's links) is its package's under fallback/format. This
// package owns what lies between: the order of the attempts, substitution,
// stale copies, the terminal answer, and the record of every attempt.
